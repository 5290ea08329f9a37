import Foundation

/// The source files of SRC (or of a directory below it) and the version of each; what is
/// left out, with the reason. Names starting with a dot are left out silently; so is OUT,
/// recognised by device and inode when it lies inside SRC.
struct MirrorTree {
    /// Relative path → version.
    var files: [String: FileVersion] = [:]
    /// Relative path → why it gets no thumbnail (a symbolic link, a FIFO, an empty file).
    var skipped: [String: String] = [:]
    /// What could not be read (a directory it may not list, an entry it may not look at):
    /// thumbnails of sources at or below these are kept as they are, not taken for gone.
    var unreadable: Set<String> = []

    /// Whether `path` is, or lies below, something that could not be read.
    func hides(_ path: String) -> Bool {
        unreadable.contains { path == $0 || path.hasPrefix($0 + "/") }
    }

    /// Of the sources `recorded`, those gone from this tree: neither here nor hidden.
    func gone(_ recorded: some Sequence<String>) -> [String] {
        recorded.filter { files[$0] == nil && !hides($0) }
    }

    static func scan(_ layout: MirrorLayout, below start: String = "") throws -> MirrorTree {
        var tree = MirrorTree()
        func walk(_ relative: String) throws {
            let directory = relative.isEmpty ? layout.source : layout.source + "/" + relative
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: directory)
            } catch {
                // The top is an error; a directory below that cannot be read is reported.
                guard relative.isEmpty || relative == start else {
                    tree.skipped[relative] = "directory cannot be read: \(String(cString: strerror(errno)))"
                    tree.unreadable.insert(relative)
                    return
                }
                throw MirrorError("cannot read \(directory): \(error.localizedDescription)")
            }
            for name in names where !name.hasPrefix(".") {
                let child = relative.isEmpty ? name : relative + "/" + name
                var info = stat()
                guard lstat(directory + "/" + name, &info) == 0 else {
                    // Gone meanwhile, or there but not to be looked at (a directory that may be
                    // listed but not searched): the latter keeps its thumbnails.
                    if errno != ENOENT {
                        tree.skipped[child] = "cannot be read: \(String(cString: strerror(errno)))"
                        tree.unreadable.insert(child)
                    }
                    continue
                }
                if (info.st_mode & S_IFMT) == S_IFDIR {
                    if FileIdentity(info) != layout.outIdentity { try walk(child) }
                } else {
                    tree.add(child, info)
                }
            }
        }
        try walk(start)
        return tree
    }

    /// Files by what `lstat` says of them.
    mutating func add(_ path: String, _ info: stat) {
        if let reason = Self.notARegularFile(info) {
            skipped[path] = reason
        } else if info.st_size == 0 {
            skipped[path] = "empty file"
        } else {
            files[path] = FileVersion(info)
        }
    }

    /// Why a file of this kind gets no thumbnail; nil for a regular file.
    static func notARegularFile(_ info: stat) -> String? {
        switch info.st_mode & S_IFMT {
        case S_IFREG: nil
        case S_IFLNK: "symbolic link: not followed"
        case S_IFIFO: "a FIFO, not a regular file"
        case S_IFSOCK: "a socket, not a regular file"
        case S_IFCHR, S_IFBLK: "a device, not a regular file"
        case S_IFDIR: "a directory"
        default: "not a regular file"
        }
    }
}
