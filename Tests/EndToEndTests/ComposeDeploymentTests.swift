import Foundation
import TestSupport
import XCTest

/// `docker/compose.yaml` as an operator gets it: nothing reachable without a key, and its key
/// script, broker, worker and producer settings and healthchecks working together. The compose
/// file's own script, environment and healthcheck commands are run here on this host (paths
/// under a temporary directory, ports on the loopback interface), so a broken script, a missing
/// variable or a healthcheck that cannot pass fails. (No container engine runs here: the
/// containers themselves are not started.)
final class ComposeDeploymentTests: XCTestCase {
    private var compose: ComposeFile!

    override func setUpWithError() throws {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docker/compose.yaml")
        compose = ComposeFile(text: try String(contentsOf: url, encoding: .utf8))
    }

    func testNothingIsReachableWithoutAKey() throws {
        XCTAssertFalse(compose.text.contains("insecure-tcp"))
        XCTAssertFalse(compose.text.contains("ENLARGER_INSECURE_TCP"))
        for service in compose.serviceNames {
            for port in compose.ports(of: service) {
                XCTAssert(port.hasPrefix("127.0.0.1:"), "\(service) publishes \(port) beyond the loopback interface")
                XCTAssertFalse(port.hasSuffix(":5571"), "\(service) publishes the worker port")
                XCTAssertFalse(port.hasSuffix(":9570"), "\(service) publishes the metrics port, which has no authentication")
            }
        }
        XCTAssertEqual(compose.ports(of: "broker"), ["127.0.0.1:5570:5570"])
        let broker = compose.environment(of: "broker")
        for name in ["ENLARGER_SERVER_KEY", "ENLARGER_CLIENT_KEYS", "ENLARGER_WORKER_KEYS"] {
            XCTAssertNotNil(broker[name], "the broker has no \(name)")
        }
        for service in ["worker", "producer"] {
            let environment = compose.environment(of: service)
            XCTAssertNotNil(environment["ENLARGER_SERVER_PUBLIC_KEY"], "\(service) does not know the broker's key")
            XCTAssertNotNil(environment["ENLARGER_KEY"], "\(service) has no key")
        }
    }

    func testTheBrokerAndTheWorkersAreHealthCheckedAndRestarted() throws {
        for service in ["broker", "worker"] {
            XCTAssertEqual(compose.environment(of: service)["ENLARGER_METRICS"], "0.0.0.0:9570", "\(service)'s metrics")
            let check = try XCTUnwrap(compose.healthcheck(of: service), "\(service) has no healthcheck")
            XCTAssertEqual(Array(check.prefix(5)), ["CMD", "enlarger", "health", "--http", "127.0.0.1:9570"], service)
            let restart = compose.restart(of: service) ?? "no"
            XCTAssert(["always", "unless-stopped", "on-failure"].contains(restart), "\(service) restarts \(restart)")
        }
        // The broker is ready only once a worker has registered, and the workers wait for the
        // broker to be healthy: its check must be liveness, or neither would ever start.
        XCTAssertEqual(compose.healthcheck(of: "broker")?.last, "--live")
        XCTAssertEqual(compose.healthcheck(of: "worker")?.contains("--live"), false)
    }

    func testTheComposeKeysBrokerWorkerAndProducerWorkTogether() throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-compose-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keys = directory.appendingPathComponent("keys").path
        try FileManager.default.createDirectory(atPath: keys, withIntermediateDirectories: true)
        func local(_ value: String) -> String { value.replacingOccurrences(of: "/keys", with: keys) }

        // The key script, twice: the second run must keep the keys it finds.
        let script = local(try XCTUnwrap(compose.keysScript(), "no key script in the keys service"))
        try run(["/bin/sh", "-eu", "-c", script])
        let brokerKey = try String(contentsOfFile: keys + "/broker/broker.key", encoding: .utf8)
        try run(["/bin/sh", "-eu", "-c", script])
        XCTAssertEqual(try String(contentsOfFile: keys + "/broker/broker.key", encoding: .utf8), brokerKey)
        let mode = try FileManager.default.attributesOfItem(atPath: keys + "/producer/producer.key")[.posixPermissions] as? Int
        XCTAssertEqual(mode, 0o600)

        // Below Linux's ephemeral range (32768 up), which outgoing connections take from.
        let clientPort = Int.random(in: 20000...32000)
        let workerPort = clientPort + 1
        let clients = "tcp://127.0.0.1:\(clientPort)"
        let workers = "tcp://127.0.0.1:\(workerPort)"
        // The compose file's 0.0.0.0:9570 is inside a container of its own; here, the loopback
        // interface and free ports.
        let metrics = ["broker": "127.0.0.1:\(clientPort + 2)", "worker": "127.0.0.1:\(clientPort + 3)"]
        var brokerEnvironment = compose.environment(of: "broker").mapValues(local)
        brokerEnvironment["ENLARGER_METRICS"] = metrics["broker"]
        let broker = try start(["broker", "--clients", clients, "--workers", workers], environment: brokerEnvironment)
        defer { stop(broker) }
        var workerEnvironment = compose.environment(of: "worker").mapValues(local)
        workerEnvironment["ENLARGER_METRICS"] = metrics["worker"]
        let worker = try start(["worker", "--broker", workers, "--concurrency", "1"], environment: workerEnvironment)
        defer { stop(worker) }

        let photo = Corpus.root.appendingPathComponent("good/exifsamples_30-type_error.jpg")
        let out = directory.appendingPathComponent("thumbs").path
        var producer = compose.environment(of: "producer").mapValues(local)
        producer["ENLARGER_BROKER"] = clients
        let submitted = try run(["submit", photo.path, "--width", "64", "--height", "64", "--out", out, "--timeout", "30"],
                                environment: producer, binary: true)
        XCTAssertEqual(submitted.status, 0, submitted.output)
        let written = try FileManager.default.contentsOfDirectory(atPath: out)
        XCTAssert(written.contains { $0.hasSuffix(".jpg") && !$0.contains("degraded") }, "\(written)")

        // The compose healthchecks, pointed at this host's metrics ports, pass: the worker has
        // registered (the submit went through), so the broker is live and the worker ready.
        for service in ["broker", "worker"] {
            let check = try XCTUnwrap(compose.healthcheck(of: service), "\(service) has no healthcheck")
            XCTAssertEqual(check.prefix(2), ["CMD", "enlarger"])
            let arguments = check.dropFirst(2).map { $0 == "127.0.0.1:9570" ? metrics[service]! : $0 }
            let health = try run(arguments, binary: true)
            XCTAssertEqual(health.status, 0, "\(service)'s healthcheck: \(health.output)")
        }

        try checkTheProducerWritesIntoADirectoryOfTheUsersGroup(photo: photo.path, keys: keys, clients: clients,
                                                                 in: directory)

        // Without the producer's key the client refuses to connect over tcp, and with a key
        // the broker does not list, the broker never answers.
        var keyless = producer
        keyless["ENLARGER_KEY"] = nil
        keyless["ENLARGER_SERVER_PUBLIC_KEY"] = nil
        let refused = try run(["submit", photo.path, "--width", "64", "--out", out], environment: keyless, binary: true)
        XCTAssertNotEqual(refused.status, 0)
        XCTAssert(refused.output.contains("without authentication"), refused.output)

        try run([Cluster.enlargerBinary.path, "keygen", "stranger", "--directory", directory.path])
        var stranger = producer
        stranger["ENLARGER_KEY"] = directory.appendingPathComponent("stranger.key").path
        let ignored = try run(["submit", photo.path, "--width", "64", "--out", out, "--timeout", "3"],
                              environment: stranger, binary: true)
        XCTAssertNotEqual(ignored.status, 0, ignored.output)
    }

    /// The compose producer runs as the image's user (uid 10001, who owns the keys in the
    /// volume) with the group given in ENLARGER_GID, so that it can write thumbnails into a
    /// host directory its user made writable by their group, which uid 10001 alone could not.
    /// Run as those ids with `setpriv`, which needs root; skipped otherwise.
    private func checkTheProducerWritesIntoADirectoryOfTheUsersGroup(photo: String, keys: String, clients: String,
                                                                     in directory: URL) throws {
        XCTAssertEqual(compose.user(of: "producer"), "10001:${ENLARGER_GID:-10001}")
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { return }
        // The keys as the keys service leaves them in the volume: the image user's.
        try run(["/bin/chown", "-R", "10001:10001", keys])
        // A host directory of a user 4242 whose group is 4343, writable by the group.
        let out = directory.appendingPathComponent("host-thumbs").path
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        XCTAssertEqual(chown(out, 4242, 4343), 0)
        XCTAssertEqual(chmod(out, 0o775), 0)
        var producer = compose.environment(of: "producer").mapValues { $0.replacingOccurrences(of: "/keys", with: keys) }
        producer["ENLARGER_BROKER"] = clients
        func submit(group: String) throws -> (status: Int32, output: String) {
            try run(["/usr/bin/setpriv", "--reuid=10001", "--regid=\(group)", "--clear-groups",
                     Cluster.enlargerBinary.path, "submit", photo, "--width", "64", "--out", out, "--timeout", "30"],
                    environment: producer, binary: false, mayFail: true)
        }
        let imageGroup = try submit(group: "10001")
        XCTAssertNotEqual(imageGroup.status, 0, "uid 10001 wrote into a directory it may not write: \(imageGroup.output)")
        XCTAssert(imageGroup.output.contains("cannot write to output directory"), imageGroup.output)
        let userGroup = try submit(group: "4343")
        XCTAssertEqual(userGroup.status, 0, userGroup.output)
        let written = try FileManager.default.contentsOfDirectory(atPath: out).filter { !$0.contains("degraded") }
        XCTAssertEqual(written.count, 1, "\(written)")
        guard let thumbnail = written.first else { return }
        let attributes = try FileManager.default.attributesOfItem(atPath: out + "/" + thumbnail)
        XCTAssertEqual(attributes[.groupOwnerAccountID] as? Int, 4343, "the user's group owns the thumbnail")
    }

    // MARK: - Processes

    @discardableResult
    private func run(_ arguments: [String], environment: [String: String] = [:], binary: Bool = false,
                     mayFail: Bool = false) throws -> (status: Int32, output: String)
    {
        let process = Process()
        var arguments = arguments
        if binary {
            process.executableURL = Cluster.enlargerBinary
        } else {
            process.executableURL = URL(fileURLWithPath: arguments.removeFirst())
        }
        process.arguments = arguments
        process.environment = processEnvironment(environment)
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        if !binary && !mayFail && process.terminationStatus != 0 {
            XCTFail("\(arguments.joined(separator: " ")) exited \(process.terminationStatus): \(output)")
        }
        return (process.terminationStatus, output)
    }

    private func start(_ arguments: [String], environment: [String: String]) throws -> Process {
        let process = Process()
        process.executableURL = Cluster.enlargerBinary
        process.arguments = arguments
        process.environment = processEnvironment(environment)
        try process.run()
        return process
    }

    private func stop(_ process: Process) {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    /// This process's environment without any Enlarger settings, plus `extra`, with the
    /// `enlarger` binary first on `PATH` (the key script calls it by name).
    private func processEnvironment(_ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("ENLARGER_") }
        let binaries = Cluster.enlargerBinary.deletingLastPathComponent().path
        environment["PATH"] = binaries + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment.merge(extra) { $1 }
        return environment
    }
}

/// Just enough of `docker/compose.yaml`'s shape to read it: services at two spaces, their
/// keys at four, an environment map's or a healthcheck's entries at six.
struct ComposeFile {
    let text: String
    private let lines: [Substring]

    init(text: String) {
        self.text = text
        lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    }

    var serviceNames: [String] {
        guard let start = lines.firstIndex(of: "services:") else { return [] }
        return lines[(start + 1)...]
            .prefix { $0.isEmpty || $0.hasPrefix(" ") || $0.hasPrefix("#") }
            .filter { $0.hasPrefix("  ") && !$0.hasPrefix("   ") && !$0.hasPrefix("  #") && $0.hasSuffix(":") }
            .map { String($0.dropFirst(2).dropLast()) }
    }

    /// The lines of one service's block.
    private func block(of service: String) -> ArraySlice<Substring> {
        guard let start = lines.firstIndex(of: "services:"),
              let header = lines[(start + 1)...].firstIndex(of: Substring("  \(service):"))
        else { return [] }
        let body = lines[(header + 1)...]
        let end = body.firstIndex { !$0.isEmpty && !$0.hasPrefix("   ") && !$0.hasPrefix("  #") } ?? lines.endIndex
        return lines[(header + 1)..<end]
    }

    func environment(of service: String) -> [String: String] {
        let body = block(of: service)
        guard let start = body.firstIndex(of: "    environment:") else { return [:] }
        var result: [String: String] = [:]
        for line in body[(start + 1)...] {
            guard line.hasPrefix("      "), let colon = line.firstIndex(of: ":") else { break }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            result[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return result
    }

    /// The entries of a service's one-line `ports: [...]` list.
    func ports(of service: String) -> [String] {
        guard let line = block(of: service).first(where: { $0.hasPrefix("    ports:") }),
              let open = line.firstIndex(of: "["), let close = line.lastIndex(of: "]")
        else { return [] }
        return line[line.index(after: open)..<close].split(separator: ",")
            .map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
    }

    /// The command of a service's healthcheck: its `test:`, a one-line list of quoted strings.
    func healthcheck(of service: String) -> [String]? {
        let body = block(of: service)
        guard let start = body.firstIndex(of: "    healthcheck:") else { return nil }
        for line in body[(start + 1)...] {
            guard line.hasPrefix("      ") else { break }
            let entry = line.trimmingCharacters(in: .whitespaces)
            guard entry.hasPrefix("test:") else { continue }
            // A flow list of double-quoted strings is also a JSON array.
            let list = entry.dropFirst("test:".count).trimmingCharacters(in: .whitespaces)
            return (try? JSONSerialization.jsonObject(with: Data(list.utf8))) as? [String]
        }
        return nil
    }

    /// A service's `user:`, without quotes.
    func user(of service: String) -> String? {
        guard let line = block(of: service).first(where: { $0.hasPrefix("    user:") }) else { return nil }
        return line.dropFirst("    user:".count)
            .trimmingCharacters(in: CharacterSet.whitespaces.union(CharacterSet(charactersIn: "\"")))
    }

    /// A service's `restart:` policy, without quotes.
    func restart(of service: String) -> String? {
        guard let line = block(of: service).first(where: { $0.hasPrefix("    restart:") }) else { return nil }
        return line.dropFirst("    restart:".count)
            .trimmingCharacters(in: CharacterSet.whitespaces.union(CharacterSet(charactersIn: "\"")))
    }

    /// The `keys` service's script: the block scalar under its `command:`.
    func keysScript() -> String? {
        let body = block(of: "keys")
        guard let start = body.firstIndex(where: { $0.trimmingCharacters(in: .whitespaces) == "- |" }) else { return nil }
        let script = body[(start + 1)...].prefix { $0.hasPrefix("        ") || $0.isEmpty }
        return script.map { String($0.dropFirst(min(8, $0.count))) }.joined(separator: "\n")
    }
}
