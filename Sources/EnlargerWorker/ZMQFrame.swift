import EnlargerProtocol
import ZeroMQ

// The framing helpers decode any `FrameBytes`; a received ZeroMQ frame is wrapped rather
// than conformed retroactively, so that several modules linked into one executable do not
// each declare the same conformance.

/// A received or outgoing ZeroMQ frame, as the framing helpers see it.
struct ZMQFrame: FrameBytes {
    let message: Message

    var count: Int { message.count }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try message.withUnsafeBytes(body)
    }
}

extension Socket {
    /// Sends `outgoing` as one multipart message without blocking.
    ///
    /// - Returns: `false` when nothing was sent because the message cannot be queued now
    ///   (no connection yet or the peer's queue is full); libzmq queues the frames of a
    ///   multipart message atomically, so a message is never half sent.
    @discardableResult
    func send(_ outgoing: OutgoingMessage<ZMQFrame>) throws(ZMQError) -> Bool {
        guard try send(outgoing.tag.bytes, [.dontWait, .more]) else { return false }
        guard let payload = outgoing.payload else {
            return try send(outgoing.header, .dontWait)
        }
        try send(outgoing.header, [.dontWait, .more])
        return try send(payload.message, .dontWait)
    }

    /// Receives one whole multipart message if one is queued.
    func receiveFrames() throws(ZMQError) -> [ZMQFrame]? {
        var messages: [Message] = []
        guard try receive(multipart: &messages, wait: false) else { return nil }
        return messages.map(ZMQFrame.init)
    }
}
