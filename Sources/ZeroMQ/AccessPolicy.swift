/// Who may connect, per ZAP domain: the rules a `ZAPHandler` applies.
///
/// A plain value, built once from configuration. Each guarded socket names its domain
/// (`Socket.setCurveServer(_:zapDomain:)`, `Socket.setZAPDomain(_:)`); a connection is let
/// in only if its domain is listed here and its mechanism and key are allowed there.
/// Everything else is refused: unknown domains, PLAIN and other mechanisms, unknown keys.
///
/// ```swift
/// let policy = AccessPolicy(
///     domains: [
///         "clients": .init(curveKeys: .directory("/etc/enlarger/clients"), admitsAdmins: true),
///         "workers": .init(curveKeys: .directory("/etc/enlarger/workers")),
///         "local": .init(nullUserID: "local"),  // the ipc sockets
///     ],
///     admins: .directory("/etc/enlarger/admins"))
/// ```
public struct AccessPolicy: Sendable, Equatable {
    /// Where a list of allowed CURVE public keys comes from.
    public enum Keys: Sendable, Equatable {
        /// Exactly these keys.
        case fixed(Set<CurvePublicKey>)
        /// One key per `*.pub` file in this directory (names starting with "." are
        /// ignored). Re-read when it changes; see `ZAPHandler`.
        case directory(String)

        /// No keys.
        public static let none = Keys.fixed([])
    }

    /// The rules for one ZAP domain.
    public struct Domain: Sendable, Equatable {
        /// CURVE clients whose public key is here get in, as `AccessPolicy.userID(for:)`.
        public var curveKeys: Keys
        /// Whether the policy's admin keys get in too (as the same kind of user id).
        public var admitsAdmins: Bool
        /// The user id every NULL-mechanism connection gets, or `nil` to refuse NULL. For
        /// `ipc://` sockets, whose privacy comes from a private directory; give those sockets
        /// domains of their own, so that a tcp socket left without CURVE by mistake cannot
        /// admit NULL peers. Must be non-empty and must not start with "curve:", so it
        /// cannot pass for a CURVE principal (`ZAPHandler.init` traps otherwise).
        public var nullUserID: String?

        public init(curveKeys: Keys = .none, admitsAdmins: Bool = false, nullUserID: String? = nil) {
            self.curveKeys = curveKeys
            self.admitsAdmins = admitsAdmins
            self.nullUserID = nullUserID
        }
    }

    public var domains: [String: Domain]
    /// Keys of people or tools that may act on anything (e.g. cancel any request): they get
    /// in wherever a domain `admitsAdmins`, and `ZAPHandler.isAdmin(userID:)` says so.
    public var admins: Keys

    public init(domains: [String: Domain], admins: Keys = .none) {
        self.domains = domains
        self.admins = admins
    }

    /// The user id of a CURVE peer: `curve:` and its Z85 public key. Stable for as long as
    /// the peer keeps its key, whichever connection, domain or routing id it uses.
    public static func userID(for key: CurvePublicKey) -> String {
        curvePrefix + key.z85
    }

    /// The public key inside a CURVE user id, or `nil` for any other user id.
    public static func publicKey(inUserID userID: String) -> CurvePublicKey? {
        guard userID.hasPrefix(curvePrefix) else { return nil }
        return try? CurvePublicKey(z85: String(userID.dropFirst(curvePrefix.count)))
    }

    static let curvePrefix = "curve:"
}
