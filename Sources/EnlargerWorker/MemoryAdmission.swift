/// Admits jobs against a memory budget, strictly first come, first served.
///
/// A job asks for its estimated peak; it runs when the sum of the admitted jobs' estimates
/// plus its own fits the budget *and* every job that asked before it has been admitted: a
/// large job at the head is not overtaken by small ones forever. A job whose estimate alone
/// exceeds the budget can never run and is refused at once.
///
/// Sources before bytes. A file or URL job asks first for its source bytes (the file's
/// size, the input limit for a download) and reads nothing before they are admitted; its
/// estimate, which counts the bytes it read, then takes the place of that reservation: at
/// once when it is no larger, else by growing, ahead of every other request. Such a job
/// holds memory while it may wait again, so only one at a time is between the two
/// admissions (the *holder*): two holders could each wait for the other's bytes forever.
/// With one, every other reservation belongs to a job that will end without asking for
/// more, so the holder's growth always comes.
struct MemoryAdmission {
    let budget: Int
    /// The reservations of admitted jobs that have not ended.
    private(set) var inUse = 0
    /// Requests waiting, in the order their jobs arrived at the worker (tokens grow).
    private var waiting: [(token: JobToken, bytes: Int, source: Bool)] = []
    /// The job admitted for its source bytes whose estimate has not been admitted yet.
    private(set) var holder: (token: JobToken, bytes: Int)?
    /// The holder's estimate, when it is larger than its source reservation and waits.
    private var growth: Int?

    init(budget: Int) {
        precondition(budget > 0, "a memory budget is positive")
        self.budget = budget
    }

    var waitingCount: Int { waiting.count + (growth == nil ? 0 : 1) }

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

    /// The holder's estimate takes the place of its source reservation.
    mutating func replace(_ token: JobToken, with bytes: Int) -> Replacement {
        guard let current = holder, current.token == token else { preconditionFailure("job \(token) holds no source") }
        guard bytes <= budget else { return .never }
        guard bytes > current.bytes else {
            inUse -= current.bytes - bytes
            holder = nil
            return .admitted
        }
        growth = bytes
        return .waiting
    }

    /// Leaves a source reservation smaller: the download's Content-Length is below the limit
    /// reserved, or the file was shorter than its size said.
    mutating func shrinkSource(_ token: JobToken, to bytes: Int) {
        guard let current = holder, current.token == token, growth == nil, bytes < current.bytes else { return }
        inUse -= current.bytes - bytes
        holder = (token, bytes)
    }

    /// Takes a job's requests out of the queue (cancelled or abandoned while waiting). What it
    /// holds stays reserved until `release`.
    mutating func withdraw(_ token: JobToken) {
        waiting.removeAll { $0.token == token }
        if holder?.token == token { growth = nil }
    }

    /// The job's thread returned: it no longer stands between two admissions.
    mutating func forget(_ token: JobToken) {
        withdraw(token)
        if holder?.token == token { holder = nil }
    }

    /// An admitted job ended: its reservation is free again.
    mutating func release(_ bytes: Int) {
        inUse -= bytes
        precondition(inUse >= 0, "released more memory than was admitted")
    }

    /// Admits what fits, the holder's growth first, then from the head of the queue; returns
    /// each admitted job with its whole reservation, in order.
    mutating func admitReady() -> [(token: JobToken, bytes: Int)] {
        var admitted: [(token: JobToken, bytes: Int)] = []
        if let total = growth, let current = holder {
            guard inUse - current.bytes + total <= budget else { return [] }
            inUse += total - current.bytes
            holder = nil
            growth = nil
            admitted.append((current.token, total))
        }
        while let head = waiting.first, inUse + head.bytes <= budget {
            if head.source, holder != nil { break }
            waiting.removeFirst()
            inUse += head.bytes
            if head.source { holder = (head.token, head.bytes) }
            admitted.append((head.token, head.bytes))
        }
        return admitted
    }
}
