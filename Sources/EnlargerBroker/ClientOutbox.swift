import EnlargerProtocol

/// What waits at the broker for clients, and to whom it may go: a pure value, no sockets.
///
/// A message for a client goes straight to the socket unless something already waits for
/// that client (order is kept). When the socket refuses it (the client's pipe is full: it
/// reads more slowly than results come; or its routing id is not connected), the message
/// starts the client's box. A box is tried again as soon as the socket says a pipe has room
/// (the service polls for that), after every message from its client, and on a short timer
/// as a fallback.
///
/// **Whose it is.** Everything is keyed by routing id *and* principal. A box belongs to the
/// principal the messages are for, and nothing in it goes to a connection not known to be
/// that principal's: once a send finds the routing id unconnected, or its connection ends
/// (the socket monitor says so before the id can pass to another connection), the box is
/// not tried again until a message arrives from that id. From the same principal, the box
/// is delivered; from another (a connection that took the free id), it is dropped unsent
/// and the core ends those requests.
///
/// **What it costs.** The core is told the bytes waiting once they pass `holdBackBytes` (or
/// at once when the client is not connected), and then holds the client's queued work
/// back, so a slow reader slows its own work rather than growing the broker. A box that
/// outgrows `maxBytes`, or makes no progress for `patience`, is *shed*: results and degraded
/// results are dropped, each terminal result replaced by a small Failed{CLIENT_NOT_READING}
/// for its request, and the core ends the client's other live requests the same way. What
/// remains are those notices, delivered whenever the client reads again. Notices are
/// bounded too: past `maxNoticeBytes`, or after another `patience` without progress, the
/// box is dropped whole and the client is *lost* (its requests end without a message).
struct ClientOutbox<Payload: FrameBytes> {
    struct Limits {
        var maxBytes = 256 << 20
        var patience: Duration = .seconds(30)
        var holdBackBytes = 1 << 20
        var maxNoticeBytes = 1 << 20
    }

    /// How one attempt to hand a message to the socket went.
    enum SendOutcome {
        case sent
        /// The client's pipe is full: it is connected but not reading fast enough.
        case full
        /// The routing id is not connected.
        case unreachable
    }

    /// What the core must hear about.
    enum Effect: Equatable {
        /// Bytes now waiting for the client, as the core should count them (0: none that
        /// matter; its held work may go).
        case waiting(PeerID, bytes: Int)
        /// The box was shed: end the client's live requests with CLIENT_NOT_READING (the
        /// notices join the box).
        case notReading(PeerID)
        /// The box was dropped whole: end what the client still has without a message.
        case lost(PeerID)
        /// The connection of an id libzmq made up for it ended: the id is never heard again,
        /// what waited for it is dropped, and the client's requests end without a message.
        case departed(PeerID)
    }

    private struct Entry {
        let message: OutgoingMessage<Payload>
        let shed: ClientShedding
        var bytes: Int { message.byteCount }
    }

    private struct Box {
        let principal: Principal
        /// Sends may be tried: the routing id was last heard as `principal`, and no send
        /// since found it unconnected.
        var verified: Bool
        var entries: [Entry] = []
        var head = 0
        var bytes = 0
        var lastProgress: MonotonicInstant
        var retryAt: MonotonicInstant
        var retryDelay: Duration = .milliseconds(1)
        /// Shed: only notices are left, and the core has ended the client's requests.
        var shed = false
        /// What the core was last told waits (see `Effect.waiting`).
        var reported = 0

        var isEmpty: Bool { head == entries.count }
    }

    let limits: Limits
    private var boxes: [PeerID: Box] = [:]
    /// Routing ids whose messages are being dropped while the core ends a lost client's
    /// requests.
    private var discarding: Set<PeerID> = []
    /// The principal last heard on each client routing id: whom a reply sent there is for.
    private(set) var holders: [PeerID: Principal] = [:]
    /// The connection (file descriptor) each routing id was last heard on, and back.
    private var connectionOf: [PeerID: Int32] = [:]
    private var peersOn: [Int32: Set<PeerID>] = [:]
    /// Ids of ended connections that are never heard again, for `takeDeparted`.
    private var departed: [PeerID] = []

    init(limits: Limits) {
        self.limits = limits
    }

    // MARK: Connections

    /// A message came from `peer`'s connection (`descriptor`, when libzmq tells it) as
    /// `principal`: the id is that principal's now. What waited for another principal under
    /// it is dropped unsent (the core ends those requests); what waited for this one may go.
    mutating func heard(from peer: PeerID, as principal: Principal, on descriptor: Int32?) -> [Effect] {
        if let descriptor, connectionOf[peer] != descriptor {
            if let old = connectionOf[peer] { peersOn[old]?.remove(peer) }
            connectionOf[peer] = descriptor
            peersOn[descriptor, default: []].insert(peer)
        }
        holders[peer] = principal
        guard let box = boxes[peer] else { return [] }
        guard box.principal == principal else {
            boxes[peer] = nil
            return box.reported > 0 ? [.waiting(peer, bytes: 0)] : []
        }
        boxes[peer]!.verified = true
        return []
    }

    /// Whether hearing `peer` on `descriptor` as `principal` would change nothing: it was
    /// last heard so, and nothing waits for it unverified.
    func hasHeard(_ peer: PeerID, as principal: Principal, on descriptor: Int32?) -> Bool {
        guard holders[peer] == principal, descriptor == nil || connectionOf[peer] == descriptor else { return false }
        return boxes[peer]?.verified ?? true
    }

    /// A client connection ended: the ids heard on it are no one's until heard again. An id
    /// libzmq made up for the connection (`PeerID.isGenerated`) is never heard again: what
    /// waits for it is dropped at once, whatever comes for it is discarded, and
    /// `takeDeparted` names it for the core. (A client that names its own id may come back
    /// under it: its box waits, within the patience.)
    /// Returns the ids that were on it.
    @discardableResult
    mutating func connectionEnded(_ descriptor: Int32) -> Set<PeerID> {
        guard let peers = peersOn.removeValue(forKey: descriptor) else { return [] }
        for peer in peers.sorted() {
            connectionOf[peer] = nil
            holders[peer] = nil
            if peer.isGenerated {
                boxes[peer] = nil
                discarding.insert(peer)
                departed.append(peer)
            } else {
                boxes[peer]?.verified = false
            }
        }
        return peers
    }

    /// The ids that departed since the last call: the core ends their requests, then
    /// `finishDiscarding` each.
    mutating func takeDeparted() -> [Effect] {
        defer { departed.removeAll() }
        return departed.map { .departed($0) }
    }

    /// Nothing is kept for an id with nothing waiting (call when the core has no requests
    /// for it either).
    mutating func forgetIfIdle(_ peer: PeerID) {
        guard boxes[peer] == nil else { return }
        holders[peer] = nil
        if let descriptor = connectionOf.removeValue(forKey: peer) {
            peersOn[descriptor]?.remove(peer)
            if peersOn[descriptor]?.isEmpty == true { peersOn[descriptor] = nil }
        }
    }

    // MARK: Sending

    /// Hands `message` to `transmit` or keeps it. `intended` names whose it is (nil: whoever
    /// was last heard on the id, for a reply); a message no principal is known for is dropped.
    mutating func send<Failure: Error>(
        _ message: OutgoingMessage<Payload>, to peer: PeerID, for intended: Principal?, shed: ClientShedding,
        now: MonotonicInstant, transmit: (OutgoingMessage<Payload>) throws(Failure) -> SendOutcome
    ) throws(Failure) -> [Effect] {
        guard !discarding.contains(peer), let principal = intended ?? holders[peer] else { return [] }
        if let index = boxes.index(forKey: peer) {
            guard boxes.values[index].principal == principal else {
                boxes.remove(at: index)  // another principal's: never to be delivered here
                return try send(message, to: peer, for: principal, shed: shed, now: now, transmit: transmit)
            }
            Self.append(Entry(message: message, shed: shed), to: &boxes.values[index])
            return check(peer, now: now)
        }
        if holders[peer] != principal {
            // The id was last heard as someone else (or not at all): wait to hear it again.
            boxes[peer] = Box(principal: principal, verified: false, lastProgress: now, retryAt: now)
            append(Entry(message: message, shed: shed), to: peer)
            return check(peer, now: now)
        }
        let outcome = try transmit(message)
        guard outcome != .sent else { return [] }
        boxes[peer] = Box(principal: principal, verified: outcome == .full, lastProgress: now,
                          retryAt: now + .milliseconds(1))
        append(Entry(message: message, shed: shed), to: peer)
        return check(peer, now: now)
    }

    private mutating func append(_ entry: Entry, to peer: PeerID) {
        Self.append(entry, to: &boxes[peer]!)
    }

    private static func append(_ entry: Entry, to box: inout Box) {
        box.entries.append(entry)
        box.bytes += entry.bytes
    }

    /// Whether a box waits on a full pipe of a connected client (worth polling the socket
    /// for room).
    var awaitsRoom: Bool { boxes.values.contains { $0.verified } }

    /// When `due` next has something to do.
    var nextDue: MonotonicInstant? {
        boxes.values.map { $0.verified ? min($0.retryAt, expiry(of: $0)) : expiry(of: $0) }.min()
    }

    private func expiry(of box: Box) -> MonotonicInstant { box.lastProgress + limits.patience }

    /// Tries what is due (every box of a connected client when `roomMade`: the socket said
    /// a pipe took some), and judges every box's patience.
    mutating func due<Failure: Error>(
        now: MonotonicInstant, roomMade: Bool,
        transmit: (PeerID, OutgoingMessage<Payload>) throws(Failure) -> SendOutcome
    ) throws(Failure) -> [Effect] {
        guard !boxes.isEmpty else { return [] }
        var effects: [Effect] = []
        for peer in boxes.keys.sorted() {
            guard let box = boxes[peer] else { continue }
            if box.verified && (roomMade || box.retryAt <= now) {
                effects += try flush(peer, now: now) { (message) throws(Failure) in try transmit(peer, message) }
            } else if now.duration(since: box.lastProgress) > limits.patience {
                effects += check(peer, now: now)
            }
        }
        return effects
    }

    /// Sends what waits for `peer` while its pipe takes it (after a message from it, say).
    mutating func flush<Failure: Error>(
        _ peer: PeerID, now: MonotonicInstant,
        transmit: (OutgoingMessage<Payload>) throws(Failure) -> SendOutcome
    ) throws(Failure) -> [Effect] {
        // The box is worked on in place: one lookup, however many messages go.
        guard let index = boxes.index(forKey: peer), boxes.values[index].verified else { return [] }
        let emptied = try Self.send(from: &boxes.values[index], now: now, transmit: transmit)
        if emptied {
            let reported = boxes.values[index].reported
            boxes.remove(at: index)
            return reported > 0 ? [.waiting(peer, bytes: 0)] : []
        }
        return check(peer, now: now)
    }

    /// Sends from `box` while its pipe takes messages; returns whether it is empty.
    private static func send<Failure: Error>(
        from box: inout Box, now: MonotonicInstant, transmit: (OutgoingMessage<Payload>) throws(Failure) -> SendOutcome
    ) throws(Failure) -> Bool {
        var progressed = false
        while !box.isEmpty {
            let entry = box.entries[box.head]
            let outcome = try transmit(entry.message)
            guard outcome == .sent else {
                // Not connected: whoever connects under the id next must speak first.
                if outcome == .unreachable { box.verified = false }
                break
            }
            box.bytes -= entry.bytes
            box.head += 1
            progressed = true
        }
        if box.isEmpty { return true }
        if progressed {
            box.entries.removeFirst(box.head)
            box.head = 0
            box.lastProgress = now
            box.retryDelay = .milliseconds(1)
        } else {
            box.retryDelay = min(box.retryDelay * 2, .milliseconds(100))
        }
        box.retryAt = now + box.retryDelay
        return false
    }

    // MARK: Limits

    /// Applies the limits to `peer`'s box and says what the core must hear.
    private mutating func check(_ peer: PeerID, now: MonotonicInstant) -> [Effect] {
        guard let box = boxes[peer] else { return [] }
        let stalled = now.duration(since: box.lastProgress) > limits.patience
        if box.shed {
            guard box.bytes > limits.maxNoticeBytes || stalled else { return report(peer) }
            boxes[peer] = nil
            discarding.insert(peer)
            return [.lost(peer)]
        }
        guard box.bytes > limits.maxBytes || stalled else { return report(peer) }
        // Shed: what the client will read when it comes back is one notice per request.
        var kept: [Entry] = []
        for entry in box.entries[box.head...] {
            switch entry.shed {
            case .keep: kept.append(entry)
            case .drop: continue
            case .notify(let requestID):
                var failed = Enlarger_V1_Failed()
                failed.requestID = requestID
                failed.code = .clientNotReading
                failed.message = Self.notReadingMessage
                kept.append(Entry(message: BrokerToClientMessage<Payload>.failed(failed).encoded(), shed: .keep))
            }
        }
        boxes[peer]!.entries = kept
        boxes[peer]!.head = 0
        boxes[peer]!.bytes = kept.reduce(0) { $0 + $1.bytes }
        boxes[peer]!.shed = true
        // Its patience starts again: the notices get as long as the results had.
        boxes[peer]!.lastProgress = now
        return [.notReading(peer)] + report(peer)
    }

    static var notReadingMessage: String {
        "the client did not read its results in time; they were dropped"
    }

    /// The bytes the core counts for `peer`: all of them once the client is not connected or
    /// past `holdBackBytes`, none below (a pipe that is briefly full is not a slow reader).
    /// Told when that changes between none and some, and otherwise once it has moved by
    /// `holdBackBytes` (not on every message: the core only holds work back or lets it go,
    /// and reports the bytes in its status).
    private mutating func report(_ peer: PeerID) -> [Effect] {
        guard let box = boxes[peer] else { return [] }
        let counted = !box.verified || box.shed || box.bytes >= limits.holdBackBytes ? box.bytes : 0
        guard (counted > 0) != (box.reported > 0) || abs(counted - box.reported) >= limits.holdBackBytes else { return [] }
        boxes[peer]!.reported = counted
        return [.waiting(peer, bytes: counted)]
    }

    /// Ends a lost client's discarding, once the core has ended its requests.
    mutating func finishDiscarding(_ peer: PeerID) {
        discarding.remove(peer)
    }

    // MARK: Introspection

    /// Bytes waiting for `peer` (0: nothing).
    func bytesWaiting(for peer: PeerID) -> Int { boxes[peer]?.bytes ?? 0 }

    /// Messages waiting for `peer`.
    func messagesWaiting(for peer: PeerID) -> Int { boxes[peer].map { $0.entries.count - $0.head } ?? 0 }

    /// Nothing is kept about any client.
    var isEmpty: Bool {
        boxes.isEmpty && holders.isEmpty && connectionOf.isEmpty && peersOn.isEmpty && departed.isEmpty && discarding.isEmpty
    }
}

/// What may become of a client message if its client stops reading and the broker sheds
/// what waits for it (see `ClientOutbox`).
public enum ClientShedding: Sendable, Equatable {
    /// Small and needed: kept (acceptances, failures, replies).
    case keep
    /// Optional: dropped (a degraded result, a Started).
    case drop
    /// A terminal result: replaced by Failed{CLIENT_NOT_READING} for this request.
    case notify(requestID: String)
}
