/// Something a `ZAPHandler` did that its owner may want to log or count.
public enum ZAPEvent: Sendable, Equatable, CustomStringConvertible {
    /// A connection was let in (status 200); its messages carry `userID` as "User-Id".
    case allowed(ZAPPeer, userID: String)
    /// A connection was refused (status 400); it never delivers a message.
    case refused(ZAPPeer, ZAPRefusal)
    /// An allow-list directory was read (it changed, or `reload()` was called) and now
    /// holds `keyCount` distinct keys.
    case allowListLoaded(directory: String, keyCount: Int)
    /// A file in an allow-list directory, or the directory itself, could not be used and was
    /// skipped; the other files still count. An unreadable directory allows no key.
    case allowListProblem(KeyFileError)

    public var description: String {
        switch self {
        case .allowed(let peer, let userID): "ZAP allowed \(peer) as \(userID)"
        case .refused(let peer, let refusal): "ZAP refused \(peer): \(refusal)"
        case .allowListLoaded(let directory, let count): "allow-list \(directory): \(count) key\(count == 1 ? "" : "s")"
        case .allowListProblem(let error): "allow-list file skipped: \(error)"
        }
    }
}

/// The connection a ZAP request is about.
public struct ZAPPeer: Sendable, Equatable, CustomStringConvertible {
    /// The ZAP domain of the socket being connected to.
    public var domain: String
    /// The peer's IP address ("" for ipc and inproc).
    public var address: String
    /// "NULL", "PLAIN", "CURVE", …
    public var mechanism: String
    /// The peer's long-term public key (CURVE only).
    public var publicKey: CurvePublicKey?

    public init(domain: String, address: String, mechanism: String, publicKey: CurvePublicKey? = nil) {
        self.domain = domain
        self.address = address
        self.mechanism = mechanism
        self.publicKey = publicKey
    }

    public var description: String {
        let from = address.isEmpty ? "" : " from \(address)"
        let key = publicKey.map { " key \($0.z85)" } ?? ""
        return "\(mechanism)\(from)\(key) in domain \"\(domain)\""
    }
}

/// Why a connection was refused.
public enum ZAPRefusal: Sendable, Equatable, CustomStringConvertible {
    /// The request did not follow ZAP 1.0 (only in-process code can send one).
    case malformedRequest
    /// No such domain in the policy (including the empty domain of a socket that set none).
    case unknownDomain
    /// The domain does not allow this mechanism (NULL where `nullUserID` is `nil`, PLAIN, …).
    case mechanismNotAllowed
    /// A CURVE key that is not in the domain's allow-list.
    case keyNotAllowed

    public var description: String {
        switch self {
        case .malformedRequest: "malformed ZAP request"
        case .unknownDomain: "unknown domain"
        case .mechanismNotAllowed: "mechanism not allowed in this domain"
        case .keyNotAllowed: "public key not allowed in this domain"
        }
    }
}
