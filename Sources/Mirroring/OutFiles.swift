import Foundation

/// Files in OUT reached by a path relative to it without following a symbolic link on the
/// way: a directory of OUT replaced by a link (to where the user moved it, or anywhere) is
/// not OUT any more, and nothing is looked at or deleted through it.
enum OutFiles {
    /// `relative`'s parent directory, opened component by component with `O_NOFOLLOW`, and
    /// its last name; nil when a component is a link, missing, not a directory, or a dot name.
    private static func withParent<T>(of relative: String, in out: String, _ body: (Int32, String) -> T) -> T? {
        var names = relative.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard let last = names.popLast(), !last.isEmpty, last != ".", last != "..",
              let directory = openDirectory(names, in: out) else { return nil }
        defer { close(directory) }
        return body(directory, last)
    }

    /// The directory `relative` (empty: OUT itself) opened without following a link on the
    /// way; the caller closes it. Nil, with errno set, when it cannot be reached that way.
    static func openDirectory(_ relative: String, in out: String) -> Int32? {
        openDirectory(relative.isEmpty ? [] : relative.split(separator: "/", omittingEmptySubsequences: false).map(String.init),
                      in: out)
    }

    private static func openDirectory(_ names: [String], in out: String) -> Int32? {
        guard !names.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else {
            errno = EINVAL
            return nil
        }
        var directory = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return nil }
        for name in names {
            let next = openat(directory, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            let code = errno
            close(directory)
            guard next >= 0 else {
                errno = code
                return nil
            }
            directory = next
        }
        return directory
    }

    /// The file at `relative` (itself not followed if a link); nil when there is none to be
    /// reached that way.
    static func version(of relative: String, in out: String) -> FileVersion? {
        withParent(of: relative, in: out) { directory, name -> FileVersion? in
            var info = stat()
            guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
            return FileVersion(info)
        } ?? nil
    }

    /// Deletes the regular file at `relative` when `isOurs` says it is the file expected there;
    /// whether it was deleted.
    @discardableResult
    static func remove(_ relative: String, in out: String, if isOurs: (FileVersion) -> Bool) -> Bool {
        withParent(of: relative, in: out) { directory, name -> Bool in
            var info = stat()
            guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFREG,
                  isOurs(FileVersion(info)) else { return false }
            return unlinkat(directory, name, 0) == 0
        } ?? false
    }
}
