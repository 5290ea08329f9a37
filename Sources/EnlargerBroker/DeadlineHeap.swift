/// Live requests' deadlines, earliest first: a binary min-heap of (deadline, job id) with
/// an index so that a request that ends early is removed in O(log n).
struct DeadlineHeap {
    private var entries: [(deadline: MonotonicInstant, jobID: UInt64)] = []
    private var positions: [UInt64: Int] = [:]

    var isEmpty: Bool { entries.isEmpty }
    var count: Int { entries.count }

    /// The earliest deadline, if any.
    var earliest: MonotonicInstant? { entries.first?.deadline }

    mutating func insert(_ jobID: UInt64, at deadline: MonotonicInstant) {
        precondition(positions[jobID] == nil, "job \(jobID) already has a deadline")
        entries.append((deadline, jobID))
        positions[jobID] = entries.count - 1
        siftUp(entries.count - 1)
    }

    mutating func remove(_ jobID: UInt64) {
        guard let position = positions.removeValue(forKey: jobID) else { return }
        let last = entries.count - 1
        if position != last {
            entries.swapAt(position, last)
            positions[entries[position].jobID] = position
        }
        entries.removeLast()
        if position < entries.count {
            siftDown(position)
            siftUp(position)
        }
    }

    /// Removes and returns a job whose deadline is at or before `now`, earliest first.
    mutating func popExpired(at now: MonotonicInstant) -> UInt64? {
        guard let first = entries.first, first.deadline <= now else { return nil }
        remove(first.jobID)
        return first.jobID
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
        positions[entries[a].jobID] = a
        positions[entries[b].jobID] = b
    }
}
