import SwiftProtobuf

/// An encoded message, ready to be written as frames: the tag, the serialized header and
/// the payload frame when the message carries one. The routing id, when sending from a
/// ROUTER, goes in front and is not part of it.
public struct OutgoingMessage<Payload> {
    public let tag: ProtocolTag
    public let header: [UInt8]
    public let payload: Payload?

    // Inlinable (like the encoders below), so that the I/O loops get them specialised for
    // their message type rather than through generic metadata at run time, per message.
    @inlinable
    public init(tag: ProtocolTag, header: some SwiftProtobuf.Message, payload: Payload? = nil) {
        self.tag = tag
        // Serialising can only fail for proto2 required fields or Any, which this protocol
        // does not use: a failure here is a bug, not an input error.
        self.header = try! header.serializedBytes()
        self.payload = payload
    }
}

extension OutgoingMessage where Payload: FrameBytes {
    /// Bytes of all frames, for accounting what waits to be sent.
    @inlinable
    public var byteCount: Int { tag.bytes.count + header.count + (payload?.count ?? 0) }
}

extension OutgoingMessage where Payload == [UInt8] {
    /// All frames as byte arrays, for tests and simple tools.
    public var frames: [[UInt8]] {
        [tag.bytes, header] + (payload.map { [$0] } ?? [])
    }
}

extension OutgoingMessage: Sendable where Payload: Sendable {}
