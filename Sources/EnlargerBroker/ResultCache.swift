import EnlargerProtocol

/// Terminal results kept for identical requests, bounded in bytes, shared fairly between the
/// principals that fill it.
///
/// Each entry is charged to the principal whose job stored it (its holder). When the cache
/// is full, room is made by dropping the least recently used entry of the holder that holds
/// the most bytes (the storing principal's own on a tie): one that floods the cache with new
/// results evicts only its own once it holds the most, and a principal holding less than
/// another never loses an entry to that other's traffic. (What it can still learn from its own evictions is
/// that some other principal holds more than it does, not what.)
///
/// Each holder's entries are linked in use order through their keys (a doubly linked list
/// inside the dictionary), so a lookup and a store are O(1) and an eviction O(holders). A
/// result larger than an eighth of the limit is not kept: one large image would otherwise
/// flush many small ones. The payload is kept as received (a ZeroMQ frame in the service,
/// shared by reference count with every send), so a hit copies nothing.
struct ResultCache<Payload: FrameBytes> {
    struct Hit {
        let result: Enlarger_V1_Result
        let payload: Payload
    }

    private struct Entry {
        let result: Enlarger_V1_Result
        let payload: Payload
        let cost: Int
        let holder: Principal
        var newer: ShareKey?
        var older: ShareKey?
    }

    /// One principal's entries: their bytes, and the ends of its use-ordered list.
    private struct Holding {
        var bytes = 0
        var newest: ShareKey?
        var oldest: ShareKey?
    }

    let limit: Int
    private var entries: [ShareKey: Entry] = [:]
    private var holdings: [Principal: Holding] = [:]
    private(set) var bytes = 0
    private(set) var evictions: UInt64 = 0

    init(limit: Int) {
        self.limit = max(0, limit)
    }

    var count: Int { entries.count }

    /// The bytes `holder`'s entries take.
    func bytes(heldBy holder: Principal) -> Int { holdings[holder]?.bytes ?? 0 }

    var status: Enlarger_V1_CacheStatus {
        .with {
            $0.entries = UInt32(clamping: entries.count)
            $0.bytes = UInt64(bytes)
            $0.limitBytes = UInt64(limit)
            $0.evictions = evictions
        }
    }

    /// The entry for `key`, which becomes its holder's most recently used.
    mutating func lookup(_ key: ShareKey) -> Hit? {
        guard let entry = entries[key] else { return nil }
        unlink(key)
        link(key)
        return Hit(result: entry.result, payload: entry.payload)
    }

    /// Keeps `result` for `key`, charged to `holder` (replacing any entry there), dropping
    /// entries of the largest holder until it fits.
    mutating func store(_ result: Enlarger_V1_Result, payload: Payload, for key: ShareKey, holder: Principal) {
        let cost = payload.count + result.serializedSizeEstimate + key.byteCount
        guard limit > 0, cost <= limit / 8 else { return }
        if entries[key] != nil { remove(key) }
        while bytes + cost > limit, let victim = victim(storing: holder) {
            remove(victim)
            evictions += 1
        }
        entries[key] = Entry(result: result, payload: payload, cost: cost, holder: holder)
        bytes += cost
        holdings[holder, default: Holding()].bytes += cost
        link(key)
    }

    /// The least recently used entry of the holder with the most bytes (`storing` on a tie).
    private func victim(storing: Principal) -> ShareKey? {
        var largest = holdings[storing].map { (storing, $0.bytes) }
        for (holder, holding) in holdings where holding.bytes > (largest?.1 ?? 0) { largest = (holder, holding.bytes) }
        return largest.flatMap { holdings[$0.0]?.oldest }
    }

    private mutating func remove(_ key: ShareKey) {
        unlink(key)
        guard let entry = entries.removeValue(forKey: key) else { return }
        bytes -= entry.cost
        holdings[entry.holder]!.bytes -= entry.cost
        if holdings[entry.holder]!.newest == nil { holdings[entry.holder] = nil }
    }

    /// Puts `key` (already in `entries`) at the newest end of its holder's list.
    private mutating func link(_ key: ShareKey) {
        let holder = entries[key]!.holder
        let newest = holdings[holder]?.newest
        entries[key]!.older = newest
        entries[key]!.newer = nil
        if let newest { entries[newest]!.newer = key }
        holdings[holder, default: Holding()].newest = key
        if holdings[holder]!.oldest == nil { holdings[holder]!.oldest = key }
    }

    private mutating func unlink(_ key: ShareKey) {
        guard let entry = entries[key] else { return }
        let holder = entry.holder
        if let newer = entry.newer { entries[newer]!.older = entry.older } else { holdings[holder]!.newest = entry.older }
        if let older = entry.older { entries[older]!.newer = entry.newer } else { holdings[holder]!.oldest = entry.newer }
        entries[key]!.newer = nil
        entries[key]!.older = nil
    }
}

extension Enlarger_V1_Result {
    /// Roughly the bytes this header takes in memory: the fixed fields, the content type,
    /// the notes.
    var serializedSizeEstimate: Int {
        128 + contentType.utf8.count + notes.reduce(0) { $0 + $1.utf8.count + 16 }
    }
}
