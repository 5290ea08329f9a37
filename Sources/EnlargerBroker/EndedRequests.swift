/// A bounded, time-limited memory of request (or batch) ids that ended, so that a Cancel
/// arriving just after the end is answered `FINISHED` rather than `UNKNOWN`, and a late item
/// of an ended batch does not start it again. Each principal has its own memory, bounded on
/// its own: one that ends requests by the thousand forgets only its own. In each, oldest
/// entries go first, either when too many are held or when they are too old.
struct EndedRequests {
    private var logs: [Principal: EndedLog] = [:]
    private let limit: Int
    private let lifetime: Duration
    private(set) var count = 0

    /// `limit`: ids remembered per principal.
    init(limit: Int, lifetime: Duration) {
        self.limit = max(limit, 0)
        self.lifetime = lifetime
    }

    mutating func remember(_ requestID: RequestKey, at now: MonotonicInstant) {
        guard limit > 0 else { return }
        // One lookup, in place: once per request.
        count += logs[requestID.principal, default: EndedLog(limit: limit, lifetime: lifetime)].remember(requestID, at: now)
    }

    func contains(_ requestID: RequestKey, at now: MonotonicInstant) -> Bool {
        logs[requestID.principal]?.contains(requestID, at: now) ?? false
    }

    mutating func expire(at now: MonotonicInstant) {
        for principal in Array(logs.keys) {
            let before = logs[principal]!.count
            logs[principal]!.expire(at: now)
            count += logs[principal]!.count - before
            if logs[principal]!.count == 0 { logs[principal] = nil }
        }
    }
}

/// One principal's ended ids.
private struct EndedLog {
    private struct Entry {
        let requestID: RequestKey
        let endedAt: MonotonicInstant
        let serial: UInt64
    }

    private var order: [Entry] = []
    private var head = 0
    private var nextSerial: UInt64 = 0
    // The newest entry per id: an id can be reused once its request has ended, so the same
    // id may be in `order` more than once and only its newest entry counts.
    private var newest: [RequestKey: Entry] = [:]
    private let limit: Int
    private let lifetime: Duration

    init(limit: Int, lifetime: Duration) {
        self.limit = max(limit, 0)
        self.lifetime = lifetime
    }

    var count: Int { newest.count }

    /// Returns how much `count` changed.
    mutating func remember(_ requestID: RequestKey, at now: MonotonicInstant) -> Int {
        guard limit > 0 else { return 0 }
        let before = newest.count
        let entry = Entry(requestID: requestID, endedAt: now, serial: nextSerial)
        nextSerial += 1
        order.append(entry)
        newest[requestID] = entry
        while order.count - head > limit { dropOldest() }
        return newest.count - before
    }

    func contains(_ requestID: RequestKey, at now: MonotonicInstant) -> Bool {
        guard let entry = newest[requestID] else { return false }
        return now.duration(since: entry.endedAt) <= lifetime
    }

    mutating func expire(at now: MonotonicInstant) {
        while head < order.count, now.duration(since: order[head].endedAt) > lifetime { dropOldest() }
    }

    private mutating func dropOldest() {
        let oldest = order[head]
        // One lookup: the id's newest entry goes only if it is this one.
        if let index = newest.index(forKey: oldest.requestID), newest.values[index].serial == oldest.serial {
            newest.remove(at: index)
        }
        head += 1
        // Compact once the consumed prefix dominates, keeping appends amortised O(1).
        if head > 64 && head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
