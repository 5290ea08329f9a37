/// A peer of the broker as its ROUTER socket knows it: the routing id libzmq gives the
/// connection (or the one the peer set). Unique per connection, not per process.
public struct PeerID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    // The bytes in one piece: Array's own hashing feeds the hasher a byte at a time, and the
    // broker looks peers up several times per message.
    public func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    public static func == (lhs: PeerID, rhs: PeerID) -> Bool {
        lhs.bytes == rhs.bytes
    }

    /// Whether libzmq made the id up for the connection (a ROUTER names a peer that sets no id
    /// with a zero byte and a counter; ids beginning with a zero byte are libzmq's). Such an id
    /// names one connection: once it ends, the id is never heard again.
    public var isGenerated: Bool { bytes.first == 0 }

    public static func < (lhs: PeerID, rhs: PeerID) -> Bool {
        lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }

    /// Lower-case hex, as shown in status replies and logs.
    public var description: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
