import Enlarger
import Foundation
import ImageModel
import Imaging
import Mirroring

/// `sync`'s passes through the service: a `Mirror` of SRC in OUT, whose thumbnails a client
/// makes, and the report of each pass (a line per file with --json, as it happens; a
/// summary). Used by one task at a time.
final class Syncer {
    let source: String
    let options: ResizeOptions
    let json: Bool
    let priority: Priority
    private let mirror: Mirror

    /// SRC's and OUT's real paths, and whether OUT lies inside SRC.
    var layout: MirrorLayout { mirror.layout }

    init(source: String, out: String, options: ResizeOptions, json: Bool, inFlight: Int, maxBytes: Int,
         adopt: Bool, priority: Priority = .bulk) throws {
        self.source = source
        self.options = options
        self.priority = priority
        self.json = json
        mirror = try Mirror(source: source, out: out, spec: Self.specKey(options), maxBytes: maxBytes, inFlight: inFlight,
                            adopt: adopt)
    }

    /// Scans the whole tree and reconciles everything. Returns the number of failures.
    func fullPass(client: EnlargerClient) async -> Int {
        await run("full", client: client) { thumbnailer, say in try await mirror.fullPass(thumbnailer, report: say) }
    }

    /// Only `paths` (relative to SRC), as they are now. Returns the number of failures.
    func pass(paths: Set<String>, client: EnlargerClient) async -> Int {
        await run("incremental", client: client) { thumbnailer, say in
            try await mirror.pass(paths: paths, thumbnailer, report: say)
        }
    }

    private func run(_ pass: String, client: EnlargerClient,
                     _ body: (@escaping Thumbnailer, (MirrorEvent) -> Void) async throws -> MirrorSummary) async -> Int {
        let start = ContinuousClock.now
        let options = options, json = json, priority = priority
        let thumbnailer: Thumbnailer = { path, bytes in
            await Self.thumbnail(path, bytes, client: client, options: options, priority: priority)
        }
        do {
            let summary = try await body(thumbnailer) { event in SyncReport.event(event, json: json) }
            SyncReport.finish(summary, source: source, out: layout.out, pass: pass, json: json,
                              elapsed: ContinuousClock.now - start)
            return summary.failed
        } catch {
            SyncReport.event(.failed(path: source, code: "UNREADABLE", message: "\(error)"), json: json)
            return 1
        }
    }

    private static func thumbnail(_ path: String, _ bytes: [UInt8], client: EnlargerClient,
                                  options: ResizeOptions, priority: Priority) async -> ThumbnailOutcome {
        guard (try? InputFormat.of(Array(bytes.prefix(16)))) != nil else { return .skipped("not an image") }
        do {
            let image = try await client.resize(bytes, options: options, priority: priority)
            return .made(bytes: image.bytes, fileExtension: image.format.fileExtension)
        } catch {
            let (code, message) = error.codeAndMessage
            return .failed(code: code, message: message)
        }
    }

    /// Everything about the options that changes a thumbnail, in one string.
    static func specKey(_ o: ResizeOptions) -> String {
        [
            "w=\(o.width ?? 0)", "h=\(o.height ?? 0)", "fit=\(o.fit.rawValue)", "enlarge=\(o.enlarge)", "q=\(o.quality)",
            "progressive=\(o.progressive)", "444=\(o.chroma444)", "format=\(o.format.rawValue)",
            "accept=\(o.accept.map(\.rawValue).joined(separator: ","))", "flatten=\(o.flatten)", "bg=\(o.background)",
            "lossless=\(o.lossless)", "failOn=\(o.failOn.rawValue)", "keepProfile=\(o.keepProfile)",
        ].joined(separator: ";")
            // Added after the rest: a mirror made before keeps its key under the default.
            + (o.gainMap == .keep ? "" : ";gainMap=\(o.gainMap.rawValue)")
    }
}

/// Lines per file with --json (written as each happens), problems on standard error, and
/// the summary of a pass.
enum SyncReport {
    /// One line on standard output, written at once (unbuffered: a watcher's lines must not
    /// wait in a buffer when the output is a pipe).
    static func emit(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func event(_ event: MirrorEvent, json: Bool) {
        var line = JSONLine()
        switch event {
        case .inserted(let path, let output), .changed(let path, let output), .removed(let path, let output):
            line.add("path", path)
            line.add("action", event.action)
            line.add("output", output)
        case .skipped(let path, let reason):
            line.add("path", path)
            line.add("action", "skipped")
            line.add("reason", reason)
        case .failed(let path, let code, let message):
            if !json { FileHandle.standardError.write(Data("\(path): error \(code): \(message)\n".utf8)) }
            line.add("path", path)
            line.add("action", "failed")
            line.add("code", code)
            line.add("message", message)
        case .foreign(let output):
            if !json {
                FileHandle.standardError.write(Data("\(output): in OUT but not written by sync: left alone\n".utf8))
            }
            line.add("output", output)
            line.add("action", "foreign")
        }
        if json { emit(line.text) }
    }

    static func finish(_ s: MirrorSummary, source: String, out: String, pass: String, json: Bool, elapsed: Duration) {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        let sent = s.inserted + s.changed + s.failed
        if json {
            var line = JSONLine()
            line.add("summary", true)
            line.add("pass", pass)
            for (name, value) in [("inserted", s.inserted), ("changed", s.changed), ("removed", s.removed),
                                  ("unchanged", s.unchanged), ("skipped", s.skipped), ("failed", s.failed),
                                  ("foreign", s.foreign)] {
                line.add(name, value)
            }
            line.add("seconds", seconds)
            emit(line.text)
            return
        }
        let failedText = s.failures.isEmpty ? "0 failed"
            : "\(s.failed) failed (" + s.failures.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
                .joined(separator: ", ") + ")"
        let rate = sent > 0 && seconds > 0 ? String(format: ", %.1f files/s", Double(sent) / seconds) : ""
        let foreign = s.foreign > 0 ? ", \(s.foreign) foreign files left alone" : ""
        emit("sync \(source) -> \(out) (\(pass) pass): \(s.inserted) inserted, \(s.changed) changed, \(s.removed) removed, "
             + "\(s.unchanged) unchanged, \(s.skipped) skipped, \(failedText)\(foreign)" + rate)
    }
}

private extension MirrorEvent {
    var action: String {
        switch self {
        case .inserted: "inserted"
        case .changed: "changed"
        case .removed: "removed"
        case .skipped: "skipped"
        case .failed: "failed"
        case .foreign: "foreign"
        }
    }
}
