/// The broker's FIFO of waiting job ids: a ring buffer, so taking from the front and putting
/// a lost job back at the front are both O(1). Removing a cancelled job from the middle is
/// O(n), bounded by the queue limit.
struct JobQueue {
    private var storage: [UInt64?]
    private var head = 0
    private(set) var count = 0

    init(capacity: Int) {
        storage = Array(repeating: nil, count: max(capacity, 16))
    }

    var isEmpty: Bool { count == 0 }

    var first: UInt64? { count > 0 ? storage[head] : nil }

    mutating func append(_ jobID: UInt64) {
        growIfFull()
        storage[(head + count) % storage.count] = jobID
        count += 1
    }

    mutating func prepend(_ jobID: UInt64) {
        growIfFull()
        head = (head - 1 + storage.count) % storage.count
        storage[head] = jobID
        count += 1
    }

    mutating func popFirst() -> UInt64? {
        guard count > 0 else { return nil }
        let jobID = storage[head]
        storage[head] = nil
        head = (head + 1) % storage.count
        count -= 1
        return jobID
    }

    /// Removes `jobID` if queued; returns whether it was.
    mutating func remove(_ jobID: UInt64) -> Bool {
        guard let offset = (0..<count).first(where: { storage[(head + $0) % storage.count] == jobID }) else {
            return false
        }
        // Close the gap by shifting the later entries one slot towards the head.
        for index in offset..<(count - 1) {
            storage[(head + index) % storage.count] = storage[(head + index + 1) % storage.count]
        }
        storage[(head + count - 1) % storage.count] = nil
        count -= 1
        return true
    }

    private mutating func growIfFull() {
        guard count == storage.count else { return }
        var grown: [UInt64?] = Array(repeating: nil, count: storage.count * 2)
        for index in 0..<count { grown[index] = storage[(head + index) % storage.count] }
        storage = grown
        head = 0
    }
}
