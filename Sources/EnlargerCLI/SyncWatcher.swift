import Enlarger
import Foundation
import Locking

/// `sync --watch`: inotify watches on SRC and every directory below it; the paths the
/// notifications name are collected until the tree has been quiet for a moment, then only
/// they are passed to `Syncer.pass(paths:)`. A queue overflow or a lost watch means the
/// changes cannot be known: a full pass then reconciles everything. Runs until SIGINT or
/// SIGTERM.
final class SyncWatcher {
    private let syncer: Syncer
    private var fd: Int32 = -1
    /// Watch descriptor → directory relative to SRC ("" for SRC itself).
    private var watches: [Int32: String] = [:]
    /// How long the tree must be quiet before a pass.
    static let quiet = Duration.milliseconds(300)

    init(syncer: Syncer) { self.syncer = syncer }

    deinit { if fd >= 0 { close(fd) } }

    /// Watches until a termination signal; returns the failures of every pass.
    func run(client: EnlargerClient) async throws -> Int {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { throw WatchError("cannot watch \(syncer.source): \(String(cString: strerror(errno)))") }
        var needFull = !watch("")
        let stop = Lock(false)
        let signals = onTerminationSignals { _ in stop.withLock { $0 = true } }
        defer { signals.forEach { $0.cancel() } }
        var pending = Set<String>()
        var lastEvent = ContinuousClock.now
        var failed = 0
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while !stop.withLock({ $0 }) {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if count > 0 {
                lastEvent = .now
                if !events(buffer, count, into: &pending) { needFull = true }
                continue
            }
            if count < 0 && errno != EAGAIN && errno != EINTR {
                throw WatchError("watching \(syncer.source) failed: \(String(cString: strerror(errno)))")
            }
            if (needFull || !pending.isEmpty) && ContinuousClock.now - lastEvent >= Self.quiet {
                if needFull {
                    // Watches may be missing too: set them again from scratch.
                    for wd in watches.keys { inotify_rm_watch(fd, wd) }
                    watches.removeAll()
                    needFull = !watch("")
                    failed += await syncer.fullPass(client: client)
                } else {
                    failed += await syncer.pass(paths: pending, client: client)
                }
                pending.removeAll()
                continue
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return failed
    }

    /// Watches `relative` and every visible directory below it. False when a watch could not
    /// be set (then changes below it would go unseen).
    @discardableResult
    private func watch(_ relative: String) -> Bool {
        let path = relative.isEmpty ? syncer.layout.source : syncer.layout.source + "/" + relative
        if syncer.layout.isOut(path) { return true }  // thumbnails are not sources
        let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_CREATE | IN_ATTRIB
                          | IN_DELETE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
        let wd = inotify_add_watch(fd, path, mask)
        guard wd >= 0 else { return false }
        watches[wd] = relative
        var complete = true
        for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] where !name.hasPrefix(".") {
            var info = stat()
            let child = relative.isEmpty ? name : (relative as NSString).appendingPathComponent(name)
            if lstat((path as NSString).appendingPathComponent(name), &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR {
                complete = watch(child) && complete
            }
        }
        return complete
    }

    /// Adds the paths named by the events in `buffer[..<count]` to `pending`; false when they
    /// cannot tell what changed (an overflow, or a lost watch on SRC).
    private func events(_ buffer: [UInt8], _ count: Int, into pending: inout Set<String>) -> Bool {
        var known = true
        buffer.withUnsafeBytes { raw in
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= count {
                let wd = raw.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                let nameBytes = raw[(offset + header)..<min(count, offset + header + length)].prefix { $0 != 0 }
                let name = String(decoding: nameBytes, as: UTF8.self)
                offset += header + length
                if mask & UInt32(IN_Q_OVERFLOW) != 0 { known = false; continue }
                guard let directory = watches[wd] else { continue }
                if mask & UInt32(IN_IGNORED) != 0 {
                    watches[wd] = nil
                    if directory.isEmpty { known = false }  // SRC itself went away or was moved
                    continue
                }
                guard !name.isEmpty, !name.hasPrefix(".") else { continue }
                let path = directory.isEmpty ? name : (directory as NSString).appendingPathComponent(name)
                if mask & UInt32(IN_ISDIR) != 0 && mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 {
                    if !watch(path) { known = false }
                }
                // A file just created is passed on when it is closed after writing.
                if mask & UInt32(IN_CREATE) != 0 && mask & UInt32(IN_ISDIR) == 0 { continue }
                pending.insert(path)
            }
        }
        return known
    }

    struct WatchError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
