import CZeroMQ

/// A failed libzmq call (or a system call made by this module), with the `errno` it left.
///
/// `code` is `zmq_errno()` at the point of failure and `message` its `zmq_strerror` text;
/// `operation` names the call and its argument, e.g. `zmq_bind(ipc:///run/enlarger/w.sock)`.
public struct ZMQError: Error, Equatable, Sendable, CustomStringConvertible {
    public let code: Int32
    public let operation: String
    public let message: String

    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
        self.message = String(cString: zmq_strerror(code))
    }

    /// The peer named by a ROUTER's routing-id frame is not connected (`ZMQ_ROUTER_MANDATORY`).
    public var isHostUnreachable: Bool { code == EHOSTUNREACH }

    /// The context was terminated while the call was in progress.
    public var isContextTerminated: Bool { code == ETERM }

    public var description: String { "\(operation): \(message) (errno \(code))" }
}

// The one choke point for libzmq return codes. `EINTR` is retried (a signal is not a
// failure), `EAGAIN` is a value for the calls that can legitimately "would block", and
// every other failure throws with the errno kept. `ENOTSOCK` and `EFAULT` mean this module
// passed a dead handle, which is a bug, so they trap rather than throw.

/// Calls `body` until it does not fail with `EINTR`; throws on any other failure.
@inline(__always)
func zmqCall(_ operation: @autoclosure () -> String, _ body: () -> Int32) throws(ZMQError) -> Int32 {
    while true {
        let rc = body()
        if rc >= 0 { return rc }
        let code = zmq_errno()
        if code == EINTR { continue }
        throw failure(code, operation())
    }
}

/// Like `zmqCall`, but `EAGAIN` ("would block") returns `nil` instead of throwing.
@inline(__always)
func zmqNonBlockingCall(
    _ operation: @autoclosure () -> String, _ body: () -> Int32
) throws(ZMQError) -> Int32? {
    while true {
        let rc = body()
        if rc >= 0 { return rc }
        let code = zmq_errno()
        if code == EINTR { continue }
        if code == EAGAIN { return nil }
        throw failure(code, operation())
    }
}

private func failure(_ code: Int32, _ operation: String) -> ZMQError {
    precondition(code != ENOTSOCK && code != EFAULT, "\(operation) on an invalid handle (errno \(code))")
    return ZMQError(code: code, operation: operation)
}
