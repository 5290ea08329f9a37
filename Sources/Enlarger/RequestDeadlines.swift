/// The local deadlines of requests with a timeout, earliest first: a binary min-heap of
/// (deadline, request) with an index, so that a request that ends early leaves in O(log n)
/// and the client never scans every request to find the next deadline.
struct RequestDeadlines {
    typealias Instant = ContinuousClock.Instant

    private var entries: [(deadline: Instant, token: RequestToken)] = []
    private var positions: [RequestToken: Int] = [:]

    var isEmpty: Bool { entries.isEmpty }
    var count: Int { entries.count }

    /// The earliest deadline, if any.
    var earliest: Instant? { entries.first?.deadline }

    mutating func insert(_ token: RequestToken, at deadline: Instant) {
        precondition(positions[token] == nil, "\(token) already has a deadline")
        entries.append((deadline, token))
        positions[token] = entries.count - 1
        siftUp(entries.count - 1)
    }

    mutating func remove(_ token: RequestToken) {
        guard let position = positions.removeValue(forKey: token) else { return }
        let last = entries.count - 1
        if position != last {
            entries.swapAt(position, last)
            positions[entries[position].token] = position
        }
        entries.removeLast()
        if position < entries.count {
            siftDown(position)
            siftUp(position)
        }
    }

    /// Removes and returns a request whose deadline is at or before `now`, earliest first.
    mutating func popExpired(at now: Instant) -> RequestToken? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        remove(first.token)
        return first.token
    }

    mutating func removeAll() {
        entries.removeAll()
        positions.removeAll()
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].deadline < entries[parent].deadline else { return }
            swap(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].deadline < entries[smallest].deadline { smallest = left }
            if right < entries.count, entries[right].deadline < entries[smallest].deadline { smallest = right }
            guard smallest != parent else { return }
            swap(parent, smallest)
            parent = smallest
        }
    }

    private mutating func swap(_ a: Int, _ b: Int) {
        entries.swapAt(a, b)
        positions[entries[a].token] = a
        positions[entries[b].token] = b
    }
}
