import Foundation

/// Why a mirror cannot run: its directories, or its record, are not usable. The message
/// names the path and the reason.
public struct MirrorError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Where a mirror reads and writes, resolved once: SRC and OUT by their real paths, and the
/// rules that keep `sync` from ever writing over the images it mirrors.
///
/// - OUT may not be SRC, and may not contain SRC, however either is named (symbolic links,
///   `.`, `./`, bind mounts: directories are compared by device and inode).
/// - OUT may lie inside SRC only as a directory of its own: missing, empty, or holding this
///   mirror's record. The scan of SRC then leaves it out by device and inode, so no path to
///   it (a symbolic link included) makes thumbnails of thumbnails.
public struct MirrorLayout: Sendable {
    /// SRC's real path.
    public let source: String
    /// OUT's real path (created if it was missing).
    public let out: String
    /// OUT lies inside SRC.
    public let outInsideSource: Bool
    let outIdentity: FileIdentity
    /// SRC's device and inode: what OUT's record says it mirrors.
    var sourceIdentity: FileIdentity? = nil

    /// Resolves `source` and `out` (relative to the working directory), checks the rules
    /// above, and creates OUT (and its parents) if it is missing.
    public static func resolve(source: String, out: String) throws(MirrorError) -> MirrorLayout {
        guard let realSource = realPath(source) else {
            throw MirrorError("\(source): \(String(cString: strerror(errno)))")
        }
        guard let sourceIdentity = FileIdentity.of(realSource), isDirectory(realSource) else {
            throw MirrorError("\(source) is not a directory")
        }
        // OUT may not exist yet: resolve the part that does, then the names to create.
        let absolute = out.hasPrefix("/") ? out : FileManager.default.currentDirectoryPath + "/" + out
        var existing = absolute.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        var missing: [String] = []
        while !existing.isEmpty && realPath("/" + existing.joined(separator: "/")) == nil {
            missing.insert(existing.removeLast(), at: 0)
        }
        if missing.contains(where: { $0 == "." || $0 == ".." }) {
            throw MirrorError("--out \(out): '.' or '..' after a directory that does not exist")
        }
        guard let realExisting = realPath("/" + existing.joined(separator: "/")) else {
            throw MirrorError("--out \(out): \(String(cString: strerror(errno)))")
        }
        guard isDirectory(realExisting) else { throw MirrorError("--out \(out): \(realExisting) is not a directory") }
        let outChain = identityChain(realExisting)
        let sourceChain = identityChain(realSource)
        if missing.isEmpty {
            if outChain.first == sourceIdentity {
                throw MirrorError("--out \(out) is the source directory \(source) itself: its images would be "
                                  + "overwritten by their thumbnails. Name another directory.")
            }
            if let outIdentity = outChain.first, sourceChain.dropFirst().contains(outIdentity) {
                throw MirrorError("--out \(out) contains the source directory \(source): name a directory outside it.")
            }
        }
        let inside = outChain.contains(sourceIdentity)
        if inside && missing.isEmpty && !isDedicated(realExisting) {
            throw MirrorError("--out \(out) lies inside the source directory \(source) and holds files that sync did not "
                              + "write: name an empty directory, one that sync made, or one outside the source.")
        }
        var built = realExisting
        for name in missing {
            built = built == "/" ? "/" + name : built + "/" + name
            if mkdir(built, 0o777) != 0 && errno != EEXIST {
                throw MirrorError("cannot create \(built): \(String(cString: strerror(errno)))")
            }
        }
        guard let realOut = realPath(built), let outIdentity = FileIdentity.of(realOut), isDirectory(realOut) else {
            throw MirrorError("--out \(out) is not a directory")
        }
        if access(realOut, W_OK | X_OK) != 0 {
            throw MirrorError("cannot write to \(out): \(String(cString: strerror(errno)))")
        }
        return MirrorLayout(source: realSource, out: realOut, outInsideSource: inside, outIdentity: outIdentity,
                            sourceIdentity: sourceIdentity)
    }

    /// SRC as OUT's record names it.
    var mirrored: MirrorRecord.Source? {
        sourceIdentity.map { MirrorRecord.Source(path: source, identity: $0) }
    }

    /// Whether `relative` (a path below SRC, as a watch names it) is OUT or lies in it: never
    /// a source, whatever changed there (a `chmod -R` of SRC touches OUT too).
    func holdsInOut(_ relative: String) -> Bool {
        guard outInsideSource else { return false }
        var path = source
        for component in relative.split(separator: "/") {
            path += "/" + component
            if isOut(path) { return true }
        }
        return false
    }

    /// Whether `path` names OUT (by device and inode).
    public func isOut(_ path: String) -> Bool {
        FileIdentity.of(path) == outIdentity
    }

    /// `path` with every symbolic link, `.` and `..` resolved; nil (errno set) if it does not exist.
    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// The identities of `realPath` and of every directory above it, nearest first.
    static func identityChain(_ realPath: String) -> [FileIdentity] {
        var chain: [FileIdentity] = []
        var path = realPath
        while true {
            if let identity = FileIdentity.of(path) { chain.append(identity) }
            if path == "/" || path.isEmpty { break }
            path = (path as NSString).deletingLastPathComponent
            if path.isEmpty { path = "/" }
        }
        return chain
    }

    /// Empty, or holding this mirror's record (or only what sync writes: its record and dot files).
    static func isDedicated(_ path: String) -> Bool {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return false }
        return names.isEmpty || names.contains(MirrorRecord.fileName) || names.contains(MirrorRecord.legacyFileName)
    }
}
