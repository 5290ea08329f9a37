/// Admits jobs against a memory budget, strictly first come, first served.
///
/// A job asks for its estimated peak; it runs when the sum of the admitted jobs' estimates
/// plus its own fits the budget *and* every job that asked before it has been admitted: a
/// large job at the head is not overtaken by small ones forever. A job whose estimate alone
/// exceeds the budget can never run and is refused at once.
///
/// Sources before bytes. A file or URL job asks first for its source bytes (the file's
/// size, the input limit for a download) and reads nothing before they are admitted: it is
/// then a *holder*. Its estimate, which counts the bytes it read, takes the place of that
/// reservation: at once when it is no larger, else by growing, oldest holder first and ahead
/// of every other request. Holders hold memory while they may wait again, so they could wait
/// for each other forever: when every byte reserved belongs to holders waiting to grow (no
/// running job will free any, no holder is still reading), the youngest of them yields, that
/// is drops its bytes and asks for them again later, until the oldest fits. The oldest always
/// does in the end, since its estimate alone fits the budget.
struct MemoryAdmission {
    let budget: Int
    /// The reservations of admitted jobs that have not ended.
    private(set) var inUse = 0
    /// Bytes of results waiting in the outbox to be sent. Nothing is admitted into them; they
    /// come back as the broker reads. A running job's own results are counted here and in its
    /// reservation both, which errs on the safe side while the broker is slow to read.
    var outside = 0
    /// Requests waiting, in the order their jobs arrived at the worker (tokens grow).
    private var waiting: [(token: JobToken, bytes: Int, source: Bool)] = []
    /// Jobs admitted for their source bytes whose estimate has not been admitted: their
    /// reservations.
    private(set) var holders: [JobToken: Int] = [:]
    /// Holders whose estimate is larger than their reservation, by age: what they need in all.
    private var growths: [(token: JobToken, total: Int)] = []
    /// Holders told to yield whose threads have not dropped their bytes yet.
    private var yielding: Set<JobToken> = []

    init(budget: Int) {
        precondition(budget > 0, "a memory budget is positive")
        self.budget = budget
    }

    var waitingCount: Int { waiting.count + growths.count }

    /// Queues a job's estimate, or (`source`) the source bytes it is about to read; `false`
    /// (and nothing queued) when it could never fit.
    mutating func enqueue(_ token: JobToken, bytes: Int, source: Bool = false) -> Bool {
        guard bytes <= budget else { return false }
        // Estimates may arrive slightly out of order from several job threads: keep the
        // order in which the jobs arrived.
        let index = waiting.lastIndex { $0.token < token }.map { $0 + 1 } ?? 0
        waiting.insert((token, bytes, source), at: index)
        return true
    }

    enum Replacement: Equatable {
        /// The estimate fits in what was reserved: admitted now, the rest released.
        case admitted
        /// It waits to grow, ahead of every other request.
        case waiting
        /// It is larger than the whole budget.
        case never
    }

    /// A holder's estimate takes the place of its source reservation.
    mutating func replace(_ token: JobToken, with bytes: Int) -> Replacement {
        guard let held = holders[token] else { preconditionFailure("job \(token) holds no source") }
        guard bytes <= budget else { return .never }
        guard bytes > held else {
            inUse -= held - bytes
            holders[token] = nil
            return .admitted
        }
        let index = growths.lastIndex { $0.token < token }.map { $0 + 1 } ?? 0
        growths.insert((token, bytes), at: index)
        return .waiting
    }

    /// Leaves a source reservation smaller: the download's Content-Length is below the limit
    /// reserved.
    mutating func shrinkSource(_ token: JobToken, to bytes: Int) {
        guard let held = holders[token], bytes < held, !growths.contains(where: { $0.token == token }) else { return }
        inUse -= held - bytes
        holders[token] = bytes
    }

    /// A holder told to yield has dropped its bytes (it asks for them again next).
    mutating func yielded(_ token: JobToken) {
        guard yielding.remove(token) != nil, let held = holders.removeValue(forKey: token) else { return }
        inUse -= held
    }

    /// Takes a job's requests out of the queue (cancelled or abandoned while waiting). What it
    /// holds stays reserved until `release`.
    mutating func withdraw(_ token: JobToken) {
        waiting.removeAll { $0.token == token }
        growths.removeAll { $0.token == token }
    }

    /// The job's thread returned: it holds nothing as a source any more (its reservation is
    /// released with `release`, once its memory is freed).
    mutating func forget(_ token: JobToken) {
        withdraw(token)
        holders[token] = nil
        yielding.remove(token)
    }

    /// An admitted job ended: its reservation is free again.
    mutating func release(_ bytes: Int) {
        inUse -= bytes
        precondition(inUse >= 0, "released more memory than was admitted")
    }

    /// What `admitReady` decided: jobs admitted (with their whole reservations), in order, and
    /// holders that must yield.
    struct Admissions {
        var admitted: [(token: JobToken, bytes: Int)] = []
        var yielding: [JobToken] = []
    }

    /// Admits what fits: the holders' growths first, oldest first, then from the head of the
    /// queue; breaks a standoff of holders by making the youngest yield.
    mutating func admitReady() -> Admissions {
        var result = Admissions()
        while let first = growths.first {
            let held = holders[first.token]!
            if inUse + outside - held + first.total <= budget {
                inUse += first.total - held
                holders[first.token] = nil
                growths.removeFirst()
                result.admitted.append((first.token, first.total))
                continue
            }
            let heldByGrowers = growths.reduce(0) { $0 + holders[$1.token]! }
            let someoneReads = holders.count > growths.count + yielding.count
            // Results waiting to be sent leave as the broker reads: no standoff while any wait.
            guard yielding.isEmpty, !someoneReads, inUse == heldByGrowers, outside == 0, growths.count > 1 else {
                // Memory will be freed (a job runs or ends, a holder reads or yields, the
                // outbox drains): wait.
                return result
            }
            let youngest = growths.removeLast()
            yielding.insert(youngest.token)
            result.yielding.append(youngest.token)
            return result
        }
        while let head = waiting.first, inUse + outside + head.bytes <= budget {
            waiting.removeFirst()
            inUse += head.bytes
            if head.source { holders[head.token] = head.bytes }
            result.admitted.append((head.token, head.bytes))
        }
        return result
    }
}
