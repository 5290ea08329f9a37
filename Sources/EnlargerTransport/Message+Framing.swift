import EnlargerProtocol
import ZeroMQ

// Where the wire protocol meets ZeroMQ. The protocol module must not depend on ZeroMQ (its
// framing is tested on plain byte arrays), and ZeroMQ knows nothing of the protocol, so the
// conformance that lets the framing code read received messages in place, and the
// multipart send and receive of whole protocol messages, live in this small module shared
// by the broker, the worker and the client.

extension Message: FrameBytes {}

extension Socket {
    /// Sends `outgoing` as one multipart message without blocking (for a DEALER: the
    /// routing id is the ROUTER side's business).
    ///
    /// - Returns: `false` when nothing was sent because the message cannot be queued now
    ///   (no connection yet or the peer's queue is full); libzmq queues the frames of a
    ///   multipart message atomically, so a message is never half sent.
    @discardableResult
    public func send(_ outgoing: OutgoingMessage<Message>) throws(ZMQError) -> Bool {
        guard try send(outgoing.tag.bytes, [.dontWait, .more]) else { return false }
        guard let payload = outgoing.payload else {
            return try send(outgoing.header, .dontWait)
        }
        try send(outgoing.header, [.dontWait, .more])
        return try send(payload, .dontWait)
    }

    /// Receives one whole multipart message if one is queued.
    public func receiveFrames() throws(ZMQError) -> [Message]? {
        var messages: [Message] = []
        guard try receive(multipart: &messages, wait: false) else { return nil }
        return messages
    }
}
