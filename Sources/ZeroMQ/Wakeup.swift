#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Wakes a thread blocked in `Poller.poll` from any other thread.
///
/// A non-blocking pipe: `signal()` writes a byte, the owning thread polls `fileDescriptor`
/// for reading alongside its sockets and calls `drain()` when it is readable. Signals
/// coalesce: many `signal()` calls before a `drain()` cause one wakeup. A pipe rather than an
/// inproc socket because any thread may signal at any time, and sockets are single-threaded.
public final class Wakeup: Sendable {
    private let readEnd: Int32
    private let writeEnd: Int32

    public init() throws(ZMQError) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw ZMQError(code: errno, operation: "pipe") }
        readEnd = ends[0]
        writeEnd = ends[1]
        for end in ends {
            let flags = fcntl(end, F_GETFL)
            guard flags >= 0, fcntl(end, F_SETFL, flags | O_NONBLOCK) == 0, fcntl(end, F_SETFD, FD_CLOEXEC) == 0
            else { throw ZMQError(code: errno, operation: "fcntl(pipe)") }
        }
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// The descriptor to register with `Poller.register(fileDescriptor:)`.
    public var fileDescriptor: Int32 { readEnd }

    /// Wakes the polling thread. Safe from any thread, never blocks.
    public func signal() {
        var byte: UInt8 = 1
        // EAGAIN means the pipe is full of earlier signals, which will wake the poller anyway.
        while write(writeEnd, &byte, 1) < 0 && errno == EINTR {}
    }

    /// Consumes pending signals. Called by the polling thread before it looks at whatever
    /// the signal announced, so that a signal sent meanwhile is not lost.
    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let count = read(readEnd, &buffer, buffer.count)
            if count == buffer.count || (count < 0 && errno == EINTR) { continue }
            return
        }
    }
}
