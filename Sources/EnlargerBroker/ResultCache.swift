import EnlargerProtocol

/// Terminal results kept for identical requests, bounded in bytes, least recently used
/// dropped first.
///
/// Entries are linked in use order through their keys (a doubly linked list inside the
/// dictionary), so a lookup, a store and an eviction are each O(1). A result larger than an
/// eighth of the limit is not kept: one large image would otherwise flush many small ones.
/// The payload is kept as received (a ZeroMQ frame in the service, shared by reference
/// count with every send), so a hit copies nothing.
struct ResultCache<Payload: FrameBytes> {
    struct Hit {
        let result: Enlarger_V1_Result
        let payload: Payload
    }

    private struct Entry {
        let result: Enlarger_V1_Result
        let payload: Payload
        let cost: Int
        var newer: ShareKey?
        var older: ShareKey?
    }

    let limit: Int
    private var entries: [ShareKey: Entry] = [:]
    private var newest: ShareKey?
    private var oldest: ShareKey?
    private(set) var bytes = 0
    private(set) var evictions: UInt64 = 0

    init(limit: Int) {
        self.limit = max(0, limit)
    }

    var count: Int { entries.count }

    var status: Enlarger_V1_CacheStatus {
        .with {
            $0.entries = UInt32(clamping: entries.count)
            $0.bytes = UInt64(bytes)
            $0.limitBytes = UInt64(limit)
            $0.evictions = evictions
        }
    }

    /// The entry for `key`, which becomes the most recently used.
    mutating func lookup(_ key: ShareKey) -> Hit? {
        guard let entry = entries[key] else { return nil }
        unlink(key)
        link(key)
        return Hit(result: entry.result, payload: entry.payload)
    }

    /// Keeps `result` for `key` (replacing any entry there), dropping the least recently
    /// used entries until it fits.
    mutating func store(_ result: Enlarger_V1_Result, payload: Payload, for key: ShareKey) {
        let cost = payload.count + result.serializedSizeEstimate + key.byteCount
        guard limit > 0, cost <= limit / 8 else { return }
        if entries[key] != nil { remove(key) }
        while bytes + cost > limit, let victim = oldest {
            remove(victim)
            evictions += 1
        }
        entries[key] = Entry(result: result, payload: payload, cost: cost)
        bytes += cost
        link(key)
    }

    private mutating func remove(_ key: ShareKey) {
        unlink(key)
        if let entry = entries.removeValue(forKey: key) { bytes -= entry.cost }
    }

    /// Puts `key` (already in `entries`) at the newest end.
    private mutating func link(_ key: ShareKey) {
        entries[key]!.older = newest
        entries[key]!.newer = nil
        if let newest { entries[newest]!.newer = key }
        newest = key
        if oldest == nil { oldest = key }
    }

    private mutating func unlink(_ key: ShareKey) {
        guard let entry = entries[key] else { return }
        if let newer = entry.newer { entries[newer]!.older = entry.older } else { newest = entry.older }
        if let older = entry.older { entries[older]!.newer = entry.newer } else { oldest = entry.newer }
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
