import Enlarger
import EnlargerBroker
import Foundation
import TestSupport
import Telemetry
import XCTest

/// The `enlarger` binary as people use it: run as a process, its output read as text.
final class CLITests: XCTestCase {
    // MARK: - Flags, help, version

    func testVersionIsPrintedByBothExecutables() throws {
        let enlarger = try run(["--version"])
        XCTAssertEqual(enlarger.status, 0, enlarger.stderr)
        let version = enlarger.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertNotNil(version.range(of: #"^\d+\.\d+\.\d+$"#, options: .regularExpression), version)
        let bench = try run(["--version"], binary: Cluster.enlargerBinary.deletingLastPathComponent()
            .appendingPathComponent("enlarger-bench"))
        XCTAssertEqual(bench.stdout.trimmingCharacters(in: .whitespacesAndNewlines), version)
    }

    /// libheif, libavif and libjxl (and the thirty libraries they pull in) are loaded when an
    /// image needs them, not at start: `--version`, a client or a JPEG never maps them. Read
    /// from the dynamic loader's own account of what it opened (LD_DEBUG=files).
    func testHEIFAVIFAndJXLLibrariesAreLoadedOnlyWhenAnImageNeedsThem() throws {
        let lazy = ["libheif.so", "libavif.so", "libjxl.so"]
        func loaded(_ arguments: [String]) throws -> [String] {
            let result = try run(arguments, environment: ["LD_DEBUG": "files"])
            XCTAssertEqual(result.status, 0, "\(arguments): \(result.stdout)")
            let opened = result.stderr.split(separator: "\n").filter { $0.contains("file=") }
            XCTAssertFalse(opened.isEmpty, "the loader reported nothing: LD_DEBUG was not honoured")
            return lazy.filter { name in opened.contains { $0.contains("file=\(name)") } }
        }
        XCTAssertEqual(try loaded(["--version"]), [])
        XCTAssertEqual(try loaded(["info", Corpus.root.appendingPathComponent("good/bimg_vertical.jpg").path]), [])
        for (image, library) in [("heic-rgb.heic", "libheif.so"), ("avif-rgb.avif", "libavif.so"), ("jxl-lossy.jxl", "libjxl.so")] {
            XCTAssertEqual(try loaded(["info", SampleImages.root.appendingPathComponent(image).path]), [library], image)
        }
    }

    func testShortHIsHelpEverywhere() throws {
        for command in ["submit", "resize", "serve", "broker", "worker", "status", "cancel", "keygen"] {
            let result = try run([command, "-h"])
            XCTAssertEqual(result.status, 0, "\(command): \(result.stderr)")
            XCTAssert(result.stdout.contains("USAGE:"), "\(command) -h: \(result.stdout)")
        }
        let height = try run(["resize", "x.jpg", "-H", "0", "--out", "/tmp"])
        XCTAssert(height.stderr.contains("height"), height.stderr)
    }

    func testNegativeWidthGivesTheSameMessageInBothSpellings() throws {
        let separate = try run(["resize", "x.jpg", "--width", "-5", "--out", "/tmp"])
        let joined = try run(["resize", "x.jpg", "--width=-5", "--out", "/tmp"])
        XCTAssertNotEqual(separate.status, 0)
        XCTAssertEqual(separate.stderr, joined.stderr)
        XCTAssert(separate.stderr.contains("-5"), separate.stderr)
    }

    func testEndpointWithoutSchemeGetsASuggestion() throws {
        let status = try run(["status", "--broker", "localhost:5570"])
        XCTAssertNotEqual(status.status, 0)
        XCTAssert(status.stderr.contains("did you mean tcp://localhost:5570?"), status.stderr)
        let worker = try run(["worker", "--broker", "/run/enlarger/workers.sock"])
        XCTAssert(worker.stderr.contains("did you mean ipc:///run/enlarger/workers.sock?"), worker.stderr)
        let fromEnvironment = try run(["status"], environment: ["ENLARGER_BROKER": "broker:5570"])
        XCTAssert(fromEnvironment.stderr.contains("ENLARGER_BROKER"), fromEnvironment.stderr)
        XCTAssert(fromEnvironment.stderr.contains("did you mean tcp://broker:5570?"), fromEnvironment.stderr)
    }

    func testAMisspeltOptionIsReportedAsUnknownWithTheCloseOne() throws {
        for arguments in [["submit", "x.jpg", "--widht", "10", "--out", "/tmp"],
                          ["resize", "x.jpg", "--widht=10", "--out", "/tmp"],
                          ["sync", "photos", "--out", "thumbs", "--widht", "10"]] {
            let result = try run(arguments)
            XCTAssertEqual(result.status, 64, "\(arguments): \(result.stderr)")
            XCTAssert(result.stderr.hasPrefix("Error: Unknown option '--widht'. Did you mean '--width'?\n"), result.stderr)
            XCTAssert(result.stderr.contains("See 'enlarger \(arguments[0]) --help'"), result.stderr)
        }
        let far = try run(["status", "--frobnicate"])
        XCTAssert(far.stderr.hasPrefix("Error: Unknown option '--frobnicate'.\n"), far.stderr)
        // After `--` everything is an input, and options ArgumentParser adds are known.
        XCTAssertEqual(try run(["submit", "--help"]).status, 0)
        let terminated = try run(["resize", "--width", "10", "--out", try temporaryDirectory().path, "--", "--widht"])
        XCTAssertFalse(terminated.stderr.contains("Unknown option"), terminated.stderr)
    }

    /// Every check of a number names the flag, so that a value from the environment is
    /// reported under its variable.
    func testALimitOutOfRangeNamesItsFlagOrVariable() throws {
        let directory = try temporaryDirectory()
        let endpoints = ["--clients", "ipc://\(directory.path)/c.sock", "--workers", "ipc://\(directory.path)/w.sock"]
        for (flag, value) in [("--queue-limit", "0"), ("--heartbeat-ms", "0"), ("--default-deadline", "0"),
                              ("--cancel-ack-timeout", "0"), ("--client-patience", "0"), ("--max-bytes", "0")] {
            let flagged = try run(["broker"] + endpoints + [flag, value])
            XCTAssertNotEqual(flagged.status, 0)
            XCTAssert(flagged.stderr.contains("\(flag) must be positive"), flagged.stderr)
            let variable = "ENLARGER_" + flag.dropFirst(2).uppercased().replacingOccurrences(of: "-", with: "_")
            let fromEnvironment = try run(["broker"] + endpoints, environment: [variable: value])
            XCTAssert(fromEnvironment.stderr.contains("\(variable)=\(value): \(flag) must be positive"), fromEnvironment.stderr)
        }
        let worker = try run(["worker", "--broker", "ipc://\(directory.path)/w.sock"], environment: ["ENLARGER_CONCURRENCY": "0"])
        XCTAssert(worker.stderr.contains("ENLARGER_CONCURRENCY=0: --concurrency must be 1 to 1024"), worker.stderr)
        let limits = try run(["worker", "--broker", "ipc://\(directory.path)/w.sock"], environment: ["ENLARGER_MAX_PIXELS": "0"])
        XCTAssert(limits.stderr.contains("ENLARGER_MAX_PIXELS=0: --max-pixels must be positive"), limits.stderr)
    }

    /// Help reads cleanly: no word said twice in a row, no ragged runs of spaces inside a
    /// sentence, no option whose explanation hangs below it on its own indentation, and codes
    /// as the contract names them.
    func testHelpTextsReadCleanly() throws {
        let commands = ["serve", "submit", "cancel", "status", "broker", "worker", "health", "resize", "info", "sync", "keygen"]
        for command in commands {
            let help = try run([command, "--help"]).stdout
            let prose = help.replacingOccurrences(of: "--client-keys keys", with: "")
                .replacingOccurrences(of: "--url-max-redirects redirects", with: "")
            let words = prose.split(whereSeparator: { $0.isWhitespace }).map { $0.lowercased() }
            for (first, second) in zip(words, words.dropFirst()) where first == second && first.allSatisfy(\.isLetter) {
                XCTFail("\(command) --help says '\(first) \(second)'")
            }
            for line in help.split(separator: "\n") {
                XCTAssertNil(line.range(of: #"[^ ]   +[^ ]"#, options: .regularExpression).flatMap { _ in
                    line.hasPrefix("  -") || line.hasPrefix("  <") ? nil : line }, "\(command): ragged spacing: \(line)")
                XCTAssertFalse(line.hasPrefix("        ") && !line.hasPrefix("                          "),
                               "\(command): an explanation hangs below its option: \(line)")
            }
            for swiftName in ["deadlineExceeded", "workerLost", "notJPEG", "unknownFormat", "tooLarge", "outputExists"] {
                XCTAssertFalse(help.contains(swiftName), "\(command) --help names \(swiftName)")
            }
        }
    }

    // MARK: - Configuration from the environment

    /// The client commands read ENLARGER_INSECURE_TCP as the services do: `1` or `true`, and
    /// anything else is an error naming the variable; without it, tcp without keys is refused.
    func testClientCommandsReadInsecureTCPAsTheServicesDo() throws {
        let endpoint = "tcp://127.0.0.1:\(try unusedPort())"
        let refused = try run(["status", "--broker", endpoint])
        XCTAssertEqual(refused.status, 1)
        XCTAssert(refused.stderr.contains("refusing to connect to \(endpoint) without authentication"), refused.stderr)
        XCTAssert(refused.stderr.contains("--server-public-key") && refused.stderr.contains("ENLARGER_INSECURE_TCP"), refused.stderr)
        for value in ["1", "true", "TRUE", "yes"] {
            let allowed = try run(["health", "--broker", endpoint, "--timeout-ms", "300"],
                                  environment: ["ENLARGER_INSECURE_TCP": value])
            XCTAssert(allowed.stderr.contains("unhealthy: \(endpoint): no broker answered"), "\(value): \(allowed.stderr)")
        }
        for value in ["0", "false"] {
            let off = try run(["status", "--broker", endpoint], environment: ["ENLARGER_INSECURE_TCP": value])
            XCTAssert(off.stderr.contains("without authentication"), "\(value): \(off.stderr)")
        }
        let wrong = try run(["status", "--broker", endpoint], environment: ["ENLARGER_INSECURE_TCP": "maybe"])
        XCTAssertEqual(wrong.status, 1)
        XCTAssert(wrong.stderr.contains("ENLARGER_INSECURE_TCP=maybe: expected 1 or true"), wrong.stderr)
        let worker = try run(["worker", "--broker", endpoint], environment: ["ENLARGER_INSECURE_TCP": "maybe"])
        XCTAssert(worker.stderr.contains("ENLARGER_INSECURE_TCP=maybe: expected 1 or true"), worker.stderr)
    }

    func testBrokerTakesEveryFlagFromTheEnvironmentAndAFlagWins() async throws {
        let directory = try temporaryDirectory()
        let clients = "ipc://\(directory.path)/clients.sock"
        var environment = [
            "ENLARGER_CLIENTS": clients, "ENLARGER_WORKERS": "ipc://\(directory.path)/workers.sock",
            "ENLARGER_QUEUE_LIMIT": "7", "ENLARGER_LOG_FORMAT": "json",
        ]
        let fromEnvironment = try await brokerQueueLimit(arguments: [], environment: environment, clients: clients)
        XCTAssertEqual(fromEnvironment.queueLimit, 7)
        // Every log line is one JSON object.
        let lines = fromEnvironment.log.split(separator: "\n")
        XCTAssertFalse(lines.isEmpty)
        for line in lines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            XCTAssertNotNil(object?["message"], String(line))
            XCTAssertNotNil(object?["level"], String(line))
        }

        environment["ENLARGER_LOG_FORMAT"] = nil
        let flagWins = try await brokerQueueLimit(arguments: ["--queue-limit", "9"], environment: environment, clients: clients)
        XCTAssertEqual(flagWins.queueLimit, 9)

        environment["ENLARGER_QUEUE_LIMIT"] = "lots"
        let invalid = try run(["broker"], environment: environment)
        XCTAssertNotEqual(invalid.status, 0)
        XCTAssert(invalid.stderr.contains("ENLARGER_QUEUE_LIMIT=lots"), invalid.stderr)
    }

    /// Runs `enlarger broker`, reads its queue limit through a client, stops it.
    private func brokerQueueLimit(arguments: [String], environment: [String: String], clients: String) async throws
        -> (queueLimit: Int, log: String)
    {
        let process = Process()
        process.executableURL = Cluster.enlargerBinary
        process.arguments = ["broker"] + arguments
        process.environment = Self.environment(environment)
        let stderr = Pipe()
        process.standardError = stderr
        try process.run()
        let client = try EnlargerClient(brokerEndpoint: clients)
        let status: BrokerStatus
        do {
            status = try await client.status()
        } catch {
            await client.close()
            process.terminate()
            process.waitUntilExit()
            throw error
        }
        await client.close()
        process.terminate()
        let log = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (status.queueLimit, log)
    }

    // MARK: - Early, clear errors

    func testOutputThatIsNotADirectoryIsOneClearLine() throws {
        let directory = try temporaryDirectory()
        let file = directory.appendingPathComponent("file").path
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let photo = Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg").path
        for out in [file, file + "/below"] {
            let result = try run(["submit", photo, "--width", "64", "--out", out, "--broker", "ipc://\(directory.path)/none.sock"])
            XCTAssertNotEqual(result.status, 0)
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, result.stderr)
            XCTAssert(result.stderr.contains("not a directory") || result.stderr.contains("Not a directory"), result.stderr)
            XCTAssertFalse(result.stderr.contains("Domain"), result.stderr)
        }
    }

    func testOutputDirectoryThatCannotBeWrittenIsOneClearLine() throws {
        // Root may write anywhere permissions say no, but not into /proc.
        let out: String
        if geteuid() == 0 {
            out = "/proc/self"
        } else {
            let directory = try temporaryDirectory().appendingPathComponent("read-only")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o500])
            out = directory.path
        }
        let photo = Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg").path
        let result = try run(["submit", photo, "--width", "64", "--out", out, "--broker", "ipc:///nonexistent/none.sock"])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, result.stderr)
        XCTAssert(result.stderr.contains("cannot write to output directory \(out)"), result.stderr)
        XCTAssertFalse(result.stderr.contains("Domain"), result.stderr)
    }

    func testUnreachableBrokerIsOneLineNamingTheEndpoint() throws {
        let photos = ["sharp_flowers.jpeg", "exifsamples_30-type_error.jpg", "bimg_vertical.jpg"]
            .map { Corpus.root.appendingPathComponent("good/\($0)").path }
        let endpoint = "tcp://127.0.0.1:\(try unusedPort())"
        let result = try run(["submit"] + photos + ["--width", "64", "--out", try temporaryDirectory().path,
                                                    "--broker", endpoint, "--insecure-tcp"])
        XCTAssertEqual(result.status, 1)
        // The one line, then the summary; nothing per file.
        let lines = result.stderr.split(separator: "\n")
        XCTAssertEqual(lines.count, 2, result.stderr)
        XCTAssert(lines.last?.hasPrefix("0 done, 3 failed (BROKER_UNREACHABLE 3)") == true, result.stderr)
        XCTAssert(result.stderr.contains("cannot reach the broker at \(endpoint)"), result.stderr)
    }

    func testClientCommandsRefuseARuntimeDirectoryThatIsNotPrivate() throws {
        let base = try temporaryDirectory()
        let open = base.appendingPathComponent("open")
        XCTAssertEqual(mkdir(open.path, 0o755), 0)
        XCTAssertEqual(chmod(open.path, 0o755), 0)
        let wide = try run(["status", "--runtime-dir", open.path])
        XCTAssertEqual(wide.status, 1)
        XCTAssert(wide.stderr.contains("runtime directory \(open.path) has mode 755, not 700"), wide.stderr)
        // The default directory, as $ENLARGER_RUNTIME_DIR names it, is checked the same way.
        let viaEnvironment = try run(["cancel", "x"], environment: ["ENLARGER_RUNTIME_DIR": open.path])
        XCTAssertEqual(viaEnvironment.status, 1)
        XCTAssert(viaEnvironment.stderr.contains("has mode 755, not 700"), viaEnvironment.stderr)

        let link = base.appendingPathComponent("link")
        let target = base.appendingPathComponent("target")
        XCTAssertEqual(mkdir(target.path, 0o700), 0)
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: target.path)
        let linked = try run(["status", "--runtime-dir", link.path])
        XCTAssertEqual(linked.status, 1)
        XCTAssert(linked.stderr.contains("is not a directory"), linked.stderr)

        // Private and ours: on to the next question (here, no broker's socket in it).
        let mine = try run(["status", "--runtime-dir", target.path])
        XCTAssertEqual(mine.status, 1)
        XCTAssertFalse(mine.stderr.contains("refusing to use it"), mine.stderr)

        if getuid() == 0 {
            // Someone else's directory, however private.
            XCTAssertEqual(chown(target.path, 65534, 65534), 0)
            let foreign = try run(["status", "--runtime-dir", target.path])
            XCTAssertEqual(foreign.status, 1)
            XCTAssert(foreign.stderr.contains("belongs to user 65534"), foreign.stderr)
        }
    }

    func testUnsupportedInputIsRefusedBeforeSendingAndNamed() async throws {
        let cluster = try Cluster(self)
        let directory = try temporaryDirectory()
        let tiff = directory.appendingPathComponent("picture.jpg").path
        _ = FileManager.default.createFile(atPath: tiff, contents: Data([0x49, 0x49, 0x2A, 0x00] + [UInt8](repeating: 0, count: 32)))
        let result = try run(["submit", tiff, "--width", "64", "--out", directory.appendingPathComponent("out").path,
                              "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(result.status, 1)
        XCTAssert(result.stderr.contains("a TIFF image"), result.stderr)
        // Codes as the contract names them, never as Swift cases.
        XCTAssert(result.stderr.contains("failed UNKNOWN_FORMAT:"), result.stderr)
        XCTAssert(result.stderr.contains("1 failed (UNKNOWN_FORMAT 1)"), result.stderr)
        let client = try cluster.client()
        let status = try await client.status()
        await client.close()
        XCTAssertEqual(status.totals.submitted, 0, "the TIFF was sent")
    }

    func testSubmitBatchWritesEveryFinalOrNone() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let directory = try temporaryDirectory()
        let good = ["sharp_flowers.jpeg", "ljt_testorig.jpg"].map { Corpus.root.appendingPathComponent("good/\($0)").path }
        let out = directory.appendingPathComponent("whole").path
        let whole = try run(["submit"] + good + ["--batch", "--width", "64", "--out", out, "--json",
                                                 "--id-prefix", "b1", "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(whole.status, 0, whole.stderr)
        let lines = whole.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3, whole.stdout)
        XCTAssert(lines[0].contains("\"id\":\"b1-0\"") && lines[0].contains("\"index\":0"), lines[0])
        XCTAssert(lines[2].hasPrefix("{\"batch\":\"b1\",\"outcome\":\"completed\""), lines[2])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out).sorted(),
                       ["ljt_testorig.jpg", "sharp_flowers.jpg"])

        let bad = Corpus.root.appendingPathComponent("bad/sharp_truncated.jpg").path
        let none = directory.appendingPathComponent("none").path
        let broken = try run(["submit"] + good + [bad, "--batch", "--width", "64", "--out", none,
                                                  "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(broken.status, 1)
        XCTAssert(broken.stderr.contains("failed: item 2 (\(bad)): TRUNCATED"), broken.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: none), [], "nothing is written")

        let client = try cluster.client()
        let status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.batchesCompleted, 1)
        XCTAssertEqual(status.totals.batchesFailed, 1)
        await client.close()
    }

    /// A batch whose results cannot all be written writes none of them: the third output's
    /// name is taken by a directory, and neither of the first two appears.
    func testABatchThatCannotWriteEveryResultWritesNone() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let directory = try temporaryDirectory()
        let good = ["sharp_flowers.jpeg", "ljt_testorig.jpg", "bimg_test_exif_full.jpg"]
            .map { Corpus.root.appendingPathComponent("good/\($0)").path }
        let out = directory.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out.appendingPathComponent("bimg_test_exif_full.jpg"),
                                                withIntermediateDirectories: true)
        let result = try run(["submit"] + good + ["--batch", "--width", "64", "--out", out.path, "--json",
                                                  "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(result.status, 1, result.stdout)
        XCTAssertTrue(result.stdout.contains("\"outcome\":\"failed\""), result.stdout)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out.path), ["bimg_test_exif_full.jpg"],
                       "nothing was written, no temporary file was left")
    }

    /// Ctrl-C on `submit --batch` cancels every item at the broker before the command exits.
    func testInterruptCancelsEveryItemOfABatchAtTheBroker() async throws {
        let cluster = try Cluster(self, heartbeat: .seconds(5))
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let good = Corpus.root.appendingPathComponent("good")
        let inputs = try temporaryDirectory()
        var paths: [String] = []
        for index in 0..<4 {
            let path = inputs.appendingPathComponent("slow\(index).jpg").path
            try FileManager.default.copyItem(atPath: good.appendingPathComponent("thumbor_9643x10328.jpg").path, toPath: path)
            paths.append(path)
        }
        let process = Process()
        process.executableURL = Cluster.enlargerBinary
        process.arguments = ["submit"] + paths + ["--batch", "--width", "4000", "--enlarge", "--id-prefix", "slowbatch",
                                                  "--no-share", "--out", inputs.appendingPathComponent("out").path,
                                                  "--broker", cluster.clientsEndpoint]
        process.environment = Self.environment([:])
        let stderr = Pipe()
        process.standardError = stderr
        process.standardOutput = Pipe()
        try process.run()
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            let status = try await client.status()
            if status.inFlight >= 2 && status.inFlight + status.queueDepth >= 4 { break }
            guard ContinuousClock.now < deadline else { throw ClusterError("the batch never got in flight") }
            try await Task.sleep(for: .milliseconds(20))
        }
        kill(process.processIdentifier, SIGINT)
        let output = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 130, output)
        // Once the command has exited, the broker has every item's cancel.
        let status = try await client.status()
        XCTAssertEqual(status.totals.cancelled, 4, output)
        XCTAssertEqual(status.totals.finished + status.totals.failed, 0, output)
        XCTAssertEqual(status.inFlight + status.queueDepth, 0, "nothing runs for nobody")
        await client.close()
    }

    /// `submit --source file`: the paths are the worker's to read, under its files root;
    /// a path that leaves it fails with its code, the others are written.
    func testSubmitFileSourcesAreReadByTheWorker() async throws {
        let root = try temporaryDirectory().appendingPathComponent("photos")
        try FileManager.default.createDirectory(at: root.appendingPathComponent("2024"), withIntermediateDirectories: true)
        try Data(contentsOf: Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg"))
            .write(to: root.appendingPathComponent("2024/flowers.jpeg"))
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2) { $0.filesRoot = root.path }
        let out = try temporaryDirectory().appendingPathComponent("thumbs")
        let result = try run(["submit", "2024/flowers.jpeg", "../outside.jpg", "--source", "file", "--width", "64",
                              "--delivery", "final", "--json", "--out", out.path, "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(result.status, 1, "one input failed")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        XCTAssert(lines.contains { $0.contains("\"input\":\"2024/flowers.jpeg\"") && $0.contains("\"event\":\"final\"") },
                  result.stdout)
        XCTAssert(lines.contains { $0.contains("\"input\":\"../outside.jpg\"") && $0.contains("\"code\":\"SOURCE_REFUSED\"") },
                  result.stdout)
        let written = try Data(contentsOf: out.appendingPathComponent("flowers.jpg"))
        XCTAssert(written.starts(with: [0xFF, 0xD8, 0xFF]))
        // With --json the placeholder comes first, its ThumbHash in base64; --no-placeholder
        // asks for none.
        let placeholder = try XCTUnwrap(lines.first { $0.contains("\"event\":\"placeholder\"") }, result.stdout)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(placeholder.utf8)) as? [String: Any])
        XCTAssertEqual(object["width"] as? Int, 64)
        let hash = try XCTUnwrap(Data(base64Encoded: try XCTUnwrap(object["thumbhash"] as? String)))
        XCTAssertGreaterThanOrEqual(hash.count, 5)
        XCTAssertLessThan(try XCTUnwrap(lines.firstIndex(of: placeholder)),
                          try XCTUnwrap(lines.firstIndex { $0.contains("\"event\":\"final\"") }))
        let quiet = try run(["submit", "2024/flowers.jpeg", "--source", "file", "--width", "64", "--delivery", "final",
                             "--json", "--no-placeholder", "--no-share", "--out", out.path, "--overwrite",
                             "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(quiet.status, 0, quiet.stderr)
        XCTAssertFalse(quiet.stdout.contains("\"event\":\"placeholder\""), quiet.stdout)
        XCTAssert(quiet.stdout.contains("\"event\":\"final\""), quiet.stdout)

        let stdin = try run(["submit", "-", "--source", "url", "--width", "64", "--out", out.path,
                             "--broker", cluster.clientsEndpoint])
        XCTAssertNotEqual(stdin.status, 0)
        XCTAssert(stdin.stderr.contains("needs --source local"), stdin.stderr)
    }

    // MARK: - Input and output

    func testDashReadsStandardInput() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let out = try temporaryDirectory().appendingPathComponent("thumbs")
        let photo = try Data(contentsOf: Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg"))
        let result = try run(["submit", "-", "--width", "64", "--out", out.path, "--broker", cluster.clientsEndpoint],
                             stdin: photo)
        XCTAssertEqual(result.status, 0, result.stderr)
        let written = try Data(contentsOf: out.appendingPathComponent("stdin.jpg"))
        XCTAssert(written.starts(with: [0xFF, 0xD8, 0xFF]))
        XCTAssert(result.stdout.contains("stdin.jpg 64x"), result.stdout)
        XCTAssert(result.stderr.contains("1 done, 0 failed"), result.stderr)
    }

    /// `--out` the input's own directory: the output that would replace the input is refused,
    /// by `resize` and by `submit` alike, and the input is left as it was.
    func testAnOutputNeverReplacesItsInput() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1)
        let directory = try temporaryDirectory()
        let input = directory.appendingPathComponent("photo.jpg")
        let original = try Data(contentsOf: Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg"))
        try original.write(to: input)
        for arguments in [["resize", input.path, "--width", "64", "--out", directory.path],
                          ["resize", input.path, "--variant", "64x", "--out", directory.path],
                          ["submit", input.path, "--width", "64", "--out", directory.path, "--broker", cluster.clientsEndpoint],
                          ["submit", input.path, "--width", "64", "--batch", "--out", directory.path,
                           "--broker", cluster.clientsEndpoint]] {
            let result = try run(arguments)
            if arguments.contains("--variant") {
                // Its output has a name of its own: written beside the input.
                XCTAssertEqual(result.status, 0, result.stderr)
            } else {
                XCTAssertNotEqual(result.status, 0, "\(arguments)")
                XCTAssert(result.stderr.contains("is the input itself") || result.stdout.contains("is the input itself"),
                          "\(arguments): \(result.stderr)")
            }
            XCTAssertEqual(try Data(contentsOf: input), original, "\(arguments): the input was replaced")
        }
    }

    /// A file already in `--out` at an output's name (the user's own: `holiday.jpeg`'s output
    /// is `holiday.jpg`) is never replaced without `--overwrite`: that input fails with
    /// WRITE_FAILED ("already exists") and the file is left as it was, by `resize`, `submit`
    /// and `submit --batch` alike (a batch writes none of its files). With `--overwrite` it is
    /// replaced.
    func testAFileAlreadyInOutIsReplacedOnlyWithOverwrite() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1)
        let sources = try temporaryDirectory(), out = try temporaryDirectory()
        let input = sources.appendingPathComponent("holiday.jpeg"), other = sources.appendingPathComponent("other.jpg")
        try Data(contentsOf: Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg")).write(to: input)
        try Data(contentsOf: Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg")).write(to: other)
        let mine = out.appendingPathComponent("holiday.jpg")
        let broker = ["--broker", cluster.clientsEndpoint]
        for arguments in [["resize", input.path, other.path, "--width", "64", "--out", out.path],
                          ["submit", input.path, other.path, "--width", "64", "--out", out.path] + broker,
                          ["submit", input.path, other.path, "--width", "64", "--batch", "--out", out.path] + broker] {
            try Data("the user's own".utf8).write(to: mine)
            try? FileManager.default.removeItem(at: out.appendingPathComponent("other.jpg"))
            let refused = try run(arguments)
            XCTAssertNotEqual(refused.status, 0, "\(arguments)")
            XCTAssert((refused.stderr + refused.stdout).contains("\(mine.path) already exists: not replaced"),
                      "\(arguments): \(refused.stderr)")
            XCTAssertEqual(try Data(contentsOf: mine), Data("the user's own".utf8), "\(arguments): replaced")
            // The other input is written, except by a batch: all of its files or none.
            let otherWritten = FileManager.default.fileExists(atPath: out.appendingPathComponent("other.jpg").path)
            XCTAssertEqual(otherWritten, !arguments.contains("--batch"), "\(arguments)")
            let replaced = try run(arguments + ["--overwrite"])
            XCTAssertEqual(replaced.status, 0, "\(arguments): \(replaced.stderr)")
            XCTAssert(try Data(contentsOf: mine).starts(with: [0xFF, 0xD8, 0xFF]), "\(arguments)")
        }
    }

    /// `resize` writes an input's files all or none, with `--overwrite` too: when one of them
    /// cannot be written (its name is a directory), the files already there are left as they
    /// were, the degraded one included, and no temporary file is left behind.
    func testResizeWithOverwriteReplacesAllOrNothing() throws {
        let photo = Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg").path
        let out = try temporaryDirectory()
        let degraded = out.appendingPathComponent("sharp_flowers.degraded.jpg")
        let variant = out.appendingPathComponent("sharp_flowers-64x.jpg")
        try Data("the user's degraded".utf8).write(to: degraded)
        try Data("the user's variant".utf8).write(to: variant)
        try FileManager.default.createDirectory(at: out.appendingPathComponent("sharp_flowers.jpg"),
                                                withIntermediateDirectories: false)
        try FileManager.default.createDirectory(at: out.appendingPathComponent("sharp_flowers-32x.webp"),
                                                withIntermediateDirectories: false)
        for arguments in [["--width", "64", "--degraded"], ["--variant", "64x:jpeg,32x:webp"]] {
            let result = try run(["resize", photo, "--out", out.path, "--overwrite"] + arguments)
            XCTAssertNotEqual(result.status, 0, "\(arguments)")
            XCTAssert(result.stderr.contains("a directory has that name"), "\(arguments): \(result.stderr)")
            XCTAssertEqual(try Data(contentsOf: degraded), Data("the user's degraded".utf8), "\(arguments)")
            XCTAssertEqual(try Data(contentsOf: variant), Data("the user's variant".utf8), "\(arguments)")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out.path).sorted(),
                           ["sharp_flowers-32x.webp", "sharp_flowers-64x.jpg", "sharp_flowers.degraded.jpg",
                            "sharp_flowers.jpg"], "\(arguments)")
        }
        // Once the names are free, both are replaced.
        try FileManager.default.removeItem(at: out.appendingPathComponent("sharp_flowers.jpg"))
        let replaced = try run(["resize", photo, "--out", out.path, "--overwrite", "--width", "64", "--degraded"])
        XCTAssertEqual(replaced.status, 0, replaced.stderr)
        XCTAssert(try Data(contentsOf: degraded).starts(with: [0xFF, 0xD8, 0xFF]))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out.path).sorted(),
                       ["sharp_flowers-32x.webp", "sharp_flowers-64x.jpg", "sharp_flowers.degraded.jpg",
                        "sharp_flowers.jpg"])
    }

    /// --variant: every output from one decode, named by its box, with the right sizes and
    /// formats; malformed and duplicate variants are refused before anything runs.
    func testResizeVariantsWritesEveryOutput() throws {
        let photo = Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg").path
        let out = try temporaryDirectory()
        let result = try run(["resize", photo, "--variant", "320x320:webp,640x:jpeg", "--variant", "x100:png",
                              "--json", "--out", out.path])
        XCTAssertEqual(result.status, 0, result.stderr)
        let lines = result.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        XCTAssertEqual(lines.map { $0["variant"] as? String }, ["320x320", "640x", "x100"])
        XCTAssertEqual(lines.map { $0["content_type"] as? String }, ["image/webp", "image/jpeg", "image/png"])
        XCTAssertEqual(lines.map { $0["width"] as? Int }, [320, 640, 178])
        for name in ["sharp_flowers-320x320.webp", "sharp_flowers-640x.jpg", "sharp_flowers-x100.png"] {
            XCTAssert(FileManager.default.fileExists(atPath: out.appendingPathComponent(name).path), name)
        }
        for (arguments, complaint) in [(["--variant", "320"], "is not WxH"), (["--variant", "320x320:gif"], "not a format"),
                                       (["--variant", "320x320,320x320"], "twice"),
                                       (["--variant", "320x320", "--width", "10"], "not both"),
                                       (["--variant", "320x,1x,2x,3x,4x,5x,6x,7x,8x"], "at most 8"),
                                       (["--variant", "320x", "--degraded"], "--degraded")] {
            let bad = try run(["resize", photo, "--out", out.path] + arguments)
            XCTAssertNotEqual(bad.status, 0, "\(arguments)")
            XCTAssert(bad.stderr.contains(complaint), "\(arguments): \(bad.stderr)")
        }
    }

    /// --variant through the service: one request, every output written by its box.
    func testSubmitVariantsWritesEveryOutput() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let photo = Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg").path
        let out = try temporaryDirectory()
        let result = try run(["submit", photo, "--variant", "320x320:webp,160x", "--json", "--out", out.path,
                              "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(result.status, 0, result.stderr)
        let finals = result.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }.filter { $0["event"] as? String == "final" }
        XCTAssertEqual(Set(finals.compactMap { $0["variant"] as? String }), ["320x320", "160x"], result.stdout)
        for name in ["sharp_flowers-320x320.webp", "sharp_flowers-160x.jpg"] {
            XCTAssert(FileManager.default.fileExists(atPath: out.appendingPathComponent(name).path), name)
        }
        let batch = try run(["submit", photo, "--variant", "320x", "--batch", "--out", out.path, "--broker", cluster.clientsEndpoint])
        XCTAssertNotEqual(batch.status, 0)
        XCTAssert(batch.stderr.contains("--batch"), batch.stderr)
    }

    /// A gain map through the service: kept by default (the output's info says so), left out
    /// with --gain-map drop; the modes are named when one is misspelt.
    func testGainMapIsKeptThroughTheServiceOrDropped() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let photo = Corpus.root.appendingPathComponent("good/sharp_gain-map.jpg").path
        var outputs: [String: String] = [:]
        for mode in ["keep", "drop"] {
            let out = try temporaryDirectory().appendingPathComponent(mode)
            let result = try run(["submit", photo, "--width", "320", "--gain-map", mode, "--out", out.path,
                                  "--broker", cluster.clientsEndpoint])
            XCTAssertEqual(result.status, 0, result.stderr)
            let info = try run(["info", out.appendingPathComponent("sharp_gain-map.jpg").path])
            XCTAssertEqual(info.status, 0, info.stderr)
            outputs[mode] = info.stdout
        }
        XCTAssert(outputs["keep"]?.contains("jpeg 320x180") == true && outputs["keep"]?.contains("HDR gain map") == true,
                  "\(outputs)")
        XCTAssert(outputs["drop"]?.contains("jpeg 320x180") == true && outputs["drop"]?.contains("gain map") == false,
                  "\(outputs)")
        let wrong = try run(["resize", photo, "--width", "64", "--gain-map", "boost", "--out", try temporaryDirectory().path])
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssert(wrong.stderr.contains("keep, drop, apply") || wrong.stderr.contains("gain-map"), wrong.stderr)
    }

    /// On a terminal, result lines and the progress bar share the screen: replaying the
    /// output as a terminal would, no result line may carry leftovers of the bar.
    func testProgressBarNeverGarblesResultLines() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(2, concurrency: 2)
        let good = Corpus.root.appendingPathComponent("good")
        let photos = try FileManager.default.contentsOfDirectory(atPath: good.path)
            .filter { $0.hasSuffix(".jpg") || $0.hasSuffix(".jpeg") }.sorted().prefix(60)
            .map { good.appendingPathComponent($0).path }
        let out = try temporaryDirectory().path
        let command = ([Cluster.enlargerBinary.path, "submit"] + photos
            + ["--width", "64", "--out", out, "--broker", cluster.clientsEndpoint, "--in-flight", "4"])
            .map(Self.shellQuoted).joined(separator: " ")
        let result = try run(["-q", "-e", "-c", command, "/dev/null"], binary: URL(fileURLWithPath: "/usr/bin/script"))
        let screen = Self.replayTerminal(result.stdout)
        let resultLines = screen.filter { $0.contains(" -> ") }
        XCTAssertGreaterThan(resultLines.count, 40, result.stdout)
        for line in resultLines {
            XCTAssert(line.hasPrefix(good.path), "garbled: \(line.debugDescription)")
            // Pieces of the bar: `[===   ] 12/60  0 failed  0 cancelled  3.4/s`.
            XCTAssertFalse(line.contains("failed  ") || line.contains("cancelled  ") || line.contains("["),
                           "garbled: \(line.debugDescription)")
        }
        // The bar was drawn (it is a terminal) and erased before the summary.
        XCTAssert(result.stdout.contains("\u{1B}[K"), "no progress bar drawn")
        let summary = try XCTUnwrap(screen.last { $0.contains(" done, ") }, screen.joined(separator: "\n"))
        XCTAssert(summary.hasPrefix("\(resultLines.count) done"), summary.debugDescription)
        XCTAssert(summary.contains("images/s"), summary)
    }

    /// The lines a terminal shows for `output`: `\r` returns to column 0, `ESC[K` erases to
    /// the end of the line, `\n` ends it.
    static func replayTerminal(_ output: String) -> [String] {
        var lines: [String] = []
        var line: [Character] = []
        var column = 0
        var characters = output[...]
        while let character = characters.popFirst() {
            switch character {
            case "\r\n", "\n":
                lines.append(String(line))
                line = []
                column = 0
            case "\r":
                column = 0
            case "\u{1B}":
                if characters.hasPrefix("[K") {
                    characters = characters.dropFirst(2)
                    line.removeSubrange(min(column, line.count)...)
                }
            default:
                if column < line.count { line[column] = character } else { line.append(character) }
                column += 1
            }
        }
        if !line.isEmpty { lines.append(String(line)) }
        return lines
    }

    // MARK: - Cancel

    /// Ctrl-C cancels the live requests at the broker at once: far sooner than the broker
    /// would notice the client gone (3 heartbeats of 5 s here), naming them.
    func testInterruptCancelsLiveRequestsAtOnce() async throws {
        let cluster = try Cluster(self, heartbeat: .seconds(5))
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let good = Corpus.root.appendingPathComponent("good")
        let photos = ["thumbor_9643x10328.jpg", "bimg_vertical.jpg", "thumbor_9643x10328.jpg"]
        // Distinct names: copies of the slow photos.
        let inputs = try temporaryDirectory()
        var paths: [String] = []
        for (index, name) in photos.enumerated() {
            let path = inputs.appendingPathComponent("slow\(index).jpg").path
            try FileManager.default.copyItem(atPath: good.appendingPathComponent(name).path, toPath: path)
            paths.append(path)
        }
        let process = Process()
        process.executableURL = Cluster.enlargerBinary
        process.arguments = ["submit"] + paths + ["--width", "4000", "--enlarge", "--delivery", "final", "--id-prefix", "slow", "--no-share",
                                                  "--out", inputs.appendingPathComponent("out").path,
                                                  "--broker", cluster.clientsEndpoint]
        process.environment = Self.environment([:])
        let stderr = Pipe()
        process.standardError = stderr
        process.standardOutput = Pipe()
        try process.run()
        // Wait until the broker runs two of them and queues the third.
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            let status = try await client.status()
            if status.inFlight >= 2 && status.inFlight + status.queueDepth >= 3 { break }
            guard ContinuousClock.now < deadline else { throw ClusterError("the requests never got in flight") }
            try await Task.sleep(for: .milliseconds(20))
        }
        let interrupted = ContinuousClock.now
        kill(process.processIdentifier, SIGINT)
        let output = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let took = ContinuousClock.now - interrupted
        XCTAssertLessThan(took, .seconds(3), "exit took \(took)")
        XCTAssertEqual(process.terminationStatus, 130, output)
        XCTAssert(output.contains("interrupted: cancelled 3 at the broker: slow-0 slow-1 slow-2"), output)
        XCTAssert(output.contains("3 cancelled"), output)
        let status = try await client.status()
        await client.close()
        XCTAssertEqual(status.totals.cancelled, 3)
        XCTAssertEqual(status.totals.finished + status.totals.failed, 0)
    }

    /// When a result cannot be written, that request is cancelled at the broker rather than
    /// left running for nobody.
    func testFailedWriteCancelsTheRequestAtTheBroker() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let out = try temporaryDirectory()
        // The degraded result's path is taken by a directory: its write fails.
        try FileManager.default.createDirectory(at: out.appendingPathComponent("thumbor_9643x10328.degraded.jpg"),
                                                withIntermediateDirectories: true)
        let photo = Corpus.root.appendingPathComponent("good/thumbor_9643x10328.jpg").path
        let result = try run(["submit", photo, "--width", "4000", "--enlarge", "--out", out.path, "--broker", cluster.clientsEndpoint,
                              "--id-prefix", "w"])
        XCTAssertEqual(result.status, 1, result.stderr)
        XCTAssert(result.stderr.contains("WRITE_FAILED"), result.stderr)
        let status = try await cluster.waitUntilIdle(client: client)
        await client.close()
        XCTAssertEqual(status.totals.cancelled, 1, "the request was not cancelled at the broker")
        XCTAssertEqual(status.totals.finished, 0)
    }

    func testInfoReadsHeadersOnly() throws {
        let photo = Corpus.root.appendingPathComponent("good/bimg_test_exif_full.jpg").path
        let text = try run(["info", photo])
        XCTAssertEqual(text.status, 0, text.stderr)
        XCTAssertEqual(text.stdout, "\(photo): jpeg 3024x4032, orientation 6, ycbcr 8-bit, 3 channels, profile \"Display P3\", "
                       + "baseline, EXIF thumbnail, 3970480 bytes\n")
        let json = try run(["info", "--json", photo, Corpus.root.appendingPathComponent("bad/sharp_8bit_depth.jpg").path])
        XCTAssertEqual(json.status, 1)
        let lines = json.stdout.split(separator: "\n")
        XCTAssertEqual(lines.count, 2, json.stdout)
        let first = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        XCTAssertEqual(first["width"] as? Int, 3024)
        XCTAssertEqual(first["profile"] as? String, "Display P3")
        XCTAssertEqual(first["embedded_thumbnail"] as? Bool, true)
        let second = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(lines[1].utf8)) as? [String: Any])
        let error = try XCTUnwrap(second["error"] as? [String: Any])
        XCTAssert((error["message"] as? String)?.contains("a TIFF image") == true, "\(second)")
    }

    func testFailOnChoosesWhichDamageFails() throws {
        let junk = Corpus.root.appendingPathComponent("bad/pillow_junk_jpeg_header.jpg").path
        let out = try temporaryDirectory().path
        let accepted = try run(["resize", junk, "--width", "64", "--out", out])
        XCTAssertEqual(accepted.status, 0, accepted.stderr)
        let strict = try run(["resize", junk, "--width", "64", "--out", out, "--fail-on", "warning"])
        XCTAssertNotEqual(strict.status, 0)
        XCTAssert(strict.stderr.contains("CORRUPT"), strict.stderr)
        let wrong = try run(["resize", junk, "--width", "64", "--out", out, "--fail-on", "sometimes"])
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssert(wrong.stderr.contains("none, truncated, error, warning") || wrong.stderr.contains("fail-on"), wrong.stderr)
    }

    /// Formats by content, the chosen format's extension, --accept and its companions.
    func testOutputFormatOptions() throws {
        let out = try temporaryDirectory()
        // A PNG named .jpg is read as the PNG it is.
        let misnamed = out.appendingPathComponent("logo.jpg")
        try Data(try SampleImages.bytes("png-rgba8.png")).write(to: misnamed)
        let negotiated = try run(["resize", misnamed.path, "--width", "48", "--accept", "image/jpeg,webp", "--json",
                                  "--out", out.appendingPathComponent("a").path])
        XCTAssertEqual(negotiated.status, 0, negotiated.stderr)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(negotiated.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(object["content_type"] as? String, "image/webp")
        XCTAssert((object["output"] as? String)?.hasSuffix("/logo.webp") == true, "\(object)")
        let flattened = try run(["resize", misnamed.path, "--width", "48", "--format", "jpeg", "--background", "#0f0",
                                 "--out", out.appendingPathComponent("b").path])
        XCTAssertEqual(flattened.status, 0, flattened.stderr)
        XCTAssert(flattened.stdout.contains("note: transparency flattened onto #00ff00"), flattened.stdout)
        let refused = try run(["resize", misnamed.path, "--width", "48", "--accept", "jpeg",
                               "--out", out.appendingPathComponent("c").path])
        XCTAssertEqual(refused.status, 1)
        XCTAssert(refused.stderr.contains("INVALID_ARGUMENT") && refused.stderr.contains("transparency"), refused.stderr)
        for (arguments, complaint) in [(["--accept", "image/gif"], "not a known type"),
                                       (["--format", "png", "--accept", "png"], "not both"),
                                       (["--flatten"], "--flatten goes with --accept"),
                                       (["--background", "red"], "not a colour")] {
            let bad = try run(["resize", misnamed.path, "--width", "48", "--out", out.path] + arguments)
            XCTAssertNotEqual(bad.status, 0, "\(arguments)")
            XCTAssert(bad.stderr.contains(complaint), "\(arguments): \(bad.stderr)")
        }
    }

    /// `sync` mirrors a tree through the service, then does only what changed: inserted,
    /// changed and removed files, new options; an unreadable manifest redoes everything.
    func testSyncMirrorsATreeAndRedoesOnlyWhatChanged() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let source = try temporaryDirectory(), out = try temporaryDirectory().appendingPathComponent("thumbs")
        let sub = source.appendingPathComponent("sub")
        try FileManager.default.createDirectory(at: sub, withIntermediateDirectories: true)
        for (file, name) in [("png-rgb8.png", "a.png"), ("webp-lossy.webp", "b.webp"), ("heic-rgb.heic", "sub/c.heic")] {
            try Data(try SampleImages.bytes(file)).write(to: source.appendingPathComponent(name))
        }
        try Data("not an image".utf8).write(to: source.appendingPathComponent("notes.txt"))
        try Data(try SampleImages.bytes("png-rgb8.png")).write(to: source.appendingPathComponent(".hidden.png"))
        func sync(_ extra: [String] = []) throws -> (summary: [String: Any], lines: [[String: Any]]) {
            let result = try run(["sync", source.path, "--out", out.path, "--width", "32", "--broker", cluster.clientsEndpoint,
                                  "--json"] + extra)
            XCTAssertEqual(result.status, 0, result.stderr)
            let lines = try result.stdout.split(separator: "\n").map {
                try XCTUnwrap(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            return (try XCTUnwrap(lines.last), Array(lines.dropLast()))
        }
        func counts(_ summary: [String: Any]) -> [Int] {
            ["inserted", "changed", "removed", "unchanged", "skipped", "failed"].map { summary[$0] as? Int ?? -1 }
        }
        let first = try sync()
        XCTAssertEqual(counts(first.summary), [3, 0, 0, 0, 1, 0], "\(first)")
        for name in ["a.png.jpg", "b.webp.jpg", "sub/c.heic.jpg"] {
            let bytes = [UInt8](try Data(contentsOf: out.appendingPathComponent(name)))
            XCTAssertEqual(Array(bytes.prefix(2)), [0xFF, 0xD8], name)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: out.appendingPathComponent(".hidden.png.jpg").path))
        let submitted = try await client.status().totals.submitted

        // Nothing changed: nothing is sent.
        XCTAssertEqual(counts(try sync().summary), [0, 0, 0, 3, 1, 0])
        let afterIdle = try await client.status().totals.submitted
        XCTAssertEqual(afterIdle, submitted)

        // A changed file, a removed one, a new one.
        try Data(try SampleImages.bytes("png-gray8.png")).write(to: source.appendingPathComponent("a.png"))
        try FileManager.default.removeItem(at: source.appendingPathComponent("b.webp"))
        try Data(try SampleImages.bytes("avif-rgb.avif")).write(to: sub.appendingPathComponent("d.avif"))
        let third = try sync()
        XCTAssertEqual(counts(third.summary), [1, 1, 1, 1, 1, 0], "\(third)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: out.appendingPathComponent("b.webp.jpg").path))
        XCTAssertTrue(FileManager.default.fileExists(atPath: out.appendingPathComponent("sub/d.avif.jpg").path))

        // Other options: every thumbnail again, in the chosen format; the old ones go.
        let fourth = try sync(["--format", "png"])
        XCTAssertEqual(counts(fourth.summary), [0, 3, 0, 0, 1, 0], "\(fourth)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: out.appendingPathComponent("a.png.png").path))
        XCTAssertFalse(FileManager.default.fileExists(atPath: out.appendingPathComponent("a.png.jpg").path))

        // A damaged record stops sync before it touches anything, and says how to go on.
        let record = out.appendingPathComponent(".enlarger-sync.journal")
        try Data("{\n{\n".utf8).write(to: record)
        let damaged = try run(["sync", source.path, "--out", out.path, "--width", "32", "--broker", cluster.clientsEndpoint])
        XCTAssertNotEqual(damaged.status, 0)
        XCTAssertTrue(damaged.stderr.contains("--adopt"), damaged.stderr)
        // Without its record, sync owns nothing in OUT: it overwrites nothing, unless told to adopt.
        try FileManager.default.removeItem(at: record)
        let orphaned = try run(["sync", source.path, "--out", out.path, "--width", "32", "--format", "png",
                                "--broker", cluster.clientsEndpoint, "--json"])
        XCTAssertEqual(orphaned.status, 1, orphaned.stdout)
        XCTAssertTrue(orphaned.stdout.contains("\"failed\":3"), orphaned.stdout)
        XCTAssertTrue(orphaned.stdout.contains("OUTPUT_EXISTS"), orphaned.stdout)
        XCTAssertEqual(counts(try sync(["--format", "png", "--adopt"]).summary), [3, 0, 0, 0, 1, 0])
        await client.close()
    }

    /// The real `sync` (and `sync --watch`) killed with SIGKILL at random moments while a tree
    /// changes under it (new files, names that differ only in extension, rewrites that put the
    /// modification time back, renames, deletions): after a settling run, OUT holds exactly
    /// the thumbnails a clean run makes into an empty directory, byte for byte, plus the
    /// user's own file; no source byte changed. `ENLARGER_SEED` replays a seed.
    func testSyncKilledAtRandomMomentsSettlesExactly() async throws {
        let seed = ProcessInfo.processInfo.environment["ENLARGER_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...999_999)
        print("sync kill test: seed \(seed) (replay with ENLARGER_SEED=\(seed))")
        var random = SeededGenerator(seed: seed)
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let source = try temporaryDirectory(), out = try temporaryDirectory().appendingPathComponent("thumbs")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: out.appendingPathComponent("notes.txt"))
        let images = try ["png-rgb8.png", "webp-lossy.webp", "png-gray8.png", "heic-rgb.heic", "avif-rgb.avif",
                          "png-rgba8.png"].map { try SampleImages.bytes($0) }
        let names = ["IMG_1.jpg", "IMG_1.HEIC", "x.JPG", "x.jpg", "noext", "noext.png", "d/a.webp", "d/e/b.avif", "c d.png"]
        var model: [String: [UInt8]] = [:]
        func mutate() throws {
            let name = names.randomElement(using: &random)!
            let url = source.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            switch Int.random(in: 0..<4, using: &random) {
            case 0, 1:
                let bytes = images.randomElement(using: &random)!
                try Data(bytes).write(to: url)
                model[name] = bytes
            case 2:
                guard let bytes = model[name] else { return }
                let target = names.randomElement(using: &random)!
                guard target != name else { return }
                let to = source.appendingPathComponent(target)
                try FileManager.default.createDirectory(at: to.deletingLastPathComponent(), withIntermediateDirectories: true)
                guard rename(url.path, to.path) == 0 else { return }
                model[name] = nil
                model[target] = bytes
            default:
                unlink(url.path)
                model[name] = nil
            }
        }
        func start(_ arguments: [String]) throws -> Process {
            let process = Process()
            process.executableURL = Cluster.enlargerBinary
            process.arguments = ["sync", source.path, "--out", out.path, "--width", "24", "--broker",
                                 cluster.clientsEndpoint, "--in-flight", "2"] + arguments
            process.environment = Self.environment([:])
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
        var kills = 0
        for _ in 0..<8 {
            for _ in 0..<Int.random(in: 2...5, using: &random) { try mutate() }
            let process = try start(Bool.random(using: &random) ? ["--watch"] : [])
            for _ in 0..<Int.random(in: 0...2, using: &random) {
                usleep(UInt32.random(in: 0...60_000, using: &random))
                try mutate()
            }
            usleep(UInt32.random(in: 0...250_000, using: &random))
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                kills += 1
            }
            process.waitUntilExit()
        }
        let settle = try run(["sync", source.path, "--out", out.path, "--width", "24", "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(settle.status, 0, "seed \(seed): \(settle.stderr)")
        let clean = try temporaryDirectory().appendingPathComponent("clean")
        let reference = try run(["sync", source.path, "--out", clean.path, "--width", "24", "--broker", cluster.clientsEndpoint])
        XCTAssertEqual(reference.status, 0, reference.stderr)
        func files(_ directory: URL) -> [String: Data] {
            var files: [String: Data] = [:]
            let walker = FileManager.default.enumerator(atPath: directory.path)
            while let relative = walker?.nextObject() as? String {
                var info = stat()
                let path = directory.appendingPathComponent(relative).path
                guard !relative.hasPrefix(".enlarger-sync"), lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
                    continue
                }
                files[relative] = FileManager.default.contents(atPath: path)
            }
            return files
        }
        var expected = files(clean)
        XCTAssertEqual(Set(expected.keys), Set(model.keys.map { $0 + ".jpg" }), "seed \(seed)")
        expected["notes.txt"] = Data("mine".utf8)
        let actual = files(out)
        XCTAssertEqual(Set(actual.keys), Set(expected.keys), "seed \(seed): OUT after \(kills) kills")
        for (name, bytes) in expected where actual[name] != bytes { XCTFail("seed \(seed): \(name) differs") }
        var sources = files(source)
        for (name, bytes) in model {
            XCTAssertEqual(sources.removeValue(forKey: name), Data(bytes), "seed \(seed): \(name) changed")
        }
        XCTAssertEqual(sources, [:])
        print("sync kill test: seed \(seed), \(kills) kills, \(model.count) sources at the end")
    }

    /// `sync` refuses an OUT that is SRC or contains it, however it is named, and writes nothing.
    func testSyncNeverWritesOverItsSource() throws {
        let source = try temporaryDirectory()
        let photo = try SampleImages.bytes("png-rgb8.png")
        try Data(photo).write(to: source.appendingPathComponent("a.png"))
        let link = try temporaryDirectory().appendingPathComponent("link")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: source)
        for out in [source.path, source.path + "/", source.path + "/.", link.path, source.deletingLastPathComponent().path] {
            let result = try run(["sync", source.path, "--out", out, "--width", "32", "--broker", "ipc:///nonexistent"])
            XCTAssertNotEqual(result.status, 0, out)
            XCTAssertTrue(result.stderr.contains("source directory"), "\(out): \(result.stderr)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: source.path), ["a.png"])
        XCTAssertEqual([UInt8](try Data(contentsOf: source.appendingPathComponent("a.png"))), photo)
    }

    /// `sync --watch` mirrors changes as they happen: a file added, renamed, rewritten, a
    /// directory created with an image in it, a directory removed. Stopped, then changed, then
    /// started again, its first (full) pass reconciles what it missed.
    func testSyncWatchMirrorsChangesAsTheyHappen() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        await client.close()
        let source = try temporaryDirectory(), out = try temporaryDirectory()
        let sub = source.appendingPathComponent("sub")
        try FileManager.default.createDirectory(at: sub, withIntermediateDirectories: true)
        try Data(try SampleImages.bytes("png-rgb8.png")).write(to: source.appendingPathComponent("a.png"))
        try Data(try SampleImages.bytes("heic-rgb.heic")).write(to: sub.appendingPathComponent("c.heic"))
        func exists(_ name: String) -> Bool { FileManager.default.fileExists(atPath: out.appendingPathComponent(name).path) }
        func eventually(_ what: String, _ condition: () -> Bool) {
            let deadline = ContinuousClock.now + .seconds(15)
            while !condition() && ContinuousClock.now < deadline { usleep(20_000) }
            XCTAssertTrue(condition(), what)
        }
        func start() throws -> (Process, SharedText) { try startSyncWatch(source, out, cluster: cluster) }
        var (watcher, text) = try start()
        eventually("the first pass") { text.value.contains("\"pass\":\"full\"") }
        XCTAssertTrue(exists("a.png.jpg") && exists("sub/c.heic.jpg"), text.value)

        try Data(try SampleImages.bytes("webp-lossy.webp")).write(to: source.appendingPathComponent("b.webp"))
        eventually("an added file") { exists("b.webp.jpg") }
        try FileManager.default.moveItem(at: source.appendingPathComponent("a.png"), to: source.appendingPathComponent("a2.png"))
        eventually("a renamed file") { exists("a2.png.jpg") && !exists("a.png.jpg") }
        let before = try Data(contentsOf: out.appendingPathComponent("b.webp.jpg"))
        try Data(try SampleImages.bytes("png-gray8.png")).write(to: source.appendingPathComponent("b.webp"))
        eventually("a rewritten file") { (try? Data(contentsOf: out.appendingPathComponent("b.webp.jpg"))) != before }
        let fresh = source.appendingPathComponent("new")
        try FileManager.default.createDirectory(at: fresh, withIntermediateDirectories: true)
        try Data(try SampleImages.bytes("avif-rgb.avif")).write(to: fresh.appendingPathComponent("d.avif"))
        eventually("a file in a new directory") { exists("new/d.avif.jpg") }
        try FileManager.default.removeItem(at: sub)
        eventually("a removed directory") { !exists("sub/c.heic.jpg") }
        XCTAssertTrue(text.value.contains("\"pass\":\"incremental\""), text.value)
        watcher.terminate()
        watcher.waitUntilExit()
        XCTAssertEqual(watcher.terminationStatus, 0, text.value)

        // Changed while nobody watched: the next start's full pass catches up.
        try FileManager.default.removeItem(at: source.appendingPathComponent("a2.png"))
        try Data(try SampleImages.bytes("png-rgb8.png")).write(to: fresh.appendingPathComponent("e.png"))
        (watcher, text) = try start()
        eventually("the catching-up pass") { text.value.contains("\"pass\":\"full\"") }
        XCTAssertTrue(text.value.contains("\"inserted\":1,\"changed\":0,\"removed\":1,\"unchanged\":2"), text.value)
        XCTAssertTrue(exists("new/e.png.jpg") && !exists("a2.png.jpg"))
        watcher.terminate()
        watcher.waitUntilExit()
    }

    /// Changes the notifications cannot tell (the kernel's queue overflowed while the watcher
    /// was stopped) are caught by a full rescan.
    func testSyncWatchRescansEverythingWhenItsNotificationsOverflow() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let source = try temporaryDirectory(), out = try temporaryDirectory()
        try Data(try SampleImages.bytes("png-rgb8.png")).write(to: source.appendingPathComponent("a.png"))
        try Data(try SampleImages.bytes("webp-lossy.webp")).write(to: source.appendingPathComponent("b.webp"))
        func exists(_ name: String) -> Bool { FileManager.default.fileExists(atPath: out.appendingPathComponent(name).path) }
        let (process, text) = try startSyncWatch(source, out, cluster: cluster)
        func fullPasses() -> Int { text.value.components(separatedBy: "\"pass\":\"full\"").count - 1 }
        func eventually(_ what: String, _ condition: () -> Bool) {
            let deadline = ContinuousClock.now + .seconds(20)
            while !condition() && ContinuousClock.now < deadline { usleep(20_000) }
            XCTAssertTrue(condition(), "\(what): \(text.value)")
        }
        eventually("the first pass") { fullPasses() == 1 }

        // Stopped, the watcher reads nothing: more events than the kernel queues for it.
        kill(process.processIdentifier, SIGSTOP)
        let limit = (try? String(contentsOfFile: "/proc/sys/fs/inotify/max_queued_events", encoding: .utf8))
            .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 16384
        for index in 0..<(limit / 2 + 64) {
            // Hidden, so never mirrored: only their notifications matter.
            _ = FileManager.default.createFile(atPath: source.appendingPathComponent(".n\(index)").path, contents: nil)
        }
        try Data(try SampleImages.bytes("avif-rgb.avif")).write(to: source.appendingPathComponent("c.avif"))
        try FileManager.default.removeItem(at: source.appendingPathComponent("a.png"))
        kill(process.processIdentifier, SIGCONT)

        eventually("a full rescan after the overflow") { fullPasses() == 2 }
        eventually("the rescan's changes") { exists("c.avif.jpg") && !exists("a.png.jpg") && exists("b.webp.jpg") }
        process.terminate()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, text.value)
    }

    /// `enlarger sync SOURCE --out OUT --watch --json` against the cluster; its output
    /// (standard output and error together) collects in the returned text.
    private func startSyncWatch(_ source: URL, _ out: URL, cluster: Cluster) throws -> (Process, SharedText) {
        let process = Process()
        process.executableURL = Cluster.enlargerBinary
        process.arguments = ["sync", source.path, "--out", out.path, "--width", "32", "--broker", cluster.clientsEndpoint,
                             "--watch", "--json"]
        process.environment = Self.environment([:])
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let text = SharedText()
        pipe.fileHandleForReading.readabilityHandler = { handle in text.append(handle.availableData) }
        try process.run()
        return (process, text)
    }

    // MARK: - Operators

    /// `serve` with its metrics port from the environment: health checks pass, the broker's
    /// and the worker's metrics count the request, and every request leaves one JSON log line
    /// per process with its id, stage, code and durations as numbers.
    func testServeExposesHealthMetricsAndRequestLogLines() async throws {
        let directory = try temporaryDirectory()
        // The metrics ports are found free, then bound by serve: another process may take one
        // in between, and serve then exits at once. It is started again on others, at most
        // three times; its log says why.
        var serve = Process(), logs = Pipe(), port = 0, attempts = 0
        var stopped = true
        defer { if !stopped { serve.terminate(); serve.waitUntilExit() } }
        while true {
            attempts += 1
            port = try unusedPort()
            serve = Process()
            serve.executableURL = Cluster.enlargerBinary
            serve.arguments = ["serve", "--runtime-dir", directory.appendingPathComponent("run").path, "--workers", "1",
                               "--concurrency", "1", "--log-format", "json"]
            serve.environment = Self.environment(["ENLARGER_METRICS": "127.0.0.1:\(port)"])
            logs = Pipe()
            serve.standardError = logs
            serve.standardOutput = FileHandle.nullDevice
            try serve.run()
            stopped = false
            let deadline = ContinuousClock.now + .seconds(60)
            while serve.isRunning, try run(["health", "--http", "127.0.0.1:\(port)"]).status != 0 {
                guard ContinuousClock.now < deadline else { return XCTFail("serve never became ready") }
                try await Task.sleep(for: .milliseconds(100))
            }
            if serve.isRunning { break }
            serve.waitUntilExit()
            stopped = true
            let log = String(decoding: logs.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            guard attempts < 3 else { return XCTFail("serve exited before it was ready: \(log)") }
        }
        let address = "127.0.0.1:\(port)"
        let deadline = ContinuousClock.now + .seconds(60)
        let workerAddress = "127.0.0.1:\(port + 1)"
        while try run(["health", "--http", workerAddress]).status != 0 {
            guard ContinuousClock.now < deadline else { return XCTFail("the worker never became ready") }
            try await Task.sleep(for: .milliseconds(100))
        }
        let live = try run(["health", "--http", address, "--live"])
        XCTAssertEqual(live.stdout, "healthy: \(address)/healthz: ok\n")

        let photo = Corpus.root.appendingPathComponent("good/sharp_flowers.jpeg").path
        let submitted = try run(["submit", photo, "--width", "64", "--id-prefix", "logged",
                                 "--out", directory.appendingPathComponent("out").path,
                                 "--runtime-dir", directory.appendingPathComponent("run").path])
        XCTAssertEqual(submitted.status, 0, submitted.stderr)
        let health = try run(["health", "--runtime-dir", directory.appendingPathComponent("run").path, "--ready"])
        XCTAssertEqual(health.status, 0, health.stderr)
        XCTAssert(health.stdout.hasPrefix("healthy: ipc://"), health.stdout)

        // Sharing serve's memory limit, the worker is the one the kernel's out-of-memory
        // killer takes first.
        let status = try run(["status", "--runtime-dir", directory.appendingPathComponent("run").path])
        let workerPid = try XCTUnwrap(status.stdout.split(separator: "\n").lazy.compactMap { line -> Int32? in
            guard let range = line.firstRange(of: "pid ") else { return nil }
            return Int32(line[range.upperBound...].prefix { $0.isNumber })
        }.first, status.stdout)
        func oomScore(_ pid: Int32) throws -> Int? {
            Int(try String(contentsOfFile: "/proc/\(pid)/oom_score_adj", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines))
        }
        XCTAssertEqual(try oomScore(workerPid), 500)
        XCTAssertLessThan(try XCTUnwrap(try oomScore(serve.processIdentifier)), 500)

        let brokerText = try HTTPGet.fetch(address, path: "/metrics").body
        XCTAssert(brokerText.contains(#"enlarger_requests_total{outcome="finished",code="OK"} 1"#), brokerText)
        let workerText = try HTTPGet.fetch(workerAddress, path: "/metrics").body
        XCTAssert(workerText.contains(#"enlarger_worker_jobs_total{outcome="finished",code="OK"} 1"#), workerText)

        serve.terminate()
        let text = String(decoding: logs.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        serve.waitUntilExit()
        stopped = true
        var ended: [String: [String: Any]] = [:]
        var ready: [String: Any]?
        for line in text.split(separator: "\n") {
            let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                                       "not one JSON object per line: \(line)")
            if object["request_id"] as? String == "logged-0", let message = object["message"] as? String {
                ended[message] = object
            }
            if object["label"] as? String == "enlarger.worker", object["message"] as? String == "ready" { ready = object }
        }
        // Counts and sizes outside the request lines are numbers too.
        let registered = try XCTUnwrap(ready, text)
        XCTAssertEqual(registered["capacity"] as? Int, 1, "\(registered)")
        XCTAssertNotNil(registered["memory_budget_bytes"] as? Int, "\(registered)")
        let broker = try XCTUnwrap(ended["request ended"], text)
        // The broker writes this line from its fields in order (`RequestEnd.logFields`), not
        // through a dictionary: the same keys, sorted, as every other line.
        let line = try XCTUnwrap(text.split(separator: "\n").first { $0.contains("\"request ended\"") && $0.contains("logged-0") })
        let keys = line.matches(of: /"([a-z_]+)":/).map { String($0.output.1) }
        XCTAssertEqual(keys, ["ts", "level", "label", "message", "attempts", "bytes_in", "bytes_out", "code", "duration_ms",
                              "job_id", "outcome", "principal", "queue_wait_ms", "request_id", "stage"], String(line))
        XCTAssertEqual(broker["stage"] as? String, "ended")
        XCTAssertEqual(broker["code"] as? String, "OK")
        XCTAssertEqual(broker["outcome"] as? String, "finished")
        XCTAssertNotNil(broker["duration_ms"] as? Double, "duration_ms is a number: \(broker)")
        XCTAssertNotNil(broker["queue_wait_ms"] as? Double, "\(broker)")
        let worker = try XCTUnwrap(ended["job ended"], text)
        XCTAssertEqual(worker["code"] as? String, "OK")
        for field in ["duration_ms", "decode_ms", "resize_ms", "encode_ms"] {
            XCTAssertNotNil(worker[field] as? Double, "\(field) is a number: \(worker)")
        }
        // The job's stages fit in the job (a degraded result and the final share one decode).
        let stages = ["decode_ms", "resize_ms", "encode_ms"].compactMap { worker[$0] as? Double }.reduce(0, +)
        XCTAssertLessThanOrEqual(stages, (worker["duration_ms"] as? Double ?? 0) + 0.2, // each rounded to 0.1 ms
                                  "\(worker)")
        XCTAssertNotNil(worker["bytes_out"] as? Int, "\(worker)")
    }

    func testHealthSaysWhyNotInOneLine() throws {
        let address = "127.0.0.1:\(try unusedPort())"
        let refused = try run(["health", "--http", address])
        XCTAssertEqual(refused.status, 1)
        XCTAssertEqual(refused.stderr.split(separator: "\n").count, 1, refused.stderr)
        XCTAssert(refused.stderr.contains("unhealthy: cannot connect to \(address)"), refused.stderr)

        let endpoint = "tcp://127.0.0.1:\(try unusedPort())"
        let unreachable = try run(["health", "--broker", endpoint, "--insecure-tcp", "--timeout-ms", "600"])
        XCTAssertEqual(unreachable.status, 1)
        XCTAssertEqual(unreachable.stderr.split(separator: "\n").count, 1, unreachable.stderr)
        XCTAssert(unreachable.stderr.contains("unhealthy: \(endpoint)"), unreachable.stderr)

        let badAddress = try run(["broker", "--clients", "ipc:///tmp/x.sock", "--workers", "ipc:///tmp/y.sock",
                                  "--metrics", "9570"])
        XCTAssertNotEqual(badAddress.status, 0)
        XCTAssert(badAddress.stderr.contains("--metrics: 9570 is not HOST:PORT"), badAddress.stderr)
    }

    // MARK: - Processes

    typealias Output = ChildProcess.Output

    private func run(_ arguments: [String], environment: [String: String] = [:], stdin: Data? = nil,
                     binary: URL = Cluster.enlargerBinary) throws -> Output {
        try ChildProcess.run(binary, arguments, environment: Self.environment(environment), stdin: stdin)
    }

    /// This process's environment without Enlarger settings, plus `extra`.
    static func environment(_ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("ENLARGER_") }
        environment.merge(extra) { $1 }
        return environment
    }

    static func shellQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    private func temporaryDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-cli-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
        return directory
    }

    /// A loopback port nobody listens on (bound, read, released).
    private func unusedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                guard bind(fd, raw, length) == 0, getsockname(fd, raw, &length) == 0 else {
                    throw ClusterError("cannot pick a port: \(String(cString: strerror(errno)))")
                }
            }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A value written by one thread and read by another after a semaphore.
/// Text appended by one thread and read by another.
private final class SharedText: @unchecked Sendable {
    private let lock = NSLock()
    private var text = ""

    func append(_ data: Data) { lock.withLock { text += String(decoding: data, as: UTF8.self) } }
    var value: String { lock.withLock { text } }
}

