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
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            throw ImagingError(code == ENOENT ? .notFound : .unreadable, "\(path): \(String(cString: strerror(code)))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw ImagingError(.unreadable, "\(path): \(String(cString: strerror(errno)))")
        }
        if (info.st_mode & S_IFMT) == S_IFDIR {
            throw ImagingError(.unreadable, "\(path): is a directory")
        }
        let size = Int(info.st_size)
        if size > maxBytes {
            throw ImagingError(.tooLarge, "\(path): \(size) bytes exceeds the input limit of \(maxBytes) bytes")
        }
        var bytes = [UInt8](repeating: 0, count: size)
        var filled = 0
        while filled < size {
            let got = bytes.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress! + filled, size - filled) }
            if got < 0 {
                if errno == EINTR { continue }
                throw ImagingError(.unreadable, "\(path): \(String(cString: strerror(errno)))")
            }
            if got == 0 { break }  // shrank while reading
            filled += got
        }
        if filled < size { bytes.removeLast(size - filled) }
        if bytes.isEmpty { throw ImagingError(.empty, "\(path): the file is empty (0 bytes)") }
        return bytes
    }
}

@inline(__always)
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(fd, buffer, count)
}
