/// The decisions behind `ZAPHandler`, without its socket: ZAP request frames in, reply
/// frames and an event out, with the allow-list directories re-read at most once per
/// `reloadInterval` of the injected time. Owned by one thread (the handler's).
struct AccessControl {
    let policy: AccessPolicy
    let reloadInterval: Duration
    private var directories: [String: AllowListDirectory] = [:]
    private var lastCheck: ContinuousClock.Instant?

    init(policy: AccessPolicy, reloadInterval: Duration) {
        for (name, domain) in policy.domains {
            if let userID = domain.nullUserID {
                // A NULL user id that is empty would let the peer supply its own, and one
                // that looks like a CURVE principal would impersonate that key's owner.
                precondition(!userID.isEmpty, "domain \"\(name)\": the NULL user id is empty")
                precondition(!userID.hasPrefix(AccessPolicy.curvePrefix), "domain \"\(name)\": NULL user id \(userID) looks like a CURVE one")
            }
        }
        self.policy = policy
        self.reloadInterval = reloadInterval
        var paths = policy.domains.values.map(\.curveKeys)
        paths.append(policy.admins)
        for case .directory(let path) in paths { directories[path] = AllowListDirectory(path: path) }
    }

    /// Re-reads every allow-list directory now.
    mutating func reload(now: ContinuousClock.Instant) -> [ZAPEvent] {
        lastCheck = now
        return directories.keys.sorted().flatMap { directories[$0]!.refresh(force: true) }
    }

    /// How long until `refreshIfDue` next reads (zero: now), so a loop can wake for it.
    func timeUntilRefresh(now: ContinuousClock.Instant) -> Duration {
        guard let lastCheck, !directories.isEmpty else { return directories.isEmpty ? .seconds(3600) : .zero }
        return max(.zero, lastCheck + reloadInterval - now)
    }

    /// Re-reads the directories that changed, if `reloadInterval` has passed since the last
    /// check (or there was none).
    mutating func refreshIfDue(now: ContinuousClock.Instant) -> [ZAPEvent] {
        if let lastCheck, now - lastCheck < reloadInterval { return [] }
        lastCheck = now
        return directories.keys.sorted().flatMap { directories[$0]!.refresh(force: false) }
    }

    /// Whether `userID` may still use `domain` as the lists were last read: a CURVE
    /// principal whose key is still listed there; any other (NULL) user id is the domain's own.
    func admits(userID: String, domain: String) -> Bool {
        guard let key = AccessPolicy.publicKey(inUserID: userID) else { return true }
        guard let rules = policy.domains[domain] else { return false }
        return keys(rules.curveKeys).contains(key) || (rules.admitsAdmins && keys(policy.admins).contains(key))
    }

    func isAdmin(userID: String) -> Bool {
        guard let key = AccessPolicy.publicKey(inUserID: userID) else { return false }
        return keys(policy.admins).contains(key)
    }

    private func keys(_ source: AccessPolicy.Keys) -> Set<CurvePublicKey> {
        switch source {
        case .fixed(let keys): keys
        case .directory(let path): directories[path]?.keys ?? []
        }
    }

    /// Answers one ZAP request (the frames after the REP envelope).
    func answer(_ frames: [[UInt8]]) -> (reply: [[UInt8]], event: ZAPEvent) {
        let requestID = frames.count > 1 ? frames[1] : []
        let outcome: Decision
        let peer: ZAPPeer
        if let request = ZAPRequest(frames) {
            peer = request.peer
            outcome = decide(request)
        } else {
            peer = ZAPPeer(domain: "", address: "", mechanism: "")
            outcome = .refuse(.malformedRequest)
        }
        // ZAP 1.0 reply: version, request id, status code, status text, user id, metadata.
        switch outcome {
        case .allow(let userID):
            return ([Array("1.0".utf8), requestID, Array("200".utf8), Array("OK".utf8), Array(userID.utf8), []],
                    .allowed(peer, userID: userID))
        case .refuse(let refusal):
            return ([Array("1.0".utf8), requestID, Array("400".utf8), Array(refusal.description.utf8), [], []],
                    .refused(peer, refusal))
        }
    }

    private enum Decision {
        case allow(userID: String)
        case refuse(ZAPRefusal)
    }

    private func decide(_ request: ZAPRequest) -> Decision {
        guard let domain = policy.domains[request.peer.domain] else { return .refuse(.unknownDomain) }
        switch request.peer.mechanism {
        case "NULL":
            guard let userID = domain.nullUserID else { return .refuse(.mechanismNotAllowed) }
            return .allow(userID: userID)
        case "CURVE":
            guard let key = request.peer.publicKey else { return .refuse(.malformedRequest) }
            let allowed = keys(domain.curveKeys).contains(key) || (domain.admitsAdmins && keys(policy.admins).contains(key))
            return allowed ? .allow(userID: AccessPolicy.userID(for: key)) : .refuse(.keyNotAllowed)
        default:
            return .refuse(.mechanismNotAllowed)
        }
    }
}

/// A ZAP 1.0 request: version "1.0", request id, domain, address, identity (routing id),
/// mechanism, then the mechanism's credentials (none for NULL, the client's 32-byte
/// public key for CURVE).
struct ZAPRequest {
    var peer: ZAPPeer

    init?(_ frames: [[UInt8]]) {
        guard frames.count >= 6, frames[0] == Array("1.0".utf8),
              let domain = String(validating: frames[2], as: UTF8.self),
              let address = String(validating: frames[3], as: UTF8.self),
              let mechanism = String(validating: frames[5], as: UTF8.self)
        else { return nil }
        let credentials = frames[6...]
        var key: CurvePublicKey?
        if mechanism == "CURVE" {
            guard credentials.count == 1, let curveKey = try? CurvePublicKey(bytes: credentials.first!) else { return nil }
            key = curveKey
        }
        peer = ZAPPeer(domain: domain, address: address, mechanism: mechanism, publicKey: key)
    }
}
