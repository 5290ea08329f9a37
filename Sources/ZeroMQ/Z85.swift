import CZeroMQ

/// Z85, ZeroMQ's text encoding for binary keys (RFC 32): every 4 bytes become 5 printable
/// characters, so a 32-byte CURVE key is 40 characters that survive files, shells and YAML.
///
/// Pure functions over values; safe from any thread.
public enum Z85 {
    /// Encodes `bytes`, whose count must be a multiple of 4.
    public static func encode(_ bytes: [UInt8]) throws(Z85Error) -> String {
        guard bytes.count % 4 == 0 else { throw .lengthNotMultipleOfFour(bytes.count) }
        var text = [CChar](repeating: 0, count: bytes.count / 4 * 5 + 1)
        let encoded = bytes.withUnsafeBufferPointer { source in
            zmq_z85_encode(&text, source.baseAddress, source.count)
        }
        // The length was checked above, which is the only reason libzmq refuses to encode.
        precondition(encoded != nil, "zmq_z85_encode refused \(bytes.count) bytes")
        return String(decoding: text.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Decodes `text`, whose length must be a multiple of 5, from the Z85 alphabet only (no
    /// whitespace), each 5-character group standing for at most 2³²−1.
    public static func decode(_ text: String) throws(Z85Error) -> [UInt8] {
        let characters = Array(text.utf8)
        guard characters.count % 5 == 0 else { throw .lengthNotMultipleOfFive(characters.count) }
        // libzmq validates too, but only says "no"; checking here names the offending offset.
        for groupStart in stride(from: 0, to: characters.count, by: 5) {
            var value: UInt64 = 0
            for offset in groupStart..<groupStart + 5 {
                guard let digit = digitValue(characters[offset]) else { throw .invalidCharacter(offset: offset) }
                value = value * 85 + UInt64(digit)
            }
            guard value <= UInt64(UInt32.max) else { throw .groupOutOfRange(offset: groupStart) }
        }
        if characters.isEmpty { return [] }
        var bytes = [UInt8](repeating: 0, count: characters.count / 5 * 4)
        let decoded = text.withCString { zmq_z85_decode(&bytes, $0) }
        guard decoded != nil else { throw .rejectedByLibzmq(errno: zmq_errno()) }
        return bytes
    }

    static let alphabet = Array(
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#".utf8)

    private static let digits: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, character) in alphabet.enumerated() { table[Int(character)] = UInt8(value) }
        return table
    }()

    private static func digitValue(_ character: UInt8) -> UInt8? {
        let value = digits[Int(character)]
        return value == 0xFF ? nil : value
    }
}

/// Why Z85 text or bytes were refused.
public enum Z85Error: Error, Equatable, Sendable, CustomStringConvertible {
    /// Only whole groups of 4 bytes can be encoded.
    case lengthNotMultipleOfFour(Int)
    /// Only whole groups of 5 characters (UTF-8 bytes) can be decoded.
    case lengthNotMultipleOfFive(Int)
    /// The character at this UTF-8 offset is not in the Z85 alphabet.
    case invalidCharacter(offset: Int)
    /// The 5-character group starting at this offset encodes more than 32 bits.
    case groupOutOfRange(offset: Int)
    /// libzmq refused text that passed the checks above (kept so nothing is lost silently).
    case rejectedByLibzmq(errno: Int32)

    public var description: String {
        switch self {
        case .lengthNotMultipleOfFour(let count): "Z85 encodes groups of 4 bytes; got \(count) bytes"
        case .lengthNotMultipleOfFive(let count): "Z85 text comes in groups of 5 characters; got \(count)"
        case .invalidCharacter(let offset): "character \(offset + 1) is not a Z85 character"
        case .groupOutOfRange(let offset): "the group at character \(offset + 1) is out of range for Z85"
        case .rejectedByLibzmq(let code): "zmq_z85_decode refused the text (errno \(code))"
        }
    }
}
