import Foundation
import TestSupport
import XCTest

/// The README's shell blocks as a reader meets them: the walkthrough is run for real against
/// `enlarger serve` (its cancel demo must cancel), and every `enlarger` (`$E`) and
/// `enlarger-bench` (`$B`) command line of every block names a command that exists and only
/// options that command has; the scripts it names exist. (The Swift blocks are compiled with
/// the client's tests: `ReadmeExampleTests`; the Python client's README blocks run in its own
/// tests.)
final class ReadmeTests: XCTestCase {
    private static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    private static let binaries = Cluster.enlargerBinary.deletingLastPathComponent()

    private func readme() throws -> String {
        try String(contentsOf: Self.repository.appendingPathComponent("README.md"), encoding: .utf8)
    }

    func testEveryCommandLineOfTheReadmeNamesOptionsThatExist() throws {
        let blocks = ReadmeShell.blocks(try readme())
        XCTAssertGreaterThanOrEqual(blocks.count, 6, "the README's shell blocks were not found")
        var help: [String: String] = [:]
        var checked = 0
        for block in blocks {
            for command in ReadmeShell.commands(block) {
                guard let first = command.first else { continue }
                if first.hasPrefix("Benchmarks/") || first.hasPrefix("scripts/") {
                    XCTAssert(FileManager.default.isExecutableFile(atPath: Self.repository.appendingPathComponent(first).path),
                              "\(first) is not an executable script of the repository")
                    continue
                }
                let binary: String
                switch first {
                case "$E", "enlarger": binary = "enlarger"
                case "$B": binary = "enlarger-bench"
                default: continue
                }
                guard command.count > 1 else { continue }
                let subcommand = command[1]
                let key = "\(binary) \(subcommand)"
                if help[key] == nil {
                    let result = try Self.run(Self.binaries.appendingPathComponent(binary), [subcommand, "--help"])
                    XCTAssertEqual(result.status, 0, "\(key) --help: \(result.stderr)")
                    help[key] = result.stdout
                }
                for option in ReadmeShell.options(command) {
                    let text = help[key] ?? ""
                    let known = text.range(of: NSRegularExpression.escapedPattern(for: option) + "([^a-z0-9-]|$)",
                                           options: .regularExpression) != nil
                    XCTAssert(known, "README: `\(command.joined(separator: " "))`: \(key) has no \(option)")
                }
                checked += 1
            }
        }
        XCTAssertGreaterThanOrEqual(checked, 15, "too few command lines were checked: \(help.keys.sorted())")
    }

    /// The walkthrough block, run by bash as the README gives it, against `serve` with two
    /// workers: the submit of the corpus ends with every photo done, `status` answers, and the
    /// cancel demo cancels both of its requests.
    func testTheWalkthroughRunsAndItsCancelDemoCancels() async throws {
        let walkthrough = try XCTUnwrap(ReadmeShell.blocks(try readme()).first { $0.contains("E=$(swift build") },
                                        "no walkthrough block")
        XCTAssert(walkthrough.contains("$E cancel"), walkthrough)
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-readme-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
        let runtime = directory.appendingPathComponent("run").path
        let environment = CLITests.environment(["ENLARGER_RUNTIME_DIR": runtime, "TMPDIR": directory.path])

        let serve = Process()
        serve.executableURL = Cluster.enlargerBinary
        serve.arguments = ["serve", "--workers", "2"]
        serve.environment = environment
        serve.standardOutput = FileHandle.nullDevice
        serve.standardError = FileHandle.nullDevice
        try serve.run()
        defer {
            serve.terminate()
            serve.waitUntilExit()
        }
        let ready = ContinuousClock.now + .seconds(20)
        while try Self.run(Cluster.enlargerBinary, ["health", "--ready"], environment: environment).status != 0 {
            guard ContinuousClock.now < ready else { return XCTFail("serve never became ready") }
            try await Task.sleep(for: .milliseconds(100))
        }

        // `swift build --show-bin-path` answers with this build's directory; the corpus is
        // wherever the tests read it from.
        let script = """
            swift() { echo \(CLITests.shellQuoted(Self.binaries.path)); }
            \(walkthrough.replacingOccurrences(of: "../shared/corpus", with: Corpus.root.path))
            """
        let started = ContinuousClock.now
        let result = try Self.run(URL(fileURLWithPath: "/bin/bash"), ["-c", script], environment: environment,
                                  directory: Self.repository)
        let output = result.stdout + result.stderr
        let photos = try FileManager.default.contentsOfDirectory(atPath: Corpus.root.appendingPathComponent("good").path)
            .filter { $0.hasSuffix(".jpg") || $0.hasSuffix(".jpeg") }.count
        XCTAssert(output.contains("\(photos) done, 0 failed"), "the corpus submit: \(output)")
        XCTAssert(output.contains("workers"), "status: \(output)")
        XCTAssert(output.contains("big-0: cancelled") && output.contains("big-1: cancelled"), "the cancel: \(output)")
        XCTAssert(output.contains("0 done, 0 failed, 2 cancelled"), "the cancelled submit: \(output)")
        XCTAssert(output.contains("[big-0]: cancelled by another connection"), output)
        XCTAssertFalse(output.contains("cancelled CANCELLED"), "a word said twice: \(output)")
        print("README walkthrough: \(ContinuousClock.now - started)")
    }

    /// The codemap and the README's module table name every target of Package.swift, so that
    /// a new target cannot be added without a word about what it owns.
    func testEveryTargetIsInTheCodemapAndTheModuleTable() throws {
        let manifest = try String(contentsOf: Self.repository.appendingPathComponent("Package.swift"), encoding: .utf8)
        let codemap = try String(contentsOf: Self.repository.appendingPathComponent("ARCHITECTURE.md"), encoding: .utf8)
        let readme = try readme()
        let declaration = try NSRegularExpression(pattern: #"\.(target|executableTarget|systemLibrary)\(\s*name: "([A-Za-z]+)""#)
        let targets = declaration.matches(in: manifest, range: NSRange(manifest.startIndex..., in: manifest)).compactMap {
            Range($0.range(at: 2), in: manifest).map { String(manifest[$0]) }
        }.filter { $0 != "TestSupport" }
        XCTAssertGreaterThanOrEqual(targets.count, 25, "\(targets)")
        for target in targets {
            XCTAssert(codemap.contains("`\(target)`"), "ARCHITECTURE.md does not name \(target)")
            XCTAssert(readme.contains("`\(target)`"), "the README's module table does not name \(target)")
        }
    }

    static func run(_ executable: URL, _ arguments: [String], environment: [String: String] = CLITests.environment([:]),
                    directory: URL? = nil) throws -> ChildProcess.Output {
        try ChildProcess.run(executable, arguments, environment: environment, directory: directory)
    }
}

/// The README's shell blocks read as command lines.
enum ReadmeShell {
    /// The contents of every ```sh block.
    static func blocks(_ markdown: String) -> [String] {
        Markdown.fencedBlocks(markdown, language: "sh")
    }

    /// Each command of `block` as words: continuation lines joined, comments dropped, split at
    /// `;`, `&&` and `&`, a leading `(` or `cd DIR &&` left out.
    static func commands(_ block: String) -> [[String]] {
        let joined = block.replacingOccurrences(of: "\\\n", with: " ")
        var commands: [[String]] = []
        for line in joined.split(separator: "\n") {
            var text = String(line)
            if let comment = text.range(of: #"(^|\s)#"#, options: .regularExpression) { text = String(text[..<comment.lowerBound]) }
            for part in text.replacingOccurrences(of: "&&", with: ";").replacingOccurrences(of: "&", with: ";")
                .split(separator: ";") {
                var words = part.split(whereSeparator: \.isWhitespace).map(String.init)
                while let first = words.first, first == "(" || first.hasPrefix("(") && first.count > 1 {
                    if first == "(" { words.removeFirst() } else { words[0] = String(first.dropFirst()) }
                }
                if !words.isEmpty { commands.append(words) }
            }
        }
        return commands
    }

    /// The long options a command line uses: `--name` of `--name`, `--name=value`,
    /// `[--name` and `--name]`.
    static func options(_ command: [String]) -> [String] {
        command.compactMap { word in
            guard let match = word.range(of: #"--[a-z0-9][a-z0-9-]*"#, options: .regularExpression),
                  word.drop(while: { $0 == "[" }).hasPrefix("--")
            else { return nil }
            return String(word[match])
        }
    }
}
