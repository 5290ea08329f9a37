import CFiles
import Fetching
import Foundation
import Imaging
#if canImport(Glibc)
import Glibc
#endif

/// Where a job's image comes from, as its thread reads it.
enum JobSource: Sendable, Equatable {
    /// In the Job's payload frame; the SHA-256 it must have, if its Submit named one.
    case inline(digest: Data?)
    /// A path under the worker's files root, resolved beneath its `scope` directory there
    /// (the submitting principal's; empty: the whole root).
    case file(path: String, scope: String = "")
    /// An http(s) URL to download, for `principal` (its name lookups are bounded per principal).
    case url(String, principal: String = "")
}

/// Why a file or URL source could not be read: SOURCE_REFUSED or SOURCE_UNAVAILABLE.
struct SourceFailure: Error, Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        case refused
        case unavailable
        /// The job was cancelled while its source was read (nothing is sent for it).
        case cancelled
    }

    let kind: Kind
    let message: String

    static func refused(_ message: String) -> SourceFailure { SourceFailure(kind: .refused, message: message) }
    static func unavailable(_ message: String) -> SourceFailure { SourceFailure(kind: .unavailable, message: message) }
    static func cancelled(_ message: String) -> SourceFailure { SourceFailure(kind: .cancelled, message: message) }
}

/// A worker setting that cannot be used, found when the worker starts.
public struct WorkerSetupError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// The directory file sources are read from (`--files-root`), held open for the worker's
/// lifetime: renaming or replacing the path later does not move the root.
///
/// Every path is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` relative to
/// the directory, so the kernel itself refuses `..` above it, absolute paths, symbolic links
/// that lead out of it and `/proc` magic links, with no window between a check and the open.
/// Only regular files are read: a FIFO or device is located with `O_PATH` and refused
/// without ever being opened.
final class FilesRoot: Sendable {
    let path: String
    private let descriptor: Int32

    init(path: String) throws(WorkerSetupError) {
        let fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            throw WorkerSetupError(description: "files root \(path): \(String(cString: strerror(errno)))")
        }
        self.path = path
        descriptor = fd
    }

    deinit { close(descriptor) }

    /// Opens `relativePath` beneath the root's directory `scope` (empty: the root itself), or
    /// says why not. Nothing above `scope` is reached, however the path or a link in it leads.
    func open(_ relativePath: String, scope: String = "") throws(SourceFailure) -> OpenedFile {
        guard !relativePath.isEmpty else { throw .refused("the file path is empty") }
        guard !relativePath.utf8.contains(0), !scope.utf8.contains(0) else {
            throw .refused("the file path contains a NUL byte")
        }
        var beneath = descriptor
        if !scope.isEmpty {
            beneath = enlarger_open_directory_beneath(descriptor, scope)
            guard beneath >= 0 else {
                throw .refused("this principal's directory under the files root (\(scope)) cannot be opened: "
                               + String(cString: strerror(-beneath)))
            }
        }
        defer { if beneath != descriptor { close(beneath) } }
        let fd = enlarger_open_beneath(beneath, relativePath)
        if fd == ENLARGER_NOT_REGULAR { throw .refused("\(relativePath) is not a regular file") }
        guard fd >= 0 else {
            let error = -fd
            let reason = String(cString: strerror(error))
            switch error {
            case EXDEV:
                throw .refused(scope.isEmpty ? "\(relativePath) leads outside the files root"
                                             : "\(relativePath) leads outside this principal's directory")
            case ELOOP:
                throw .refused("\(relativePath) goes through a symbolic link loop or a /proc magic link")
            case ENOSYS:
                throw .refused("file sources need openat2 (Linux 5.6 or later)")
            case EACCES, EPERM:
                throw .refused("\(relativePath): \(reason)")
            case ENOENT, ENOTDIR:
                throw .unavailable("no such file under the files root: \(relativePath)")
            default:
                throw .unavailable("\(relativePath): \(reason)")
            }
        }
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw .unavailable("\(relativePath): \(reason)")
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw .refused("\(relativePath) is not a regular file")
        }
        return OpenedFile(path: relativePath, descriptor: fd, status: FileVersion(status))
    }
}

/// What tells two readings of a file apart: when any of these differ, the bytes may.
struct FileVersion: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modifiedNanoseconds: Int64
    var changedNanoseconds: Int64

    init(_ status: stat) {
        device = UInt64(status.st_dev)
        inode = UInt64(status.st_ino)
        size = Int64(status.st_size)
        modifiedNanoseconds = Int64(status.st_mtim.tv_sec) * 1_000_000_000 + Int64(status.st_mtim.tv_nsec)
        changedNanoseconds = Int64(status.st_ctim.tv_sec) * 1_000_000_000 + Int64(status.st_ctim.tv_nsec)
    }
}

/// An open file source. Closed on deinit.
final class OpenedFile {
    let path: String
    private let descriptor: Int32
    let version: FileVersion

    init(path: String, descriptor: Int32, status: FileVersion) {
        self.path = path
        self.descriptor = descriptor
        version = status
    }

    deinit { close(descriptor) }

    var size: Int { Int(version.size) }

    /// The version's name for the broker (JobSourceOpened.identity): the path, then device,
    /// inode, size, modification and change times, little-endian.
    var identity: Data {
        var bytes = Data("file\u{0}\(path)\u{0}".utf8)
        for value in [version.device, version.inode, UInt64(bitPattern: version.size),
                      UInt64(bitPattern: version.modifiedNanoseconds), UInt64(bitPattern: version.changedNanoseconds)] {
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
        return bytes
    }

    /// The first `count` bytes (fewer if the file is shorter now), read in slices with the
    /// cancellation flag checked between them.
    func read(upTo count: Int, cancel: CancellationFlag) throws(SourceFailure) -> [UInt8] {
        let slice = 1 << 20
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            if cancel.isCancelled { throw .cancelled("cancelled while reading \(path)") }
            let want = min(slice, count - filled)
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + filled, want, off_t(filled))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw .unavailable("reading \(path): \(String(cString: strerror(errno)))")
            }
            if got == 0 { break }
            filled += got
        }
        if filled < count { bytes.removeSubrange(filled...) }
        return bytes
    }

    /// Whether the file was last written at least a second before it was opened. The kernel
    /// stamps times from a coarse clock, so a file rewritten (at the same size) within the
    /// same tick as its previous write would keep its name; results of a file that fresh are
    /// delivered but not cached.
    var isSettled: Bool {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let nanoseconds = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        return nanoseconds - max(version.modifiedNanoseconds, version.changedNanoseconds) >= Self.settlingNanoseconds
    }

    static let settlingNanoseconds: Int64 = 1_000_000_000

    /// Whether the file still is the version that was opened (its size, times and inode).
    var isUnchanged: Bool {
        var status = stat()
        return fstat(descriptor, &status) == 0 && FileVersion(status) == version
    }
}

/// What job threads read file and URL sources with; shared by all of them.
struct SourceAccess: Sendable {
    /// Nil: file sources are refused.
    var files: FilesRoot?
    /// The largest source read whole (`DecodeLimits.maxInputBytes`).
    var maxInputBytes: Int
    /// Nil: URL sources are refused.
    var urls: URLFetcher?
}
