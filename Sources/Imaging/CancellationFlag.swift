import CJPEG
import ImageModel

/// A one-way flag that long-running image work polls at checkpoints (every few scanlines
/// or rows). Setting it from any thread makes the work stop with `ImagingError.cancelled`.
///
/// The flag lives in C memory so that libjpeg's progress hook can read it between iMCU rows
/// without calling back into Swift.
public final class CancellationFlag: @unchecked Sendable {
    let storage: UnsafeMutablePointer<Int32>

    public init() {
        storage = .allocate(capacity: 1)
        storage.initialize(to: 0)
    }

    deinit { storage.deallocate() }

    /// Requests cancellation. Idempotent, callable from any thread.
    public func cancel() { ej_atomic_store(storage, 1) }

    public var isCancelled: Bool { ej_atomic_load(storage) != 0 }

    /// Throws `ImagingError.cancelled` if cancellation was requested.
    @inline(__always)
    public func check() throws(ImagingError) {
        if isCancelled { throw ImagingError(.cancelled, "cancelled") }
    }
}
