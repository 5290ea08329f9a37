/// Who a client connection is: the CURVE public key it authenticated with on tcp, or
/// `local` on ipc, whose socket only its owner can reach. Request ids are scoped to it: two
/// principals may use the same id without seeing each other.
public struct Principal: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let name: String
    /// May cancel any request and see worker details. Not part of the identity: it comes
    /// from the admin allow-list as last read.
    public let isAdmin: Bool

    public init(_ name: String, isAdmin: Bool = false) {
        self.name = name
        self.isAdmin = isAdmin
    }

    /// Every peer of an unauthenticated ipc socket: the socket file's owner, who also runs
    /// the broker, and so an admin.
    public static let local = Principal("local", isAdmin: true)

    public static func == (lhs: Principal, rhs: Principal) -> Bool { lhs.name == rhs.name }
    public func hash(into hasher: inout Hasher) { hasher.combine(name) }
    public static func < (lhs: Principal, rhs: Principal) -> Bool { lhs.name < rhs.name }

    public var description: String { name }
}

/// A request's identity at the broker: the producer's id within its principal.
///
/// Hashed once, when made: the broker looks a request up in several tables per message,
/// and each lookup would otherwise hash both strings again. The hash is the process's
/// seeded `Hasher`, so a producer choosing its ids cannot aim them at one bucket.
struct RequestKey: Hashable, Comparable {
    let principal: Principal
    let id: String
    private let hashOfStrings: Int

    init(principal: Principal, id: String) {
        self.principal = principal
        self.id = id
        var hasher = Hasher()
        hasher.combine(principal.name)
        hasher.combine(id)
        hashOfStrings = hasher.finalize()
    }

    static func == (lhs: RequestKey, rhs: RequestKey) -> Bool {
        lhs.hashOfStrings == rhs.hashOfStrings && lhs.id == rhs.id && lhs.principal == rhs.principal
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(hashOfStrings)
    }

    static func < (lhs: RequestKey, rhs: RequestKey) -> Bool {
        (lhs.principal, lhs.id) < (rhs.principal, rhs.id)
    }
}
