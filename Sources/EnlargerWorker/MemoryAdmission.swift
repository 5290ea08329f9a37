/// Admits jobs against a memory budget, strictly first come, first served.
///
/// A job asks for its estimated peak; it runs when the sum of the admitted jobs' estimates
/// plus its own fits the budget *and* every job that asked before it has been admitted: a
/// large job at the head is not overtaken by small ones forever. A job whose estimate alone
/// exceeds the budget can never run and is refused at once.
struct MemoryAdmission {
    let budget: Int
    /// The estimates of admitted jobs that have not ended.
    private(set) var inUse = 0
    /// Jobs waiting, in the order they arrived at the worker (tokens grow).
    private var waiting: [(token: JobToken, bytes: Int)] = []

    init(budget: Int) {
        precondition(budget > 0, "a memory budget is positive")
        self.budget = budget
    }

    var waitingCount: Int { waiting.count }

    /// Queues a job; `false` (and nothing queued) when it could never fit.
    mutating func enqueue(_ token: JobToken, bytes: Int) -> Bool {
        guard bytes <= budget else { return false }
        // Estimates may arrive slightly out of order from several job threads: keep the
        // order in which the jobs arrived.
        let index = waiting.lastIndex { $0.token < token }.map { $0 + 1 } ?? 0
        waiting.insert((token, bytes), at: index)
        return true
    }

    /// Takes a job out of the queue (cancelled or abandoned while waiting).
    mutating func withdraw(_ token: JobToken) {
        waiting.removeAll { $0.token == token }
    }

    /// An admitted job ended: its estimate is free again.
    mutating func release(_ bytes: Int) {
        inUse -= bytes
        precondition(inUse >= 0, "released more memory than was admitted")
    }

    /// Admits waiting jobs from the head of the queue while they fit; returns them in order.
    mutating func admitReady() -> [(token: JobToken, bytes: Int)] {
        var admitted: [(token: JobToken, bytes: Int)] = []
        while let head = waiting.first, inUse + head.bytes <= budget {
            waiting.removeFirst()
            inUse += head.bytes
            admitted.append(head)
        }
        return admitted
    }
}
