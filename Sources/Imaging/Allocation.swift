#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ImageModel

/// Bytes from `malloc`, owned by this object and freed with it.
///
/// The pipeline's large buffers (decoded pixels, resampler output and intermediates, encoded
/// output) live in these rather than in Swift arrays because Swift ends the process when an
/// array cannot be allocated; here a failed allocation is an `ImagingError` for the one
/// request that needed it.
///
/// Written only by the code that allocated it, before it hands the buffer on; read-only, and
/// so safe to share between threads, from then on.
final class Allocation: @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let count: Int

    /// Takes ownership of `base`, which must come from `malloc` (or `realloc`).
    init(adopting base: UnsafeMutableRawPointer, count: Int) {
        self.base = base
        self.count = count
    }

    deinit { free(base) }

    // Valid only while this object lives: read them through a reference that outlives the
    // use (`copyBytes` for a copy), never through a temporary.
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }
    var mutableBytes: UnsafeMutableRawBufferPointer { UnsafeMutableRawBufferPointer(start: base, count: count) }

    /// The bytes as an array (a copy).
    func copyBytes() -> [UInt8] { Array(bytes) }

    /// Calls `body` with the memory as `count / stride` elements of `T`; this object lives
    /// at least until `body` returns.
    func withMemory<T, R, E: Error>(as _: T.Type, _ body: (UnsafeMutableBufferPointer<T>) throws(E) -> R) throws(E) -> R {
        try body(mutableBytes.bindMemory(to: T.self))
    }
}

/// Allocates the pipeline's large buffers, failing with `ImagingError(.tooLarge, …)` when
/// memory is exhausted or a buffer would exceed `maxBytes`.
public struct BufferAllocator: Sendable, Equatable {
    /// The largest single buffer handed out; larger requests fail as if memory had run out.
    /// A hard per-buffer cap in production, and the way tests make allocations fail.
    public var maxBytes: Int

    public init(maxBytes: Int = .max) {
        self.maxBytes = maxBytes
    }

    /// `count` uninitialised bytes. `what` names the buffer in the error message.
    func allocate(_ count: Int, for what: @autoclosure () -> String) throws(ImagingError) -> Allocation {
        guard count >= 0 else { throw ImagingError(.tooLarge, "\(what()) needs an impossible size") }
        if count > maxBytes {
            throw ImagingError(.tooLarge, "\(what()) needs \(ByteCount(count)), "
                               + "above the limit of \(ByteCount(maxBytes)) per buffer")
        }
        // malloc(0) may return NULL; one byte keeps "NULL means failure" true.
        guard let base = malloc(max(count, 1)) else {
            throw ImagingError(.tooLarge, "out of memory: cannot allocate \(ByteCount(count)) for \(what())")
        }
        return Allocation(adopting: base, count: count)
    }

    /// `count` × `groups` elements of `T`, uninitialised; overflow of the byte size is an
    /// error too.
    func allocate<T>(_ count: Int, of _: T.Type, times groups: Int = 1,
                     for what: @autoclosure () -> String) throws(ImagingError) -> Allocation {
        let (elements, overflow) = count.multipliedReportingOverflow(by: groups)
        let (bytes, overflow2) = elements.multipliedReportingOverflow(by: MemoryLayout<T>.stride)
        if overflow || overflow2 { throw ImagingError(.tooLarge, "\(what()) needs an impossible size") }
        return try allocate(bytes, for: what())
    }
}

/// A byte count for messages: exact below 1 KiB, else in binary units with one decimal.
public struct ByteCount: Sendable, CustomStringConvertible {
    public var value: Int
    public init(_ value: Int) { self.value = value }

    public var description: String {
        if value == .max { return "unlimited" }
        let units = ["KiB", "MiB", "GiB", "TiB"]
        var scaled = Double(value), unit = -1
        while scaled >= 1024 && unit < units.count - 1 {
            scaled /= 1024
            unit += 1
        }
        if unit < 0 { return "\(value) bytes" }
        let tenths = (scaled * 10).rounded()
        return "\(Int(tenths) / 10).\(Int(tenths) % 10) \(units[unit])"
    }
}
