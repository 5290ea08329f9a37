import CZeroMQ

/// A libzmq context: the I/O threads behind every socket created from it.
///
/// A context is thread-safe (libzmq guarantees it), so one is shared by every thread of a
/// process. Each `Socket` keeps its context alive; the context is terminated when the last
/// reference goes, which cannot block because every socket is created with `ZMQ_LINGER` 0.
public final class Context: @unchecked Sendable {
    // @unchecked: the handle is immutable and libzmq contexts may be used from any thread.
    let handle: UnsafeMutableRawPointer

    /// - Parameter ioThreads: libzmq background I/O threads; one moves about a gigabyte a
    ///   second, so one is right unless measurements say otherwise.
    public init(ioThreads: Int32 = 1) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else {
            throw ZMQError(code: zmq_errno(), operation: "zmq_ctx_new")
        }
        self.handle = handle
        _ = try zmqCall("zmq_ctx_set(ZMQ_IO_THREADS)") { zmq_ctx_set(handle, ZMQ_IO_THREADS, ioThreads) }
    }

    deinit {
        // Only reached once no Socket refers to the context, so every socket is closed.
        _ = try? zmqCall("zmq_ctx_term") { zmq_ctx_term(handle) }
    }
}
