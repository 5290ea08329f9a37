import CZeroMQ

/// A libzmq socket.
///
/// **Threading rule: one thread owns each socket.** libzmq sockets are not thread-safe; all
/// calls on a socket, including `close()`, must come from the thread that owns it. A socket
/// may be created on one thread and then handed to the thread that will own it (starting a
/// thread is a full memory barrier, which is what libzmq asks for when a socket migrates).
/// Other threads talk to the owner through a `Mailbox` or `Wakeup`, never by calling the
/// socket themselves.
///
/// Every socket is created with `ZMQ_LINGER` 0: closing discards unsent messages at once
/// instead of blocking the process on a peer that may never read them.
public final class Socket {
    public enum Kind: Sendable {
        case pair, dealer, router, push, pull
        /// Strict request-reply server (one reply per request, in order); the ZAP handler's.
        case rep

        var rawValue: Int32 {
            switch self {
            case .pair: ZMQ_PAIR
            case .dealer: ZMQ_DEALER
            case .router: ZMQ_ROUTER
            case .push: ZMQ_PUSH
            case .pull: ZMQ_PULL
            case .rep: ZMQ_REP
            }
        }
    }

    public struct SendFlags: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// More frames of the same multipart message follow.
        public static let more = SendFlags(rawValue: ZMQ_SNDMORE)
        /// Return `false` instead of blocking when the message cannot be queued now.
        public static let dontWait = SendFlags(rawValue: ZMQ_DONTWAIT)
    }

    public let kind: Kind
    // Keeps the context alive for as long as the socket exists.
    private let context: Context
    private var handle: UnsafeMutableRawPointer?

    public init(_ context: Context, _ kind: Kind) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, kind.rawValue) else {
            throw ZMQError(code: zmq_errno(), operation: "zmq_socket(\(kind))")
        }
        self.kind = kind
        self.context = context
        self.handle = handle
        try setInt32(ZMQ_LINGER, 0, "ZMQ_LINGER")
    }

    deinit {
        close()
    }

    /// Closes the socket, discarding unsent messages. Idempotent.
    public func close() {
        guard let handle else { return }
        zmq_close(handle)
        self.handle = nil
    }

    var liveHandle: UnsafeMutableRawPointer {
        guard let handle else { preconditionFailure("use of a closed \(kind) socket") }
        return handle
    }

    public func bind(_ endpoint: String) throws(ZMQError) {
        let handle = liveHandle
        _ = try zmqCall("zmq_bind(\(endpoint))") { zmq_bind(handle, endpoint) }
    }

    public func connect(_ endpoint: String) throws(ZMQError) {
        let handle = liveHandle
        _ = try zmqCall("zmq_connect(\(endpoint))") { zmq_connect(handle, endpoint) }
    }

    // MARK: Sending

    /// Sends `message` without consuming it: a `zmq_msg_copy` is queued, which shares the
    /// buffer, so the same message can be sent again later.
    ///
    /// - Returns: `false` only with `.dontWait`, when the message could not be queued now.
    /// - Throws: `ZMQError`; `isHostUnreachable` for a ROUTER with `ZMQ_ROUTER_MANDATORY`
    ///   whose routing-id frame names a peer that is not connected.
    @discardableResult
    public func send(_ message: Message, _ flags: SendFlags = []) throws(ZMQError) -> Bool {
        let handle = liveHandle
        var outgoing = zmq_msg_t()
        zmq_msg_init(&outgoing)
        defer { zmq_msg_close(&outgoing) }
        _ = try zmqCall("zmq_msg_copy") { zmq_msg_copy(&outgoing, message.pointer) }
        return try zmqNonBlockingCall("zmq_msg_send(\(kind))") {
            zmq_msg_send(&outgoing, handle, flags.rawValue)
        } != nil
    }

    /// Sends a frame holding a copy of `bytes` (for small frames: tags, headers, ids).
    @discardableResult
    public func send(_ bytes: UnsafeRawBufferPointer, _ flags: SendFlags = []) throws(ZMQError) -> Bool {
        let handle = liveHandle
        return try zmqNonBlockingCall("zmq_send(\(kind))") {
            zmq_send(handle, bytes.baseAddress, bytes.count, flags.rawValue)
        } != nil
    }

    /// Sends a frame holding a copy of `bytes`.
    @discardableResult
    public func send(_ bytes: [UInt8], _ flags: SendFlags = []) throws(ZMQError) -> Bool {
        let handle = liveHandle
        return try zmqNonBlockingCall("zmq_send(\(kind))") {
            bytes.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags.rawValue) }
        } != nil
    }

    /// Sends `frames` as one multipart message. With `.dontWait`, `false` means nothing
    /// was sent (libzmq queues a multipart message atomically once its first frame is in).
    @discardableResult
    public func send(multipart frames: [Message], _ flags: SendFlags = []) throws(ZMQError) -> Bool {
        for (index, frame) in frames.enumerated() {
            let more: SendFlags = index < frames.count - 1 ? .more : []
            guard try send(frame, flags.union(more)) else { return false }
        }
        return true
    }

    // MARK: Receiving

    /// Receives one frame; check `hasMore` on it for the rest of a multipart message.
    ///
    /// - Parameter wait: when `false`, returns `nil` instead of blocking if nothing is queued.
    public func receive(wait: Bool = true) throws(ZMQError) -> Message? {
        let handle = liveHandle
        let message = Message()
        let flags = wait ? 0 : ZMQ_DONTWAIT
        guard try zmqNonBlockingCall("zmq_msg_recv(\(kind))", { zmq_msg_recv(message.pointer, handle, flags) }) != nil
        else { return nil }
        return message
    }

    /// Receives a whole multipart message into `frames` (which is emptied first).
    ///
    /// - Parameter wait: when `false`, returns `false` instead of blocking if nothing is
    ///   queued. The rest of a multipart message is always there once its first frame is.
    public func receive(multipart frames: inout [Message], wait: Bool = true) throws(ZMQError) -> Bool {
        frames.removeAll(keepingCapacity: true)
        guard var frame = try receive(wait: wait) else { return false }
        frames.append(frame)
        while frame.hasMore {
            // libzmq delivers multipart messages atomically, so this cannot block.
            guard let next = try receive(wait: true) else { break }
            frames.append(next)
            frame = next
        }
        return true
    }

    /// Receives a whole multipart message, blocking until one arrives.
    public func receiveMultipart() throws(ZMQError) -> [Message] {
        var frames: [Message] = []
        _ = try receive(multipart: &frames, wait: true)
        return frames
    }
}
