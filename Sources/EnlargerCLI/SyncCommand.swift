import ArgumentParser
import CLISupport
import Enlarger
import Foundation
import ImageModel
import Imaging

/// `enlarger sync SRC --out DIR`: DIR mirrors SRC as thumbnails, made by the service.
///
/// A manifest in DIR (`.enlarger-sync.json`) records, for each source file, the version it
/// was made from (size, modification time, inode) and the thumbnail written; a pass compares
/// the tree with it, so only inserted and changed files are sent and the thumbnails of removed
/// ones are deleted. A change of the resize options redoes everything. Thumbnails are written
/// to a temporary name and renamed: a reader never sees half of one.
struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Keep a directory of thumbnails in step with a directory of images, through the service.",
        discussion: """
            Walks SRC (recursively; names starting with a dot are left out) and makes OUT mirror \
            it: OUT/<relative path without extension>.<ext> for every image, <ext> being the \
            format the worker chose. Files in no format the service reads are skipped. Only \
            files new or changed since the last pass are sent (OUT/.enlarger-sync.json records \
            what each thumbnail was made from); thumbnails of removed files are deleted; other \
            files in OUT are left alone. Prints what it did (inserted, changed, removed, \
            unchanged, skipped, failed by code), or one JSON object per file and a summary \
            with --json. The exit code is 1 if any file failed.

            With --watch it goes on after the first pass: file-system notifications (inotify) \
            name the files inserted, changed, renamed or removed, and only those are processed, a \
            summary per pass; a full pass runs again when the notifications cannot tell what \
            changed. Ctrl-C stops it.

            Example: enlarger sync photos --out thumbs --width 320 --height 320 --accept image/webp,image/jpeg
            """
    )

    @Argument(help: "The directory of images to mirror.")
    var source: String

    @Option(help: "The directory of thumbnails (created if missing).")
    var out: String

    @OptionGroup var image: ImageOptions

    @Flag(help: "Print one JSON object per file processed, then a summary.")
    var json = false

    @Flag(help: ArgumentHelp(
        "Keep watching SRC after the first pass and mirror each change as it happens (until Ctrl-C).",
        discussion: "File-system notifications name what changed; only those files are processed. When they "
            + "cannot tell (the notification queue overflowed, a watch was lost), a full pass reconciles everything."))
    var watch = false

    @Option(help: "Requests outstanding at once.")
    var inFlight = 16

    @Option(help: "Skip (and report) source files larger than this many bytes.")
    var maxBytes = DecodeLimits().maxInputBytes

    @OptionGroup var service: ServiceOptions

    func validate() throws {
        guard inFlight > 0 else { throw ValidationError("--in-flight must be positive") }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ValidationError("'\(source)' is not a directory")
        }
    }

    func run() async throws {
        try OutputDirectory.prepare(out)
        let syncer = try Syncer(source: source, out: out, options: image.resizeOptions, json: json, inFlight: inFlight,
                                maxBytes: maxBytes)
        let configuration = try service.clientConfiguration()
        let failed = try await withEnlargerClient(brokerEndpoint: service.clientEndpoint, configuration: configuration) {
            client in
            var failed = await syncer.fullPass(client: client)
            if watch { failed += try await SyncWatcher(syncer: syncer).run(client: client) }
            return failed
        }
        if failed > 0 { throw ExitCode(1) }
    }

    enum Result: Sendable {
        case written(String)
        case skipped(String)
        case failed(code: String, message: String)
    }

    struct Outcome: Sendable {
        var path: String
        var action: String
        var result: Result
    }

    /// Sends `work` (relative paths and what they are) with at most `inFlight` outstanding,
    /// writing each thumbnail as its final arrives.
    static func process(_ work: [(String, String)], root: String, client: EnlargerClient, options: ResizeOptions,
                        out: String, maxBytes: Int, inFlight: Int) async -> [Outcome] {
        await withTaskGroup(of: Outcome.self) { group in
            var outcomes: [Outcome] = []
            var next = 0
            func add() {
                let (path, action) = work[next]
                next += 1
                group.addTask {
                    Outcome(path: path, action: action,
                            result: await one(path, root: root, client: client, options: options, out: out, maxBytes: maxBytes))
                }
            }
            while next < min(inFlight, work.count) { add() }
            for await outcome in group {
                outcomes.append(outcome)
                if next < work.count { add() }
            }
            return outcomes
        }
    }

    private static func one(_ path: String, root: String, client: EnlargerClient, options: ResizeOptions, out: String,
                            maxBytes: Int) async -> Result {
        let bytes: [UInt8]
        do {
            bytes = try InputFile.read(path: (root as NSString).appendingPathComponent(path), maxBytes: maxBytes)
        } catch {
            return error.code == .tooLarge ? .skipped(error.message) : .failed(code: error.code.rawValue, message: error.message)
        }
        guard (try? InputFormat.of(Array(bytes.prefix(16)))) != nil else { return .skipped("not an image") }
        do {
            let image = try await client.resize(bytes, options: options)
            let output = (path as NSString).deletingPathExtension + "." + image.format.fileExtension
            let target = (out as NSString).appendingPathComponent(output)
            try FileManager.default.createDirectory(atPath: (target as NSString).deletingLastPathComponent,
                                                    withIntermediateDirectories: true)
            try OutputFile.write(image.bytes, to: target)
            return .written(output)
        } catch let error as EnlargerClientError {
            let (code, message) = error.codeAndMessage
            return .failed(code: code, message: message)
        } catch let error as ImagingError {
            return .failed(code: error.code.rawValue, message: error.message)
        } catch {
            return .failed(code: "writeFailed", message: "\(error)")
        }
    }
}

/// The image files of a source directory and the version of each.
struct SyncTree: Sendable {
    var root: String
    /// Relative path → version.
    var files: [String: SyncManifest.Version]

    /// Regular files below `root` (symbolic links not followed), names starting with a dot
    /// left out, and the output directory when it lies inside.
    static func scan(_ root: String, excluding out: String, below start: String = "") throws -> SyncTree {
        let base = URL(fileURLWithPath: root).standardizedFileURL.path
        let outPath = URL(fileURLWithPath: out).standardizedFileURL.path
        var files: [String: SyncManifest.Version] = [:]
        func walk(_ relative: String) throws {
            let directory = relative.isEmpty ? base : (base as NSString).appendingPathComponent(relative)
            for name in try FileManager.default.contentsOfDirectory(atPath: directory) where !name.hasPrefix(".") {
                let child = relative.isEmpty ? name : (relative as NSString).appendingPathComponent(name)
                let full = (base as NSString).appendingPathComponent(child)
                var info = stat()
                guard lstat(full, &info) == 0 else { continue }
                switch info.st_mode & S_IFMT {
                case S_IFDIR where full != outPath: try walk(child)
                case S_IFREG: files[child] = SyncManifest.Version(info)
                default: break
                }
            }
        }
        try walk(start)
        return SyncTree(root: base, files: files)
    }
}

/// What a pass has to do.
struct SyncPlan {
    var inserted: [String] = []
    var changed: [String] = []
    var removed: [String] = []
    var unchanged: [String] = []
    /// The versions the plan was made from: what the manifest records once a file is done.
    var files: [String: SyncManifest.Version]

    /// `files` (relative path → version) as they are now, against `manifest`; `removed`: the
    /// manifest's paths that are gone.
    init(files: [String: SyncManifest.Version], removed: [String], manifest: SyncManifest, out: String) {
        self.files = files
        for path in files.keys.sorted() {
            guard let entry = manifest.entries[path] else {
                inserted.append(path)
                continue
            }
            let present = FileManager.default.fileExists(atPath: (out as NSString).appendingPathComponent(entry.output))
            if entry.version == files[path] && present { unchanged.append(path) } else { changed.append(path) }
        }
        self.removed = removed.filter { manifest.entries[$0] != nil }.sorted()
    }
}

/// `OUT/.enlarger-sync.json`: the options the thumbnails were made with and, for each source,
/// its version then and the thumbnail written.
struct SyncManifest: Codable, Sendable {
    static let fileName = ".enlarger-sync.json"

    struct Version: Codable, Equatable, Sendable {
        var size: Int64
        var modifiedNanoseconds: Int64
        var inode: UInt64

        init(_ info: stat) {
            size = Int64(info.st_size)
            modifiedNanoseconds = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
            inode = UInt64(info.st_ino)
        }
    }

    struct Entry: Codable, Sendable {
        /// nil: to be made again (the options changed).
        var version: Version?
        /// The thumbnail's path relative to OUT.
        var output: String
    }

    var format = 1
    var spec = ""
    var entries: [String: Entry] = [:]

    /// The manifest at `path`, or an empty one (first pass, or an unreadable manifest: then
    /// everything is made again).
    static func load(_ path: String) -> SyncManifest {
        guard let data = FileManager.default.contents(atPath: path),
              let manifest = try? JSONDecoder().decode(SyncManifest.self, from: data), manifest.format == 1 else {
            return SyncManifest()
        }
        return manifest
    }

    func save(_ path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        try OutputFile.write(Array(try encoder.encode(self)), to: path)
    }

    /// Everything about the options that changes a thumbnail, in one string.
    static func specKey(_ o: ResizeOptions) -> String {
        [
            "w=\(o.width ?? 0)", "h=\(o.height ?? 0)", "fit=\(o.fit.rawValue)", "enlarge=\(o.enlarge)", "q=\(o.quality)",
            "progressive=\(o.progressive)", "444=\(o.chroma444)", "format=\(o.format.rawValue)",
            "accept=\(o.accept.map(\.rawValue).joined(separator: ","))", "flatten=\(o.flatten)", "bg=\(o.background)",
            "lossless=\(o.lossless)", "failOn=\(o.failOn.rawValue)", "keepProfile=\(o.keepProfile)",
        ].joined(separator: ";")
    }
}

/// Counts, lines per file with --json, and the summary.
struct SyncReport {
    var json: Bool
    var inserted = 0, changed = 0, removed = 0, unchanged = 0, skipped = 0, failed = 0
    var failures: [String: Int] = [:]

    init(json: Bool) { self.json = json }

    /// One line on standard output, written at once (unbuffered: a watcher's lines must not
    /// wait in a buffer when the output is a pipe).
    static func emit(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    mutating func record(_ path: String, _ action: String, output: String? = nil) {
        switch action {
        case "inserted": inserted += 1
        case "changed": changed += 1
        default: removed += 1
        }
        if json {
            var line = JSONLine()
            line.add("path", path)
            line.add("action", action)
            if let output { line.add("output", output) }
            SyncReport.emit(line.text)
        }
    }

    mutating func skip(_ path: String, _ why: String) {
        skipped += 1
        if json {
            var line = JSONLine()
            line.add("path", path)
            line.add("action", "skipped")
            line.add("reason", why)
            SyncReport.emit(line.text)
        }
    }

    mutating func fail(_ path: String, code: String, message: String) {
        failed += 1
        failures[code, default: 0] += 1
        if json {
            var line = JSONLine()
            line.add("path", path)
            line.add("action", "failed")
            line.add("code", code)
            line.add("message", message)
            SyncReport.emit(line.text)
        } else {
            FileHandle.standardError.write(Data("\(path): error \(code): \(message)\n".utf8))
        }
    }

    func finish(source: String, out: String, pass: String, elapsed: Duration) {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        let sent = inserted + changed + failed
        if json {
            var line = JSONLine()
            line.add("summary", true)
            line.add("pass", pass)
            for (name, value) in [("inserted", inserted), ("changed", changed), ("removed", removed),
                                  ("unchanged", unchanged), ("skipped", skipped), ("failed", failed)] {
                line.add(name, value)
            }
            line.add("seconds", seconds)
            SyncReport.emit(line.text)
            return
        }
        let failedText = failures.isEmpty ? "0 failed"
            : "\(failed) failed (" + failures.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")"
        let rate = sent > 0 && seconds > 0 ? String(format: ", %.1f files/s", Double(sent) / seconds) : ""
        SyncReport.emit("sync \(source) -> \(out) (\(pass) pass): \(inserted) inserted, \(changed) changed, \(removed) removed, "
              + "\(unchanged) unchanged, \(skipped) skipped, \(failedText)" + rate)
    }
}
