#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ImageModel

/// Reading an input file with the errors an image service owes its users: a missing path,
/// a directory, an unreadable file, an empty one, or one over the byte limit (checked from
/// the file's size before reading it).
public enum InputFile {
    public static func read(path: String, maxBytes: Int) throws(ImagingError) -> [UInt8] {
        let (fd, size, _) = try open(path, maxBytes: maxBytes)
        defer { close(fd) }
        // Read straight into the array's storage: zero-filling it first would touch every
        // page of a large image once more.
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, filled in
            prefault(buffer)
            while filled < size {
                let got = systemRead(fd, buffer.baseAddress! + filled, size - filled)
                if got < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                if got == 0 { return }  // shrank while reading
                filled += got
            }
        }
        if failure != 0 { throw ImagingError(.unreadable, "\(path): \(String(cString: strerror(failure)))") }
        if bytes.isEmpty { throw ImagingError(.empty, "\(path): the file is empty (0 bytes)") }
        return bytes
    }

    /// Maps in a large buffer's pages in one call (Linux's MADV_POPULATE_WRITE) before
    /// `read` fills them, which would otherwise take a page fault for every 4 KiB: about a
    /// tenth of the CPU of reading a photo that is in the page cache. A kernel without it
    /// (before 5.14) refuses, and the pages fault in as before.
    static func prefault(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        #if os(Linux)
        guard buffer.count >= prefaultFrom, let base = buffer.baseAddress else { return }
        let page = Int(getpagesize())
        let start = (Int(bitPattern: base) + page - 1) & ~(page - 1)
        let end = (Int(bitPattern: base) + buffer.count) & ~(page - 1)
        guard end > start else { return }
        _ = madvise(UnsafeMutableRawPointer(bitPattern: start), end - start, populateWrite)
        #endif
    }

    /// Below this, a buffer's few faults cost less than the call.
    static let prefaultFrom = 1 << 20
    /// MADV_POPULATE_WRITE, not in every C library's headers.
    private static let populateWrite: Int32 = 23
}

extension InputFile {
    /// Opens `path` for reading and checks it: there, not a directory, within `maxBytes`
    /// (from its size, before any read). Returns the descriptor (the caller closes it), the
    /// size, and whether it is a regular file.
    static func open(_ path: String, maxBytes: Int) throws(ImagingError) -> (fd: Int32, size: Int, regular: Bool) {
        let fd = systemOpen(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            throw ImagingError(code == ENOENT ? .notFound : .unreadable, "\(path): \(String(cString: strerror(code)))")
        }
        var info = stat()
        var problem: ImagingError?
        if fstat(fd, &info) != 0 {
            problem = ImagingError(.unreadable, "\(path): \(String(cString: strerror(errno)))")
        } else if (info.st_mode & S_IFMT) == S_IFDIR {
            problem = ImagingError(.unreadable, "\(path): is a directory")
        } else if Int(info.st_size) > maxBytes {
            problem = ImagingError(.tooLarge, "\(path): \(info.st_size) bytes exceeds the input limit of \(maxBytes) bytes")
        }
        if let problem {
            close(fd)
            throw problem
        }
        return (fd, Int(info.st_size), (info.st_mode & S_IFMT) == S_IFREG)
    }
}

@inline(__always)
private func systemOpen(_ path: String, _ flags: Int32) -> Int32 {
    open(path, flags)
}

@inline(__always)
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(fd, buffer, count)
}

/// An input file mapped read-only into memory, for the command line: no copy, and a decoder
/// that reads it once from start to end (PNG) lets go of the pages it has read (the file
/// stays as it is: a page read again comes back from the file), so a large input never needs
/// to be resident whole.
public final class MappedFile: @unchecked Sendable {
    // @unchecked: the mapping is read-only and unmapped only when the last reference goes.
    public let bytes: UnsafeRawBufferPointer

    /// Maps `path`, with the same checks and errors as `InputFile.read`.
    public init(path: String, maxBytes: Int) throws(ImagingError) {
        let (fd, size, regular) = try InputFile.open(path, maxBytes: maxBytes)
        defer { close(fd) }
        if size == 0 { throw ImagingError(.empty, "\(path): the file is empty (0 bytes)") }
        guard regular, let base = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), base != MAP_FAILED else {
            throw ImagingError(.unreadable, "\(path): cannot be mapped (\(String(cString: strerror(errno))))")
        }
        bytes = UnsafeRawBufferPointer(start: base, count: size)
    }

    deinit { munmap(UnsafeMutableRawPointer(mutating: bytes.baseAddress!), bytes.count) }
}
