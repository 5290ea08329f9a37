/// Deadlines of live things (requests, jobs), earliest first: a binary min-heap of
/// (deadline, key) with an index, so that one that ends early leaves in O(log n) and the
/// earliest is known without scanning them all. Used by the broker core (jobs by id) and
/// the client core (requests by token), each with its own clock type.
public struct DeadlineHeap<Key: Hashable, Deadline: Comparable> {
    // Inlinable, so that each user's heap is specialised for its key and clock (generic
    // code across modules otherwise looks types up at run time on every call).
    @usableFromInline var entries: [(deadline: Deadline, key: Key)] = []
    @usableFromInline var positions: [Key: Int] = [:]

    @inlinable public init() {}

    @inlinable public var isEmpty: Bool { entries.isEmpty }
    @inlinable public var count: Int { entries.count }

    /// The earliest deadline, if any.
    @inlinable public var earliest: Deadline? { entries.first?.deadline }

    /// The deadline of `key`, if it has one.
    @inlinable public func deadline(of key: Key) -> Deadline? {
        positions[key].map { entries[$0].deadline }
    }

    /// Adds `key`, which must not have a deadline yet.
    @inlinable public mutating func insert(_ key: Key, at deadline: Deadline) {
        precondition(positions[key] == nil, "\(key) already has a deadline")
        entries.append((deadline, key))
        positions[key] = entries.count - 1
        siftUp(entries.count - 1)
    }

    /// Removes `key`'s deadline; nothing happens when it has none.
    @inlinable public mutating func remove(_ key: Key) {
        guard let position = positions.removeValue(forKey: key) else { return }
        let last = entries.count - 1
        if position != last {
            entries.swapAt(position, last)
            positions[entries[position].key] = position
        }
        entries.removeLast()
        if position < entries.count {
            siftDown(position)
            siftUp(position)
        }
    }

    /// Removes and returns a key whose deadline is at or before `now`, earliest first.
    @inlinable public mutating func popExpired(at now: Deadline) -> Key? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        remove(first.key)
        return first.key
    }

    @inlinable public mutating func removeAll() {
        entries.removeAll()
        positions.removeAll()
    }

    @inlinable mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].deadline < entries[parent].deadline else { return }
            swap(child, parent)
            child = parent
        }
    }

    @inlinable mutating func siftDown(_ start: Int) {
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

    @inlinable mutating func swap(_ a: Int, _ b: Int) {
        entries.swapAt(a, b)
        positions[entries[a].key] = a
        positions[entries[b].key] = b
    }
}
