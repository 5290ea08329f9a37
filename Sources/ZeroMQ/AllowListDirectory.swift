#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The keys of one allow-list directory: one per `*.pub` file (hidden names skipped, so
/// editors' and `CurveKeyPair.write`'s temporary files are not read half written).
///
/// `refresh()` compares a cheap stamp of the directory (each file's name, inode, size and
/// times, following symbolic links, so a Kubernetes-style `..data` swap is seen) with the
/// last one and re-reads the files only when it differs. A file that does not parse is
/// reported and skipped; an unreadable directory yields no keys (fail closed).
struct AllowListDirectory {
    let path: String
    private(set) var keys: Set<CurvePublicKey> = []
    private var stamp: Stamp?

    init(path: String) {
        self.path = path
    }

    /// Re-reads the directory if it changed since the last read, or always with `force`.
    /// - Returns: the events of a re-read (none when nothing changed).
    mutating func refresh(force: Bool) -> [ZAPEvent] {
        // Stamp before reading: a change made during the read then shows up next time.
        let current = Stamp(directory: path)
        guard force || current != stamp else { return [] }
        stamp = current
        var events: [ZAPEvent] = []
        var loaded: Set<CurvePublicKey> = []
        if let code = current.directoryErrno {
            events.append(.allowListProblem(KeyFileError(
                path: path, reason: code == ENOENT ? .missing : .system(operation: "opendir", errno: code))))
        }
        for file in current.files {
            let filePath = path + "/" + file.name
            do {
                loaded.insert(try CurvePublicKey(publicKeyFile: filePath))
            } catch {
                events.append(.allowListProblem(error))
            }
        }
        keys = loaded
        events.insert(.allowListLoaded(directory: path, keyCount: loaded.count), at: 0)
        return events
    }

    /// What identifies the directory's content without reading it.
    struct Stamp: Equatable {
        var directoryErrno: Int32?
        var files: [FileStamp] = []

        init(directory: String) {
            guard let stream = opendir(directory) else {
                directoryErrno = errno
                return
            }
            defer { closedir(stream) }
            while let entry = readdir(stream) {
                let name = withUnsafePointer(to: &entry.pointee.d_name) {
                    $0.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) {
                        String(cString: $0)
                    }
                }
                guard name.hasSuffix(".pub"), !name.hasPrefix(".") else { continue }
                files.append(FileStamp(path: directory + "/" + name, name: name))
            }
            files.sort { $0.name < $1.name }
        }
    }

    struct FileStamp: Equatable {
        var name: String
        var statErrno: Int32?
        var device: UInt64 = 0
        var inode: UInt64 = 0
        var size: Int64 = 0
        var modified: [Int] = []
        var changed: [Int] = []

        init(path: String, name: String) {
            self.name = name
            var info = stat()
            guard stat(path, &info) == 0 else {
                statErrno = errno
                return
            }
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = Int64(info.st_size)
            #if canImport(Darwin)
            modified = [Int(info.st_mtimespec.tv_sec), Int(info.st_mtimespec.tv_nsec)]
            changed = [Int(info.st_ctimespec.tv_sec), Int(info.st_ctimespec.tv_nsec)]
            #else
            modified = [Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec)]
            changed = [Int(info.st_ctim.tv_sec), Int(info.st_ctim.tv_nsec)]
            #endif
        }
    }
}
