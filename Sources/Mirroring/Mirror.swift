import CFiles
import Foundation

/// What the service made of one source file.
public enum ThumbnailOutcome: Sendable {
    /// The thumbnail's bytes and its file extension (the format the worker chose; no dot).
    case made(bytes: [UInt8], fileExtension: String)
    /// Not an image, or not one this mirror makes a thumbnail of: reported, not a failure.
    case skipped(String)
    case failed(code: String, message: String)
}

/// Makes the thumbnail of `bytes`, read from `path` (relative to SRC).
public typealias Thumbnailer = @Sendable (_ path: String, _ bytes: [UInt8]) async -> ThumbnailOutcome

/// One thing a pass did, reported as it happens.
public enum MirrorEvent: Sendable, Equatable {
    case inserted(path: String, output: String)
    case changed(path: String, output: String)
    /// The thumbnail of a source that is gone, or no longer gets one, was deleted.
    case removed(path: String, output: String)
    case skipped(path: String, reason: String)
    case failed(path: String, code: String, message: String)
    /// A file in OUT that sync did not write: left alone (full passes list them).
    case foreign(output: String)
}

/// The counts of one pass.
public struct MirrorSummary: Sendable, Equatable {
    public var inserted = 0, changed = 0, removed = 0, unchanged = 0, skipped = 0, failed = 0, foreign = 0
    /// Failures by code.
    public var failures: [String: Int] = [:]

    public init() {}

    mutating func count(_ event: MirrorEvent) {
        switch event {
        case .inserted: inserted += 1
        case .changed: changed += 1
        case .removed: removed += 1
        case .skipped: skipped += 1
        case .failed(_, let code, _):
            failed += 1
            failures[code, default: 0] += 1
        case .foreign: foreign += 1
        }
    }
}

/// A directory of thumbnails (OUT) kept in step with a directory of images (SRC).
///
/// Thumbnails are named `OUT/<path in SRC>.<extension of the format written>`: the source's
/// own name is kept whole, so no two sources share a thumbnail (`IMG_1.jpg` and `IMG_1.HEIC`
/// give `IMG_1.jpg.webp` and `IMG_1.HEIC.webp`). Every file written is first recorded
/// (`MirrorRecord`), and a file the record does not give to a source is never replaced or
/// deleted: files in OUT that sync did not write are left alone and listed.
///
/// Not thread-safe: one task drives a mirror; the thumbnails of a pass are made
/// concurrently (at most `inFlight` at once) but written one by one, in that task.
public final class Mirror {
    public let layout: MirrorLayout
    public let maxBytes: Int
    public let inFlight: Int
    /// Take files already at a thumbnail's name (with no record naming them) as earlier
    /// thumbnails, which may be replaced: for an OUT whose record was lost.
    public let adopt: Bool
    let record: MirrorRecord

    /// Resolves SRC and OUT (see `MirrorLayout`), then opens OUT's record, finishing what a
    /// crashed pass left. `spec` names the options thumbnails are made with: other options
    /// than the record's mark every thumbnail to be made again.
    public init(source: String, out: String, spec: String, maxBytes: Int, inFlight: Int, adopt: Bool = false) throws {
        layout = try MirrorLayout.resolve(source: source, out: out)
        self.maxBytes = maxBytes
        self.inFlight = max(1, inFlight)
        self.adopt = adopt
        record = try MirrorRecord(out: layout.out, spec: spec, source: layout.mirrored, adopt: adopt)
    }

    init(layout: MirrorLayout, spec: String, maxBytes: Int, inFlight: Int, adopt: Bool, faults: FaultSchedule?) throws {
        self.layout = layout
        self.maxBytes = maxBytes
        self.inFlight = max(1, inFlight)
        self.adopt = adopt
        record = try MirrorRecord(out: layout.out, spec: spec, source: layout.mirrored, adopt: adopt, faults: faults)
    }

    // MARK: Passes

    /// Scans all of SRC and reconciles OUT with it; lists OUT's foreign files.
    public func fullPass(_ thumbnailer: @escaping Thumbnailer, report: (MirrorEvent) -> Void) async throws -> MirrorSummary {
        let tree = try MirrorTree.scan(layout)
        let gone = tree.gone(record.entries.keys)
        var summary = try await run(tree, gone: gone, thumbnailer, report: report)
        for output in try foreignFiles() {
            let event = MirrorEvent.foreign(output: output)
            summary.count(event)
            report(event)
        }
        try record.checkpoint()
        return summary
    }

    /// Only `paths` (relative to SRC; a directory stands for everything below it), as they
    /// are now: present ones made if new or changed, missing ones removed.
    public func pass(paths: Set<String>, _ thumbnailer: @escaping Thumbnailer, report: (MirrorEvent) -> Void) async throws
        -> MirrorSummary {
        var tree = MirrorTree()
        var gone = Set<String>()
        for path in paths.sorted() where !layout.holdsInOut(path) {
            let full = layout.source + "/" + path
            var info = stat()
            guard lstat(full, &info) == 0 else {
                if errno != ENOENT {
                    tree.skipped[path] = "cannot be read: \(String(cString: strerror(errno)))"
                    tree.unreadable.insert(path)
                    continue
                }
                gone.insert(path)
                gone.formUnion(record.entries.keys.filter { $0.hasPrefix(path + "/") })
                continue
            }
            if (info.st_mode & S_IFMT) == S_IFDIR {
                let below = try MirrorTree.scan(layout, below: path)
                tree.files.merge(below.files) { a, _ in a }
                tree.skipped.merge(below.skipped) { a, _ in a }
                tree.unreadable.formUnion(below.unreadable)
                gone.formUnion(below.gone(record.entries.keys.filter { $0.hasPrefix(path + "/") }))
            } else {
                tree.add(path, info)
            }
        }
        gone.formUnion(tree.skipped.keys.filter { record.entries[$0] != nil && !tree.hides($0) })
        let summary = try await run(tree, gone: Array(gone), thumbnailer, report: report)
        try record.checkpoint()
        return summary
    }

    private func run(_ tree: MirrorTree, gone: [String], _ thumbnailer: @escaping Thumbnailer,
                     report: (MirrorEvent) -> Void) async throws -> MirrorSummary {
        var summary = MirrorSummary()
        func say(_ event: MirrorEvent) {
            summary.count(event)
            report(event)
        }
        // Removed first: a thumbnail is deleted only when no other source needs it.
        for path in gone.sorted() {
            if let output = try removeThumbnail(of: path) { say(.removed(path: path, output: output)) }
        }
        for (path, reason) in tree.skipped.sorted(by: { $0.key < $1.key }) { say(.skipped(path: path, reason: reason)) }
        var work: [(path: String, isNew: Bool)] = []
        for path in tree.files.keys.sorted() {
            guard let entry = record.entries[path] else {
                work.append((path, true))
                continue
            }
            if entry.version == tree.files[path] && isRegularFile(layout.out + "/" + entry.output) {
                summary.unchanged += 1
            } else {
                work.append((path, false))
            }
        }
        guard !work.isEmpty else { return summary }
        let root = layout.source, maxBytes = maxBytes
        try await withThrowingTaskGroup(of: (Int, SourceRead, ThumbnailOutcome?).self) { group in
            var next = 0
            func add() {
                let index = next, path = work[index].path
                next += 1
                group.addTask {
                    let read = SourceRead.read(root + "/" + path, maxBytes: maxBytes)
                    guard case .bytes(let bytes, _) = read else { return (index, read, nil) }
                    return (index, read, await thumbnailer(path, bytes))
                }
            }
            while next < min(inFlight, work.count) { add() }
            while let (index, read, outcome) = try await group.next() {
                let (path, isNew) = work[index]
                switch (read, outcome) {
                case (.bytes(_, let version), .made(let bytes, let fileExtension)?):
                    let output = path + "." + fileExtension
                    do {
                        try write(bytes, output: output, for: path, version: version)
                        say(isNew ? .inserted(path: path, output: output) : .changed(path: path, output: output))
                    } catch let failure as WriteFailure {
                        say(.failed(path: path, code: failure.code, message: failure.message))
                    }
                case (.bytes, .skipped(let reason)?), (.skipped(let reason), _):
                    // No thumbnail for what it is now: an earlier one would be stale.
                    if let output = try removeThumbnail(of: path) { say(.removed(path: path, output: output)) }
                    say(.skipped(path: path, reason: reason))
                case (.bytes, .failed(let code, let message)?), (.failed(let code, let message), _):
                    // The source itself gets no thumbnail now: an earlier one would be stale. Any
                    // other failure (the service's, a read that may work later) leaves the
                    // thumbnail and its record as they were, for the next pass to try again.
                    if Self.sourceFailureCodes.contains(code), let output = try removeThumbnail(of: path) {
                        say(.removed(path: path, output: output))
                    }
                    say(.failed(path: path, code: code, message: message))
                case (.bytes, nil):
                    preconditionFailure("a read source always has an outcome")
                }
                if next < work.count { add() }
            }
        }
        return summary
    }

    /// The failures that say a source has no thumbnail to give (gone, not an image any more,
    /// broken, beyond the limits), rather than that none could be made this time.
    public static let sourceFailureCodes: Set<String> = [
        "NOT_FOUND", "UNKNOWN_FORMAT", "EMPTY", "TRUNCATED", "CORRUPT", "UNSUPPORTED", "TOO_LARGE",
        "TOO_MANY_SCANS",
    ]

    // MARK: Writing and removing

    private struct WriteFailure: Error {
        var code: String
        var message: String
    }

    /// Writes `source`'s thumbnail to `output` (relative to OUT) in the record's five steps,
    /// every step in its directory as opened without following a link (a directory of OUT
    /// swapped for one meanwhile is never written through).
    private func write(_ bytes: [UInt8], output: String, for source: String, version: FileVersion) throws {
        let target = layout.out + "/" + output
        let directory = (output as NSString).deletingLastPathComponent
        let name = (output as NSString).lastPathComponent
        try makeDirectories(directory, for: output)
        guard let parent = OutFiles.openDirectory(directory, in: layout.out) else {
            throw WriteFailure(code: "WRITE_FAILED", message: "cannot write \(target): \(String(cString: strerror(errno))) "
                               + "(symbolic links in OUT are not followed)")
        }
        defer { close(parent) }
        var info = stat()
        let exists = fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0
        if exists && record.entries[source]?.output == output && !record.holdsAsWritten(source, now: FileVersion(info)) {
            // Written over or replaced since sync made it: the user's now. It is let go, listed
            // as foreign from now on, and the source fails until it is moved (or --adopt).
            try record.remove(source)
        }
        var replace = exists && record.mayReplace(output, for: source)
        if exists && !replace {
            guard adopt && record.owners[output] == nil && (info.st_mode & S_IFMT) == S_IFREG else {
                throw WriteFailure(code: "OUTPUT_EXISTS", message: "\(target) exists and is not a thumbnail sync wrote "
                                   + "for this file: it is left alone (remove it, or run with --adopt to replace it)")
            }
            replace = true
        }
        let temporaryName = MirrorRecord.temporaryPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let temporary = (directory.isEmpty ? "" : directory + "/") + temporaryName
        try record.begin(source, output: output, temporary: temporary)
        try record.faults?.step("pending recorded")
        func giveUp(_ code: Int32) throws -> WriteFailure {
            unlinkat(parent, temporaryName, 0)
            try record.abandon(source)
            return WriteFailure(code: "WRITE_FAILED", message: "cannot write \(target): \(String(cString: strerror(code)))")
        }
        let fd = openat(parent, temporaryName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw try giveUp(errno) }
        try record.faults?.step("temporary created")
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                close(fd)
                throw try giveUp(code)
            }
            written += n
        }
        // The file as written (a rename changes only its change time, which is not compared):
        // taken from the descriptor, so nothing put at the name meanwhile is taken for it.
        var made = stat()
        guard fstat(fd, &made) == 0 else {
            let code = errno
            close(fd)
            throw try giveUp(code)
        }
        guard close(fd) == 0 else { throw try giveUp(errno) }
        try record.faults?.step("temporary written")
        try record.written(source, file: FileVersion(made))
        try record.faults?.step("written recorded")
        if replace {
            guard renameat(parent, temporaryName, parent, name) == 0 else { throw try giveUp(errno) }
        } else {
            let result = enlarger_renameat_noreplace(parent, temporaryName, name)
            if result == -EEXIST {
                unlinkat(parent, temporaryName, 0)
                try record.abandon(source)
                throw WriteFailure(code: "OUTPUT_EXISTS", message: "\(target) appeared while its thumbnail was written: "
                                   + "it is left alone")
            }
            guard result == 0 else { throw try giveUp(-result) }
        }
        try record.faults?.step("renamed")
        if let old = record.entries[source]?.output, old != output, !record.othersNeed(old, besides: source),
           record.holdsAsWritten(source) {
            let file = record.entries[source]?.file
            OutFiles.remove(old, in: layout.out) { now in file.map(now.sameContent(as:)) ?? true }
            try record.faults?.step("old thumbnail removed")
        }
        try record.finish(source, output: output, version: version, file: FileVersion(made))
        try record.faults?.step("finished")
    }

    /// Creates OUT's directories down to `directory`, never through a symbolic link.
    private func makeDirectories(_ directory: String, for output: String) throws {
        guard !directory.isEmpty else { return }
        var built = layout.out
        for name in directory.split(separator: "/") {
            built += "/" + name
            var info = stat()
            if lstat(built, &info) == 0 {
                guard (info.st_mode & S_IFMT) == S_IFDIR else {
                    throw WriteFailure(code: "WRITE_FAILED", message: "cannot write \(layout.out)/\(output): \(built) "
                                       + "is not a directory (symbolic links in OUT are not followed)")
                }
            } else if mkdir(built, 0o777) != 0 && errno != EEXIST {
                throw WriteFailure(code: "WRITE_FAILED", message: "cannot create \(built): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Deletes `source`'s thumbnail (unless another source needs it) and its record; returns
    /// its name, or nil when there was none or the file there is not sync's any more (put in
    /// its place since: the user's, left alone and foreign from now on).
    private func removeThumbnail(of source: String) throws -> String? {
        guard let output = record.entries[source]?.output else { return nil }
        let ours = record.holdsAsWritten(source)
        if ours && !record.othersNeed(output, besides: source) {
            // Only the file sync wrote (any regular file in a record that predates keeping it).
            let file = record.entries[source]?.file
            OutFiles.remove(output, in: layout.out) { now in file.map(now.sameContent(as:)) ?? true }
            try record.faults?.step("thumbnail removed")
        }
        try record.remove(source)
        try record.faults?.step("removal recorded")
        return ours ? output : nil
    }

    /// Regular files in OUT that sync did not write (its record aside), sorted.
    func foreignFiles() throws -> [String] {
        var foreign: [String] = []
        let owned = Set(record.owners.keys)
        func walk(_ relative: String) {
            let directory = relative.isEmpty ? layout.out : layout.out + "/" + relative
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
            for name in names.sorted() {
                let child = relative.isEmpty ? name : relative + "/" + name
                if relative.isEmpty && name.hasPrefix(MirrorRecord.fileName) { continue }
                var info = stat()
                guard lstat(directory + "/" + name, &info) == 0 else { continue }
                if (info.st_mode & S_IFMT) == S_IFDIR {
                    walk(child)
                } else if !owned.contains(child) {
                    foreign.append(child)
                }
            }
        }
        walk("")
        return foreign
    }

    private func isRegularFile(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }
}

/// A source file read for sending, with the version it had when opened.
enum SourceRead: Sendable {
    case bytes([UInt8], FileVersion)
    case skipped(String)
    case failed(code: String, message: String)

    /// Opens `path` without following a symbolic link or blocking on a FIFO, checks it is a
    /// regular file of 1 to `maxBytes` bytes, and reads it.
    static func read(_ path: String, maxBytes: Int) -> SourceRead {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else {
            let code = errno
            if code == ELOOP { return .skipped("symbolic link: not followed") }
            return .failed(code: code == ENOENT ? "NOT_FOUND" : "UNREADABLE",
                           message: "\(path): \(String(cString: strerror(code)))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .failed(code: "UNREADABLE", message: "\(path): \(String(cString: strerror(errno)))") }
        if let reason = MirrorTree.notARegularFile(info) { return .skipped(reason) }
        if info.st_size == 0 { return .skipped("empty file") }
        if info.st_size > maxBytes { return .skipped("\(info.st_size) bytes, above --max-bytes \(maxBytes)") }
        let version = FileVersion(info)
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var filled = 0
        while filled < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress! + filled, $0.count - filled) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failed(code: "UNREADABLE", message: "\(path): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }  // shortened meanwhile: its new version is made next pass
            filled += n
        }
        if filled < bytes.count { bytes.removeLast(bytes.count - filled) }
        if bytes.isEmpty { return .skipped("empty file") }
        return .bytes(bytes, version)
    }
}
