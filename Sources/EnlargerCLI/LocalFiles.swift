import CFiles
import CLISupport
import Foundation
import ImageModel
import Imaging

/// The output directory of `submit` and `resize`, checked before any work is sent.
enum OutputDirectory {
    /// Creates `path` (and its parents) if missing; fails in one line when it is not a
    /// directory or cannot be written.
    static func prepare(_ path: String) throws {
        var info = stat()
        if stat(path, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFDIR else { throw CLIError("--out \(path) is not a directory") }
        } else {
            var built = path.hasPrefix("/") ? "/" : ""
            for component in path.split(separator: "/") {
                built += component + "/"
                if mkdir(built, 0o777) != 0 && errno != EEXIST {
                    throw CLIError("cannot create output directory \(path): \(String(cString: strerror(errno)))")
                }
            }
            guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
                throw CLIError("--out \(path) is not a directory")
            }
        }
        if access(path, W_OK | X_OK) != 0 {
            throw CLIError("cannot write to output directory \(path): \(String(cString: strerror(errno)))")
        }
    }
}

/// Output files, written whole or not at all, and never over a file that was there before
/// unless asked (`replacing`, the commands' `--overwrite`): `--out` may be a directory of the
/// user's own, and a name an output takes there may be theirs.
enum OutputFile {
    /// Why a file already at `path` was left alone.
    static func taken(_ path: String) -> ImagingError {
        ImagingError(.writeFailed, "\(path) already exists: not replaced (--overwrite replaces it)")
    }

    /// Refuses to replace `input` with its own output (`--out` its own directory, and a name
    /// that comes out the same): a resize must never destroy the image it was given.
    static func refuseOverwriting(input: String, with path: String) throws(ImagingError) {
        var source = stat(), target = stat()
        guard input != InputSource.standardInput, stat(input, &source) == 0, stat(path, &target) == 0,
              source.st_dev == target.st_dev, source.st_ino == target.st_ino else { return }
        throw ImagingError(.writeFailed, "\(path) is the input itself: choose another --out")
    }

    /// Writes `bytes` to a temporary file beside `path` and renames it into place, over a file
    /// already there only when `replacing`.
    static func write(_ bytes: [UInt8], to path: String, replacing: Bool) throws(ImagingError) {
        try write(bytes, to: path, renaming: true, replacing: replacing)
    }

    /// Renames `temporary` to `path`, over a file already there only when `replacing`; 0 or an errno.
    private static func place(_ temporary: String, at path: String, replacing: Bool) -> Int32 {
        if replacing { return rename(temporary, path) == 0 ? 0 : errno }
        return -enlarger_rename_noreplace(temporary, path)
    }

    /// With `renaming`, through a temporary file; without, straight to `path` (which must not exist).
    private static func write(_ bytes: [UInt8], to path: String, renaming: Bool,
                              replacing: Bool = false) throws(ImagingError) {
        let temporary = renaming ? path + ".partial-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" : path
        func failure(_ code: Int32) -> ImagingError {
            ImagingError(.writeFailed, "cannot write \(path): \(String(cString: strerror(code)))")
        }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw failure(errno) }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                close(fd)
                unlink(temporary)
                throw failure(code)
            }
            written += n
        }
        if close(fd) != 0 {
            let code = errno
            unlink(temporary)
            throw failure(code)
        }
        if renaming {
            let code = place(temporary, at: path, replacing: replacing)
            if code != 0 {
                unlink(temporary)
                throw code == EEXIST ? taken(path) : failure(code)
            }
        }
    }
}

extension OutputFile {
    /// Writes every file or none: each to a temporary file beside its path first, then, once
    /// all are written and no path is taken (by a directory; by any file unless `replacing`),
    /// renames them into place. A file replaced is first linked to a name beside it, so that a
    /// rename that still fails puts back every file as it was (the older ones restored, the new
    /// ones removed, each only if the file at its path is still the one placed); the links are
    /// removed once all are placed. (Where a file system refuses the link, that file is
    /// replaced without one, and a later failure cannot bring it back.)
    static func writeAll(_ files: [(bytes: [UInt8], path: String)], replacing: Bool) throws(ImagingError) {
        var seen = Set<String>()
        for file in files where !seen.insert(file.path).inserted {
            throw ImagingError(.invalidArgument, "two outputs would both be \(file.path)")
        }
        var temporaries: [String] = []
        func removeTemporaries() { for temporary in temporaries { unlink(temporary) } }
        for file in files {
            var info = stat()
            if lstat(file.path, &info) == 0 && (!replacing || (info.st_mode & S_IFMT) == S_IFDIR) {
                removeTemporaries()
                throw (info.st_mode & S_IFMT) == S_IFDIR
                    ? ImagingError(.writeFailed, "cannot write \(file.path): a directory has that name") : taken(file.path)
            }
            let temporary = file.path + ".partial-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            do {
                try write(file.bytes, to: temporary, renaming: false)
            } catch {
                removeTemporaries()
                throw ImagingError(error.code, error.message.replacingOccurrences(of: temporary, with: file.path))
            }
            temporaries.append(temporary)
        }
        // The file each path held before, kept under another name until all are placed; and
        // each new file's identity, so that only it is taken away again.
        var previous = [String?](repeating: nil, count: files.count)
        var placed: [(device: UInt64, inode: UInt64)] = []
        func undo() {
            for index in placed.indices.reversed() {
                var info = stat()
                let path = files[index].path
                guard lstat(path, &info) == 0, UInt64(info.st_dev) == placed[index].device,
                      UInt64(info.st_ino) == placed[index].inode else { continue }
                if let kept = previous[index] { rename(kept, path) } else { unlink(path) }
            }
            for index in placed.count..<files.count {
                unlink(temporaries[index])
                if let kept = previous[index] { unlink(kept) }
            }
        }
        for (index, file) in files.enumerated() {
            if replacing {
                let kept = file.path + ".previous-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
                if link(file.path, kept) == 0 { previous[index] = kept }
            }
            var info = stat()
            var code: Int32 = lstat(temporaries[index], &info) == 0 ? 0 : errno
            if code == 0 { code = place(temporaries[index], at: file.path, replacing: replacing) }
            guard code != 0 else {
                placed.append((UInt64(info.st_dev), UInt64(info.st_ino)))
                continue
            }
            undo()
            throw code == EEXIST ? taken(file.path)
                : ImagingError(.writeFailed, "cannot write \(file.path): \(String(cString: strerror(code)))")
        }
        for kept in previous { if let kept { unlink(kept) } }
    }
}

/// Input files: a path, or `-` for standard input.
enum InputSource {
    static let standardInput = "-"

    /// Whether `input` is a regular file, which `MappedFile` can map (standard input, a pipe
    /// or a device is read instead).
    static func mappable(_ input: String) -> Bool {
        guard input != standardInput else { return false }
        var info = stat()
        return stat(input, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }

    static func read(_ input: String, maxBytes: Int) throws(ImagingError) -> [UInt8] {
        guard input == standardInput else { return try InputFile.read(path: input, maxBytes: maxBytes) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Foundation.read(STDIN_FILENO, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ImagingError(.unreadable, "standard input: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[..<n])
            if bytes.count > maxBytes {
                throw ImagingError(.tooLarge, "standard input: more than the input limit of \(maxBytes) bytes")
            }
        }
        if bytes.isEmpty { throw ImagingError(.empty, "standard input: empty (0 bytes)") }
        return bytes
    }

    /// The name its outputs are written under: the file name without its extension.
    static func outputName(_ input: String) -> String {
        input == standardInput ? "stdin" : ((input as NSString).lastPathComponent as NSString).deletingPathExtension
    }

    /// Prints why `input` failed: a JSON object on standard output with `--json`, else a line
    /// on standard error.
    static func report(_ error: any Error, for input: String, json: Bool) {
        let failure = error as? ImagingError ?? ImagingError(.unreadable, "\(error)")
        if json {
            var object = JSONLine()
            object.add("input", input)
            var detail = JSONLine()
            detail.add("code", failure.code.name)
            detail.add("message", failure.message)
            object.add("error", object: detail)
            print(object.text)
        } else {
            FileHandle.standardError.write(Data("\(input): error \(failure.code.name): \(failure.message)\n".utf8))
        }
    }

    /// Why `bytes` are not an image Enlarger reads, naming what they look like; `nil` for
    /// anything that starts like a JPEG, PNG, WebP, HEIC, AVIF, GIF or JPEG XL (the
    /// decoder judges the rest).
    static func notAnImage(_ bytes: [UInt8], input: String) -> ImagingError? {
        do throws(ImagingError) {
            _ = try InputFormat.of(bytes)
            return nil
        } catch {
            let name = input == standardInput ? "standard input" : input
            return ImagingError(error.code, "\(name): \(error.message)")
        }
    }
}
