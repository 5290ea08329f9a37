import CZeroMQ

/// A CURVE public key: 32 bytes, written as 40 Z85 characters.
///
/// Public keys identify peers: a server's goes to every client so it knows whom it talks to,
/// and each client's or worker's goes into the server's allow-list.
public struct CurvePublicKey: Hashable, Sendable, CustomStringConvertible {
    /// The 32 raw key bytes.
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) throws(CurveKeyError) {
        guard bytes.count == curveKeyByteCount else { throw .wrongByteCount(bytes.count) }
        self.bytes = bytes
    }

    /// Parses the 40-character Z85 form (no surrounding whitespace).
    public init(z85 text: String) throws(CurveKeyError) {
        try self.init(bytes: decodeKey(text))
    }

    /// The 40-character Z85 form.
    public var z85: String { encodeKey(bytes) }

    public var description: String { z85 }
}

/// A CURVE secret key: 32 bytes, written as 40 Z85 characters. Its `description` and
/// mirror never show the key, so logging or dumping a value that holds one does not leak it.
public struct CurveSecretKey: Hashable, Sendable, CustomStringConvertible, CustomReflectable {
    /// The 32 raw key bytes.
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) throws(CurveKeyError) {
        guard bytes.count == curveKeyByteCount else { throw .wrongByteCount(bytes.count) }
        self.bytes = bytes
    }

    /// Parses the 40-character Z85 form (no surrounding whitespace).
    public init(z85 text: String) throws(CurveKeyError) {
        try self.init(bytes: decodeKey(text))
    }

    /// The 40-character Z85 form. Secret: do not log it.
    public var z85: String { encodeKey(bytes) }

    public var description: String { "CurveSecretKey(redacted)" }

    public var customMirror: Mirror { Mirror(self, children: EmptyCollection<Mirror.Child>()) }
}

/// A CURVE key pair: what a process needs to be a CURVE server, or a CURVE client that the
/// server can tell apart from others. Values; safe to pass between threads.
public struct CurveKeyPair: Hashable, Sendable, CustomStringConvertible {
    public let publicKey: CurvePublicKey
    public let secretKey: CurveSecretKey

    /// Pairs two keys, checking that `publicKey` is the one `secretKey` implies.
    public init(publicKey: CurvePublicKey, secretKey: CurveSecretKey) throws(CurveKeyError) {
        var derived = [CChar](repeating: 0, count: curveKeyTextLength + 1)
        let rc = secretKey.z85.withCString { zmq_curve_public(&derived, $0) }
        guard rc == 0 else { throw .curveUnavailable(errno: zmq_errno()) }
        let derivedText = String(decoding: derived.prefix(curveKeyTextLength).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard derivedText == publicKey.z85 else { throw .publicKeyDoesNotMatchSecretKey }
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// A fresh random key pair (`zmq_curve_keypair`, libsodium's generator).
    ///
    /// - Throws: `ZMQError` with `ENOTSUP` when libzmq was built without CURVE.
    public static func generate() throws(ZMQError) -> CurveKeyPair {
        var publicText = [CChar](repeating: 0, count: curveKeyTextLength + 1)
        var secretText = [CChar](repeating: 0, count: curveKeyTextLength + 1)
        _ = try zmqCall("zmq_curve_keypair") { zmq_curve_keypair(&publicText, &secretText) }
        func text(_ buffer: [CChar]) -> String {
            String(decoding: buffer.prefix(curveKeyTextLength).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        do {
            return try CurveKeyPair(
                publicKey: CurvePublicKey(z85: text(publicText)), secretKey: CurveSecretKey(z85: text(secretText)))
        } catch {
            // libzmq just produced these from each other; anything else is a libzmq bug.
            preconditionFailure("zmq_curve_keypair produced an unusable pair: \(error)")
        }
    }

    public var description: String { "CurveKeyPair(public: \(publicKey.z85))" }
}

/// Why bytes or text are not a CURVE key (pair).
public enum CurveKeyError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A key is 32 bytes.
    case wrongByteCount(Int)
    /// A key's text form is 40 Z85 characters.
    case wrongTextLength(Int)
    case invalidZ85(Z85Error)
    /// The public key is not the one derived from the secret key.
    case publicKeyDoesNotMatchSecretKey
    /// libzmq cannot do CURVE (built without libsodium): `zmq_curve_public` failed.
    case curveUnavailable(errno: Int32)

    public var description: String {
        switch self {
        case .wrongByteCount(let count): "a CURVE key is \(curveKeyByteCount) bytes, not \(count)"
        case .wrongTextLength(let count): "a CURVE key is \(curveKeyTextLength) Z85 characters, not \(count)"
        case .invalidZ85(let error): "not a Z85 key: \(error)"
        case .publicKeyDoesNotMatchSecretKey: "the public key does not belong to the secret key"
        case .curveUnavailable(let code): "libzmq has no CURVE support (errno \(code))"
        }
    }
}

let curveKeyByteCount = 32
let curveKeyTextLength = 40

private func decodeKey(_ text: String) throws(CurveKeyError) -> [UInt8] {
    let length = text.utf8.count
    guard length == curveKeyTextLength else { throw .wrongTextLength(length) }
    do {
        return try Z85.decode(text)
    } catch {
        throw .invalidZ85(error)
    }
}

private func encodeKey(_ bytes: [UInt8]) -> String {
    do {
        return try Z85.encode(bytes)
    } catch {
        preconditionFailure("a \(bytes.count)-byte key cannot fail to encode: \(error)")
    }
}
