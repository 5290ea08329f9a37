import ArgumentParser
import CLISupport
import Enlarger
import Foundation
import ImageModel
import Imaging

struct SubmitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "submit",
        abstract: "Submit JPEGs to the service and write their degraded and final results.",
        discussion: """
            All inputs are submitted concurrently (at most --in-flight at a time). Results go to \
            OUT/<name>.<ext> and OUT/<name>.degraded.<ext>. With --json, one JSON object per \
            event per line: id, event (accepted, started, degraded, final, failed, cancelled, \
            rejected), t_ms since that request was submitted, and width, height, bytes, path for \
            results, or code and message for failures. The exit code is 1 if any request failed.

            Example: enlarger submit photos/*.jpg --width 720 --height 588 --id-prefix batch7 --out thumbs --json
            """
    )

    @Argument(help: "JPEG files to submit.")
    var inputs: [String]

    @OptionGroup var image: ImageOptions

    @Option(help: "progressive (degraded then final), final, or degraded.")
    var delivery: Delivery = .progressive

    @Option(help: "Request ids P-0, P-1, … in input order (default: random UUIDs).")
    var idPrefix: String?

    @Option(help: "Output directory (created if missing).")
    var out: String

    @Flag(help: "Print one JSON object per event.")
    var json = false

    @Option(help: "Requests outstanding at once.")
    var inFlight = 64

    @Option(help: "Refuse input files larger than this many bytes before sending them.")
    var maxBytes = DecodeLimits().maxInputBytes

    @Option(help: ArgumentHelp(
        "Seconds each request may take from acceptance to its end (default: the broker's, 300).",
        discussion: "A request still running then fails with deadlineExceeded and its worker is told to stop."))
    var timeout: Double?

    @OptionGroup var service: ServiceOptions

    func validate() throws {
        if let idPrefix, idPrefix.utf8.count + 1 + String(inputs.count - 1).utf8.count > 64 {
            throw ValidationError("--id-prefix is too long: request ids are at most 64 bytes")
        }
        guard inFlight > 0 else { throw ValidationError("--in-flight must be positive") }
        if let timeout, !(timeout > 0 && timeout <= 4_000_000) {
            throw ValidationError("--timeout must be a positive number of seconds (at most 4000000)")
        }
        var seen: [String: String] = [:]
        for input in inputs {
            let name = ResizeCommand.outputName(input)
            if let other = seen[name] {
                throw ValidationError("'\(other)' and '\(input)' would both write '\(name)' in the output directory")
            }
            seen[name] = input
        }
    }

    func run() async throws {
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let printer = LinePrinter()
        let progress = Progress(total: inputs.count, enabled: !json && isatty(STDERR_FILENO) != 0, printer: printer)
        let options = image.resizeOptions
        let ids = inputs.indices.map { index in idPrefix.map { "\($0)-\(index)" } ?? UUID().uuidString }
        let failures = try await withEnlargerClient(brokerEndpoint: service.clientEndpoint, configuration: try service.clientConfiguration()) { client in
            await withTaskGroup(of: Bool.self) { group in
                var failures = 0
                var next = 0
                func add() {
                    let index = next
                    next += 1
                    group.addTask {
                        await submitOne(inputs[index], id: ids[index], options: options, client: client, printer: printer)
                    }
                }
                while next < min(inFlight, inputs.count) { add() }
                for await ok in group {
                    if !ok { failures += 1 }
                    progress.finished(ok: ok)
                    if next < inputs.count { add() }
                }
                return failures
            }
        }
        progress.clear()
        if failures > 0 {
            if !json { printer.error("\(failures) of \(inputs.count) requests failed") }
            throw ExitCode(1)
        }
    }

    /// Submits one file and reports its events; returns whether it ended with a result.
    private func submitOne(_ input: String, id: String, options: ResizeOptions, client: EnlargerClient,
                           printer: LinePrinter) async -> Bool {
        let start = ContinuousClock.now
        func report(_ event: String, _ fill: (inout JSONLine) -> Void = { _ in }) {
            guard json else { return }
            var line = JSONLine()
            line.add("id", id)
            line.add("input", input)
            line.add("event", event)
            line.add("t_ms", milliseconds(ContinuousClock.now - start))
            fill(&line)
            printer.line(line.text)
        }
        func fail(_ event: String, code: String, message: String) -> Bool {
            report(event) {
                $0.add("code", code)
                $0.add("message", message)
            }
            if !json { printer.error("\(input) [\(id)]: \(event) \(code): \(message)") }
            return false
        }
        let bytes: [UInt8]
        do {
            bytes = try InputFile.read(path: input, maxBytes: maxBytes)
        } catch {
            return fail("failed", code: error.code.rawValue, message: error.message)
        }
        let name = ResizeCommand.outputName(input)
        let ext = options.format.fileExtension
        var timings: [String] = []
        do {
            let request = ResizeRequest(id: id, image: bytes, options: options, delivery: delivery,
                                        timeout: timeout.map { .milliseconds(Int64(($0 * 1000).rounded(.up))) })
            for try await event in client.submit(request) {
                switch event {
                case .accepted:
                    report("accepted")
                case .started(let attempt):
                    report("started") { $0.add("attempt", attempt) }
                case .degraded(let result), .final(let result):
                    let isFinal = if case .final = event { true } else { false }
                    let path = (out as NSString).appendingPathComponent(isFinal ? "\(name).\(ext)" : "\(name).degraded.\(ext)")
                    do {
                        try Data(result.bytes).write(to: URL(fileURLWithPath: path), options: .atomic)
                    } catch {
                        return fail("failed", code: "writeFailed", message: "cannot write \(path): \(error.localizedDescription)")
                    }
                    timings.append("\(isFinal ? "final" : "degraded") \(Int(milliseconds(ContinuousClock.now - start))) ms")
                    report(isFinal ? "final" : "degraded") {
                        $0.add("width", result.width)
                        $0.add("height", result.height)
                        $0.add("bytes", result.bytes.count)
                        $0.add("path", path)
                    }
                    if isFinal && !json {
                        printer.line("\(input) -> \(path) \(result.width)x\(result.height) (\(timings.joined(separator: ", ")))")
                    }
                    if isFinal || delivery == .degraded { return true }
                }
            }
            // The sequence ends without a result only after a cancel through this client.
            return fail("cancelled", code: "cancelled", message: "cancelled")
        } catch {
            let (code, message) = error.codeAndMessage
            return fail(error.eventName, code: code, message: message)
        }
    }
}

/// A one-line progress counter on a terminal's standard error.
final class Progress: Sendable {
    private let total: Int
    private let enabled: Bool
    private let printer: LinePrinter
    private let counts = NSLock()
    nonisolated(unsafe) private var done = 0
    nonisolated(unsafe) private var failed = 0

    init(total: Int, enabled: Bool, printer: LinePrinter) {
        self.total = total
        self.enabled = enabled
        self.printer = printer
    }

    func finished(ok: Bool) {
        guard enabled else { return }
        counts.lock()
        done += 1
        if !ok { failed += 1 }
        let text = "\r\(done)/\(total) done, \(failed) failed"
        counts.unlock()
        FileHandle.standardError.write(Data(text.utf8))
    }

    func clear() {
        if enabled { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }
}
