/// A frame whose bytes the framing code can read: `[UInt8]` in tests and tools, a ZeroMQ
/// message in the I/O loops (which conform it where they import both modules).
///
/// Decoding reads only the tag and header frames; payload frames are passed through
/// untouched, so a large image is never copied by the protocol layer.
public protocol FrameBytes {
    var count: Int { get }
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: FrameBytes where Element == UInt8 {}
