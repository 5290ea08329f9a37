import CFiles
import Foundation

/// What a mirror owns in OUT, kept so that a crash at any moment loses nothing: the
/// options' key, each source's thumbnail and the version it was made from, and each write
/// under way. It is one file, `OUT/.enlarger-sync.journal`, of JSON lines: a header, one
/// line per source (a checkpoint), then one line per change appended as it happens.
///
/// A thumbnail is written in five steps, each of which may be the last before a crash:
/// 1. a `pending` line names the source, its output and the temporary file about to be made;
/// 2. the temporary file is created (never over an existing file) and written;
/// 3. a `written` line records that file (device, inode, size, modification time);
/// 4. it is renamed to the output (never over a file the record does not give this source);
/// 5. a `set` line records the output and the version it was made from.
/// On open, every write still pending is undone: its temporary file is removed, and a new
/// output it produced too, but only when the file at the output's name is the one step 3
/// recorded (a file put there after the crash, or there because the rename never happened,
/// is not sync's to delete); a thumbnail it replaced under the same name is kept, recorded
/// as that file. Its source is made again by the next pass. A line cut off
/// by a crash is the last one and is ignored. Appends are not synced to disk one by one
/// (a crash of the process loses none; a power cut may lose the newest lines, and with them
/// knowledge of the newest thumbnails, which are then left alone as foreign files); each
/// checkpoint is synced.
final class MirrorRecord {
    static let fileName = ".enlarger-sync.journal"
    /// The first version's manifest, read once and replaced.
    static let legacyFileName = ".enlarger-sync.json"
    /// Temporary files of thumbnails: `OUT/<dir>/.enlarger-partial-<hex>`.
    static let temporaryPrefix = ".enlarger-partial-"

    struct Entry: Equatable {
        /// nil: to be made again (options changed, or a write was cut short).
        var version: FileVersion?
        /// The thumbnail's path relative to OUT.
        var output: String
        /// The thumbnail file as sync left it (nil in a record written before this was kept):
        /// a file at `output` that is not this one any more (`sameContent`) is the user's,
        /// never replaced nor deleted.
        var file: FileVersion? = nil
    }



    struct Pending: Equatable {
        var output: String
        var temporary: String
        /// The temporary file once written (step 3), before it is renamed to `output`.
        var file: FileVersion? = nil
    }

    /// The directory a record mirrors: its path when last synced, and its device and inode.
    struct Source: Codable, Equatable {
        var path: String
        var identity: FileIdentity
    }

    private struct Line: Codable {
        var format: Int?
        var spec: String?
        var source: Source?
        var set: String?
        var pending: String?
        var written: String?
        var remove: String?
        var output: String?
        var temporary: String?
        var version: FileVersion?
        var file: FileVersion?
    }

    let out: String
    let path: String
    private(set) var spec: String
    /// The directory mirrored, as the next checkpoint records it (nil: none is known).
    private(set) var source: Source?
    private(set) var entries: [String: Entry] = [:]
    private(set) var pending: [String: Pending] = [:]
    /// Output → the sources whose thumbnail it is (one, except in a record of the first
    /// version, whose names could collide).
    private(set) var owners: [String: Set<String>] = [:]
    private var fd: Int32 = -1
    /// OUT itself, open and locked (`flock`) while this record is: one sync at a time.
    private var lock: Int32 = -1
    private var appended = 0
    /// Tests: a crash (a thrown `MirrorCrash`) at a chosen step.
    var faults: FaultSchedule?

    /// Opens OUT's record (or starts one), undoes every write a crash left pending, and
    /// writes a fresh checkpoint. Options other than `spec` mark every thumbnail to be made again.
    init(out: String, spec: String, source: Source? = nil, adopt: Bool = false, faults: FaultSchedule? = nil) throws {
        self.faults = faults
        self.out = out
        self.spec = spec
        path = out + "/" + Self.fileName
        // Before anything is read or undone: another sync's writes under way are not a crash's.
        lock = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard lock >= 0 else { throw MirrorError("cannot open \(out): \(String(cString: strerror(errno)))") }
        guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(lock)
            lock = -1
            throw MirrorError(code == EWOULDBLOCK ? "another sync is writing to \(out): one at a time"
                                                  : "cannot lock \(out): \(String(cString: strerror(code)))")
        }
        self.source = source
        var recordedSpec = spec
        if let data = FileManager.default.contents(atPath: path) {
            let recorded = try replay(data)
            recordedSpec = recorded.spec
            // Another directory's mirror (or SRC mistyped, or an empty mount point): its
            // thumbnails would all be taken for those of deleted files.
            if let mirrored = recorded.source, let source, mirrored.identity != source.identity, !adopt {
                throw MirrorError("\(out) mirrors \(mirrored.path), not \(source.path): sync that directory into it, "
                                  + "choose another --out, or run with --adopt to make it \(source.path)'s mirror "
                                  + "(the thumbnails of files \(source.path) does not have are then deleted)")
            }
        } else if let data = FileManager.default.contents(atPath: out + "/" + Self.legacyFileName) {
            recordedSpec = try legacy(data)
        }
        for (source, write) in pending {
            // A name of sync's own (a random one with sync's prefix): whatever it holds is partial.
            OutFiles.remove(write.temporary, in: out) { _ in true }
            // Renamed to the output: the file there is the one written (and not changed since).
            let renamed = write.file.flatMap { file in OutFiles.version(of: write.output, in: out)?.sameContent(as: file) } ?? false
            if entries[source]?.output == write.output {
                // A thumbnail replaced, or not yet: either file is sync's, anything else the user's.
                if renamed { entries[source]?.file = write.file }
            } else if renamed, let file = write.file {
                OutFiles.remove(write.output, in: out) { $0.sameContent(as: file) }
            }
            entries[source]?.version = nil
        }
        pending.removeAll()
        if recordedSpec != spec {
            for key in entries.keys { entries[key]?.version = nil }
        }
        owners = [:]
        for (source, entry) in entries { owners[entry.output, default: []].insert(source) }
        try checkpoint()
        unlink(out + "/" + Self.legacyFileName)
    }

    deinit {
        if fd >= 0 { close(fd) }
        if lock >= 0 { close(lock) }  // and with it the lock
    }

    /// Reads the lines of `data` into the record; returns the spec it was written with, and
    /// the directory it mirrored (nil in a record that predates keeping it).
    private func replay(_ data: Data) throws -> (spec: String, source: Source?) {
        let lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        let decoder = JSONDecoder()
        var recordedSpec: String?
        var recordedSource: Source?
        for (index, bytes) in lines.enumerated() where !bytes.isEmpty {
            let isLast = index == lines.count - 1  // no newline after it: cut off by a crash
            guard let line = try? decoder.decode(Line.self, from: Data(bytes)), !isLast else {
                if isLast { break }
                throw MirrorError("\(path): line \(index + 1) cannot be read. The record of which files in "
                                  + "\(out) are thumbnails is damaged: move it away and run again with --adopt.")
            }
            if index == 0 {
                guard line.format == 2, let spec = line.spec else {
                    throw MirrorError("\(path) is not a sync record of this version")
                }
                recordedSpec = spec
                recordedSource = line.source
            } else if let source = line.set, let output = line.output {
                entries[source] = Entry(version: line.version, output: output, file: line.file)
                pending[source] = nil
            } else if let source = line.pending, let output = line.output, let temporary = line.temporary {
                pending[source] = Pending(output: output, temporary: temporary)
            } else if let source = line.written, let file = line.file {
                pending[source]?.file = file
            } else if let source = line.remove {
                entries[source] = nil
                pending[source] = nil
            }
        }
        guard let recordedSpec else { throw MirrorError("\(path) is empty") }
        return (recordedSpec, recordedSource)
    }

    /// The first version's manifest: its thumbnails are adopted, each to be made again
    /// (their names change, and their versions lacked the ctime).
    private func legacy(_ data: Data) throws -> String {
        struct Manifest: Decodable {
            struct Entry: Decodable { var output: String }
            var spec: String
            var entries: [String: Entry]
        }
        guard let manifest = try? JSONDecoder().decode(Manifest.self, from: data) else {
            throw MirrorError("\(out)/\(Self.legacyFileName) cannot be read: move it away and run again with --adopt.")
        }
        for (source, entry) in manifest.entries where !entry.output.hasPrefix("/") && !entry.output.contains("..") {
            entries[source] = Entry(version: nil, output: entry.output)
        }
        return manifest.spec
    }

    /// Rewrites the record as a checkpoint (header and one line per source), synced, then
    /// renamed over the old one; later changes are appended to it.
    func checkpoint() throws {
        try faults?.step("checkpoint")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var text = Data()
        func add(_ line: Line) throws {
            text.append(try encoder.encode(line))
            text.append(UInt8(ascii: "\n"))
        }
        try add(Line(format: 2, spec: spec, source: source))
        for source in entries.keys.sorted() {
            let entry = entries[source]!
            try add(Line(set: source, output: entry.output, version: entry.version, file: entry.file))
        }
        for source in pending.keys.sorted() {
            let write = pending[source]!
            try add(Line(pending: source, output: write.output, temporary: write.temporary))
            if let file = write.file { try add(Line(written: source, file: file)) }
        }
        // The thumbnails it names reach the disk before it does: after a power cut, a record
        // that says a thumbnail is done is never left naming an empty or partial file. One
        // call for OUT's file system, not an fsync per thumbnail.
        if lock >= 0 {
            let status = enlarger_sync_file_system(lock)
            guard status == 0 else { throw MirrorError("cannot flush \(out) to disk: \(String(cString: strerror(-status)))") }
        }
        let temporary = path + ".partial"
        let file = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard file >= 0 else { throw MirrorError("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        do {
            try Self.writeAll(file, text, path: temporary)
            guard fsync(file) == 0 else { throw MirrorError("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        } catch {
            close(file)
            unlink(temporary)
            throw error
        }
        close(file)
        try faults?.step("checkpoint written")
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw MirrorError("cannot write \(path): \(String(cString: strerror(code)))")
        }
        let directory = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
        if fd >= 0 { close(fd) }
        fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard fd >= 0 else { throw MirrorError("cannot write \(path): \(String(cString: strerror(errno)))") }
        appended = 0
    }

    private func append(_ line: Line) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var data = try encoder.encode(line)
        data.append(UInt8(ascii: "\n"))
        try Self.writeAll(fd, data, path: path)
        appended += 1
        // Kept short: a checkpoint once the changes outnumber the sources several times.
        if appended > 4 * entries.count + 10_000 { try checkpoint() }
    }

    private static func writeAll(_ fd: Int32, _ data: Data, path: String) throws {
        try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var written = 0
            while written < raw.count {
                let n = write(fd, raw.baseAddress! + written, raw.count - written)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw MirrorError("cannot write \(path): \(String(cString: strerror(errno)))")
                }
                written += n
            }
        }
    }

    // MARK: Changes

    /// Step 1 of a write: `source`'s thumbnail is about to be made at `output` through `temporary`.
    func begin(_ source: String, output: String, temporary: String) throws {
        pending[source] = Pending(output: output, temporary: temporary)
        try append(Line(pending: source, output: output, temporary: temporary))
    }

    /// Step 3: `source`'s temporary file is written, and is `file`; it is renamed next.
    func written(_ source: String, file: FileVersion) throws {
        pending[source]?.file = file
        try append(Line(written: source, file: file))
    }

    /// Step 5: `source`'s thumbnail is `output`, the file `file`, made from `version`.
    func finish(_ source: String, output: String, version: FileVersion?, file: FileVersion?) throws {
        if let old = entries[source]?.output { owners[old]?.remove(source) }
        entries[source] = Entry(version: version, output: output, file: file)
        pending[source] = nil
        owners[output, default: []].insert(source)
        try append(Line(set: source, output: output, version: version, file: file))
    }

    /// Whether the file at `source`'s thumbnail is still the one sync wrote there (or there
    /// is none, or the record predates keeping it): only then may sync replace or delete it.
    /// `now`: that file, when the caller has just looked (not following a link).
    func holdsAsWritten(_ source: String, now: FileVersion? = nil) -> Bool {
        guard let entry = entries[source], let file = entry.file else { return true }
        if let now { return now.sameContent(as: file) }
        guard let there = OutFiles.version(of: entry.output, in: out) else { return true }
        return there.sameContent(as: file)
    }

    /// A write given up before its rename: the record is as before it began.
    func abandon(_ source: String) throws {
        pending[source] = nil
        if let entry = entries[source] {
            try append(Line(set: source, output: entry.output, version: entry.version, file: entry.file))
        } else {
            try append(Line(remove: source))
        }
    }

    /// `source` has no thumbnail any more (its file was deleted first).
    func remove(_ source: String) throws {
        if let old = entries[source]?.output {
            owners[old]?.remove(source)
            if owners[old]?.isEmpty == true { owners[old] = nil }
        }
        entries[source] = nil
        pending[source] = nil
        try append(Line(remove: source))
    }

    /// Whether `output` may be replaced by `source`'s thumbnail: the record gives it to that
    /// source alone (files no record names are the caller's to judge, with `--adopt`).
    func mayReplace(_ output: String, for source: String) -> Bool {
        if let owning = owners[output] { return owning == [source] }
        return entries[source]?.output == output
    }

    /// Whether any source other than `source` still needs `output`.
    func othersNeed(_ output: String, besides source: String) -> Bool {
        !(owners[output] ?? []).subtracting([source]).isEmpty
    }
}

/// Tests only: the count of steps after which a mirror stops as if killed.
final class FaultSchedule {
    private var remaining: Int
    private(set) var stepsTaken = 0

    init(crashAfter steps: Int) { remaining = steps }

    func step(_ what: String) throws {
        stepsTaken += 1
        remaining -= 1
        if remaining < 0 { throw MirrorCrash(step: what) }
    }
}

/// Tests only: the mirror stopped as if its process had been killed at `step`.
struct MirrorCrash: Error {
    var step: String
}
