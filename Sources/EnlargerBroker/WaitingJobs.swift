import EnlargerProtocol

/// The lane a job waits in: interactive ones go first and have capacity kept for them.
enum Lane: Int, CaseIterable, Comparable, Sendable {
    case interactive = 0
    case bulk = 1

    init(_ priority: Enlarger_V1_Priority) {
        self = priority == .bulk ? .bulk : .interactive
    }

    static func < (lhs: Lane, rhs: Lane) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Every job that waits for a worker, and the order in which they go: the one owner of
/// "where a waiting job is".
///
/// A waiting job is in exactly one place:
/// - **a lane**, in its principal's FIFO there. Within a lane, principals with work take
///   turns in weighted deficit round robin by cost: each turn adds a principal's weight to
///   its allowance, it is dispatched jobs while the allowance lasts, each taking its cost
///   (1 for a single output), then the next one's turn comes. A costly job may overdraw
///   the allowance: the principal then sits out turns until its debt is paid.
/// - **quarantine** (oldest first): its worker died while it ran beside other jobs, so it
///   must run alone (see the core's Quarantine).
/// - **held back** on its owning client's list (oldest first): none of its clients reads
///   its results; it goes back to the front of its lane when one does.
///
/// A pure value: `place`, `quarantine`, `holdBack` put a job somewhere, `withdraw` takes
/// it from wherever it is, `next` picks the job to dispatch in a lane, and
/// `releaseHeldBack` returns held jobs to their lanes.
struct WaitingJobs {
    enum Place: Equatable {
        case lane(Lane, Principal)
        case quarantine
        case heldBack(PeerID)
    }

    /// One lane: a FIFO per principal and the ring of principals whose turn comes.
    private struct LaneQueues {
        var queues: [Principal: JobQueue] = [:]
        /// Principals with jobs here, in turn order; the first one's turn is now.
        var ring: [Principal] = []
        var ringHead = 0
        /// What each principal may still take (in costs): this turn's allowance, or, below
        /// zero, the debt a costly job left. An allowance is forgotten when the principal's
        /// queue empties; a debt is kept, out of the ring, until paid in its next turns or
        /// the lane empties: a principal that keeps one costly job waiting at a time pays
        /// for each as one with a backlog does.
        var deficit: [Principal: Int] = [:]
        var count = 0
    }

    private var lanes = Array(repeating: LaneQueues(), count: Lane.allCases.count)
    private(set) var quarantined = JobQueue(capacity: 16)
    private var heldBack: [PeerID: [UInt64]] = [:]
    private var places: [UInt64: Place] = [:]
    /// Jobs each principal has waiting in the lanes (not quarantined, not held back).
    private(set) var queuedBy: [Principal: Int] = [:]
    /// Jobs each principal has held back, and whose each held job is: they wait as much as
    /// queued ones, and count against the principal's limit on waiting requests alike.
    private(set) var heldBackBy: [Principal: Int] = [:]
    private var heldBackPrincipals: [UInt64: Principal] = [:]

    /// All waiting jobs, wherever they are.
    var count: Int { places.count }
    var isEmpty: Bool { places.isEmpty }

    func place(of jobID: UInt64) -> Place? { places[jobID] }
    /// Where every waiting job is.
    var allPlaces: [UInt64: Place] { places }
    func isHeldBack(_ jobID: UInt64) -> Bool {
        if case .heldBack = places[jobID] { true } else { false }
    }

    func count(in lane: Lane) -> Int { lanes[lane.rawValue].count }

    /// Jobs held back for `client`, oldest first.
    func heldBack(for client: PeerID) -> [UInt64] { heldBack[client] ?? [] }

    var heldBackCount: Int { heldBack.values.reduce(0) { $0 + $1.count } }

    // MARK: Placing

    /// Puts a job in `lane` behind `principal`'s other jobs there (`atFront`: before them,
    /// for a job that was already at their head, such as one given back by a worker).
    mutating func place(_ jobID: UInt64, lane: Lane, principal: Principal, atFront: Bool = false) {
        precondition(places[jobID] == nil, "job \(jobID) already waits")
        places[jobID] = .lane(lane, principal)
        queuedBy[principal, default: 0] += 1
        var queues = lanes[lane.rawValue]
        lanes[lane.rawValue] = LaneQueues()  // in place: no copy of the queues below
        if queues.queues[principal] == nil {
            queues.queues[principal] = JobQueue(capacity: 16)
            queues.ring.append(principal)
        }
        if atFront { queues.queues[principal]!.prepend(jobID) } else { queues.queues[principal]!.append(jobID) }
        queues.count += 1
        lanes[lane.rawValue] = queues
    }

    mutating func quarantine(_ jobID: UInt64) {
        precondition(places[jobID] == nil, "job \(jobID) already waits")
        places[jobID] = .quarantine
        quarantined.append(jobID)
    }

    mutating func holdBack(_ jobID: UInt64, for client: PeerID, principal: Principal) {
        precondition(places[jobID] == nil, "job \(jobID) already waits")
        places[jobID] = .heldBack(client)
        heldBack[client, default: []].append(jobID)
        heldBackPrincipals[jobID] = principal
        heldBackBy[principal, default: 0] += 1
    }

    /// Takes a job from wherever it waits; returns where that was (nil: it did not wait).
    @discardableResult
    mutating func withdraw(_ jobID: UInt64) -> Place? {
        guard let place = places.removeValue(forKey: jobID) else { return nil }
        switch place {
        case .lane(let lane, let principal):
            var queues = lanes[lane.rawValue]
            lanes[lane.rawValue] = LaneQueues()
            _ = queues.queues[principal]!.remove(jobID)
            queues.count -= 1
            if queues.queues[principal]!.isEmpty { Self.retire(principal, from: &queues) }
            lanes[lane.rawValue] = queues
            decrementQueued(principal)
        case .quarantine:
            _ = quarantined.remove(jobID)
        case .heldBack(let client):
            heldBack[client]?.removeAll { $0 == jobID }
            if heldBack[client]?.isEmpty == true { heldBack[client] = nil }
            if let principal = heldBackPrincipals.removeValue(forKey: jobID) {
                heldBackBy[principal]! -= 1
                if heldBackBy[principal] == 0 { heldBackBy[principal] = nil }
            }
        }
        return place
    }

    private mutating func decrementQueued(_ principal: Principal) {
        queuedBy[principal]! -= 1
        if queuedBy[principal] == 0 { queuedBy[principal] = nil }
    }

    /// A principal with nothing left in a lane leaves its ring and its turn's remainder, but
    /// not its debt while others wait there.
    private static func retire(_ principal: Principal, from queues: inout LaneQueues) {
        queues.queues[principal] = nil
        if queues.deficit[principal, default: 0] >= 0 { queues.deficit[principal] = nil }
        guard let index = queues.ring.firstIndex(of: principal) else { return }
        queues.ring.remove(at: index)
        if index < queues.ringHead { queues.ringHead -= 1 }
        if queues.ringHead >= queues.ring.count { queues.ringHead = 0 }
        if queues.ring.isEmpty { queues.deficit = [:] }
    }

    /// Gives back what `next` charged `principal` in `lane` for a job it then did not
    /// dispatch (held back: it is charged when it goes).
    mutating func refund(_ cost: Int, to principal: Principal, in lane: Lane) {
        let balance = lanes[lane.rawValue].deficit[principal, default: 0] + min(max(1, cost), Self.maxCost)
        let inRing = lanes[lane.rawValue].queues[principal] != nil
        lanes[lane.rawValue].deficit[principal] = balance < 0 || (inRing && balance > 0) ? balance : nil
    }

    // MARK: Choosing

    /// The most a job may cost (see `next`): it bounds how many turns a debt lasts.
    static let maxCost = 8

    /// The next job to dispatch in `lane`, taken off it: the head of the queue of the
    /// principal whose turn it is, skipping principals `eligible` refuses (at their running
    /// limit; their turn waits for them). `weight` gives each principal's allowance per turn,
    /// `cost` what a job takes of it (1 to `maxCost`).
    mutating func next(in lane: Lane, weight: (Principal) -> Int, eligible: (Principal) -> Bool,
                       cost: (UInt64) -> Int = { _ in 1 }) -> UInt64? {
        guard lanes[lane.rawValue].count > 0 else { return nil }
        var queues = lanes[lane.rawValue]
        lanes[lane.rawValue] = LaneQueues()
        defer { lanes[lane.rawValue] = queues }
        // Every eligible principal's allowance grows by at least 1 a round, and no debt is
        // deeper than maxCost - 1: within maxCost rounds one of them can take a job.
        for _ in 0..<(queues.ring.count * Self.maxCost) {
            let principal = queues.ring[queues.ringHead]
            guard eligible(principal) else {
                queues.ringHead = (queues.ringHead + 1) % queues.ring.count
                continue
            }
            if queues.deficit[principal, default: 0] <= 0 {
                // A new turn: its allowance, less any debt.
                queues.deficit[principal, default: 0] += max(1, weight(principal))
                if queues.deficit[principal]! <= 0 {
                    queues.ringHead = (queues.ringHead + 1) % queues.ring.count
                    continue
                }
            }
            let jobID = queues.queues[principal]!.popFirst()!
            queues.count -= 1
            queues.deficit[principal]! -= min(max(1, cost(jobID)), Self.maxCost)
            places[jobID] = nil
            decrementQueued(principal)
            if queues.queues[principal]!.isEmpty {
                Self.retire(principal, from: &queues)
            } else if queues.deficit[principal]! <= 0 {
                queues.ringHead = (queues.ringHead + 1) % queues.ring.count
            }
            return jobID
        }
        return nil
    }

    /// Takes the oldest quarantined job off quarantine.
    mutating func popQuarantined() -> UInt64? {
        guard let jobID = quarantined.popFirst() else { return nil }
        places[jobID] = nil
        return jobID
    }

    /// Held jobs back to the front of their lanes, the oldest (smallest id) first at the
    /// head. `lane` and `principal` say where each belongs.
    mutating func releaseHeldBack(_ jobIDs: [UInt64], lane: (UInt64) -> Lane, principal: (UInt64) -> Principal) {
        for jobID in jobIDs.sorted().reversed() {
            guard isHeldBack(jobID) else { continue }
            withdraw(jobID)
            place(jobID, lane: lane(jobID), principal: principal(jobID), atFront: true)
        }
    }

    /// Moves a job waiting in a lane to another lane (a request in a higher lane joined it).
    mutating func move(_ jobID: UInt64, to lane: Lane) {
        guard case .lane(let current, let principal) = places[jobID], current != lane else { return }
        withdraw(jobID)
        place(jobID, lane: lane, principal: principal)
    }

    mutating func removeAll() {
        self = WaitingJobs()
    }

    /// Everything that decides what goes next, in order (lanes' queues and turns, quarantine,
    /// held lists), for tests that compare states.
    var fingerprint: String {
        var text = ""
        for lane in Lane.allCases {
            let queues = lanes[lane.rawValue]
            text += "\(lane):"
            for index in queues.ring.indices {
                let principal = queues.ring[(queues.ringHead + index) % queues.ring.count]
                var copy = queues.queues[principal]!
                var ids: [UInt64] = []
                while let jobID = copy.popFirst() { ids.append(jobID) }
                text += "\(principal)/\(queues.deficit[principal] ?? 0)=\(ids);"
            }
        }
        var copy = quarantined
        var ids: [UInt64] = []
        while let jobID = copy.popFirst() { ids.append(jobID) }
        text += "q=\(ids);h="
        for client in heldBack.keys.sorted() { text += "\(client)=\(heldBack[client]!);" }
        return text
    }

    /// Internal consistency, for tests: every job in exactly one place, counts right.
    var inconsistencies: [String] {
        var problems: [String] = []
        var seen: [UInt64: Place] = [:]
        for lane in Lane.allCases {
            let queues = lanes[lane.rawValue]
            var total = 0
            for (principal, queue) in queues.queues {
                var copy = queue
                if copy.isEmpty { problems.append("empty queue of \(principal) in \(lane)") }
                while let jobID = copy.popFirst() {
                    total += 1
                    if seen.updateValue(.lane(lane, principal), forKey: jobID) != nil { problems.append("job \(jobID) twice") }
                }
                if !queues.ring.contains(principal) { problems.append("\(principal) has jobs in \(lane) but no turn") }
            }
            if total != queues.count { problems.append("\(lane) counts \(queues.count), holds \(total)") }
            if Set(queues.ring).count != queues.ring.count { problems.append("\(lane): a principal twice in the ring") }
            // Out of the ring only a debt is kept, and only while the lane has work.
            for (principal, balance) in queues.deficit where queues.queues[principal] == nil {
                if balance >= 0 { problems.append("\(principal) keeps an allowance of \(balance) in \(lane) with no jobs") }
                if queues.ring.isEmpty { problems.append("\(principal) keeps a debt in the empty \(lane)") }
            }
            if queues.deficit.values.contains(where: { $0 < -(Self.maxCost - 1) }) {
                problems.append("\(lane): a debt deeper than \(Self.maxCost - 1)")
            }
        }
        var copy = quarantined
        while let jobID = copy.popFirst() {
            if seen.updateValue(.quarantine, forKey: jobID) != nil { problems.append("job \(jobID) twice") }
        }
        for (client, list) in heldBack {
            for jobID in list where seen.updateValue(.heldBack(client), forKey: jobID) != nil {
                problems.append("job \(jobID) twice")
            }
        }
        if seen != places { problems.append("places disagree with the queues") }
        let heldJobs = Set(heldBack.values.flatMap { $0 })
        if Set(heldBackPrincipals.keys) != heldJobs { problems.append("held jobs and their principals disagree") }
        var counted: [Principal: Int] = [:]
        for principal in heldBackPrincipals.values { counted[principal, default: 0] += 1 }
        if counted != heldBackBy { problems.append("held-back counts per principal are off") }
        return problems
    }
}

extension WaitingJobs {
    /// Every held-back job, oldest first.
    var allHeldBack: [UInt64] { heldBack.values.flatMap { $0 }.sorted() }
}

/// Jobs on workers, per lane and per principal.
struct RunningCounts {
    struct Key: Hashable {
        let lane: Lane
        let principal: Principal
    }

    private(set) var byLane = Array(repeating: 0, count: Lane.allCases.count)
    private(set) var byPrincipal: [Principal: Int] = [:]

    var isEmpty: Bool { byPrincipal.isEmpty }

    func count(in lane: Lane) -> Int { byLane[lane.rawValue] }
    func count(of principal: Principal) -> Int { byPrincipal[principal] ?? 0 }

    mutating func add(_ key: Key) {
        byLane[key.lane.rawValue] += 1
        byPrincipal[key.principal, default: 0] += 1
    }

    mutating func remove(_ key: Key) {
        byLane[key.lane.rawValue] -= 1
        byPrincipal[key.principal]! -= 1
        if byPrincipal[key.principal] == 0 { byPrincipal[key.principal] = nil }
    }
}
