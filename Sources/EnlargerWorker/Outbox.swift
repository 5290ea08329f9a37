import EnlargerProtocol

/// Messages the broker connection could not take yet, kept in order until it can.
///
/// A DEALER refuses a message (EAGAIN) when its queue toward the broker is full, e.g. while
/// the broker is slow to read. Whatever the core sends then must not be lost if it matters:
/// a job's terminal frame is the only way the broker learns the job ended and gets its credit
/// back. So once one message waits, every later one queues behind it (the order of a job's
/// frames must hold), and the loop flushes the queue when the socket becomes writable.
///
/// What may be dropped instead of queued: heartbeats (the next one will do) and, beyond
/// `optionalLimit` of them, the frames the protocol makes optional (`JobStarted`, degraded
/// results and placeholders). A final result is never optional, terminal or not: each of a
/// set's variants but the last is a non-terminal final, and a client must get every one. So
/// the queue is bounded by the jobs in flight: at most one final per variant (8) per job,
/// `optionalLimit` optional frames, `Ready` and `Disconnect`. It belongs to one
/// connection and is cleared when the connection is replaced. Its `bytes` count against the
/// worker's memory budget: a finished job's results still waiting here are no longer in its
/// reservation.
struct Outbox<Message> {
    enum Importance: Equatable {
        /// Pointless once late: dropped rather than queued.
        case droppable
        /// Allowed to be missing by the protocol: queued up to `optionalLimit`.
        case optional
        /// Never dropped while the connection lives.
        case required
    }

    let optionalLimit: Int
    private var queue: [(message: Message, importance: Importance, bytes: Int)] = []
    private var head = 0
    private var optionalQueued = 0
    /// Bytes of the messages queued.
    private(set) var bytes = 0
    /// Messages dropped because the connection could not take them (for the log).
    private(set) var dropped = 0

    init(optionalLimit: Int) {
        self.optionalLimit = optionalLimit
    }

    var isEmpty: Bool { head == queue.count }
    var count: Int { queue.count - head }

    /// Sends `message` now if nothing waits and `trySend` takes it (returns `true`); else
    /// queues or drops it according to `importance`.
    mutating func send<E: Error>(_ message: Message, _ importance: Importance, bytes size: Int = 0,
                                 trySend: (Message) throws(E) -> Bool) throws(E) {
        if isEmpty, try trySend(message) { return }
        switch importance {
        case .droppable:
            dropped += 1
        case .optional where optionalQueued >= optionalLimit:
            dropped += 1
        case .optional:
            optionalQueued += 1
            queue.append((message, importance, size))
            bytes += size
        case .required:
            queue.append((message, importance, size))
            bytes += size
        }
    }

    /// Sends queued messages, oldest first, until `trySend` refuses one.
    mutating func flush<E: Error>(trySend: (Message) throws(E) -> Bool) throws(E) {
        while head < queue.count, try trySend(queue[head].message) {
            if queue[head].importance == .optional { optionalQueued -= 1 }
            bytes -= queue[head].bytes
            head += 1
        }
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
        }
    }

    /// Forgets everything queued (the connection is gone).
    mutating func clear() {
        queue.removeAll()
        head = 0
        optionalQueued = 0
        bytes = 0
    }
}

extension Outbox.Importance {
    /// How much a worker → broker message matters if the connection cannot take it now.
    init<Payload>(of message: WorkerToBrokerMessage<Payload>) {
        switch message {
        case .heartbeat: self = .droppable
        case .jobStarted: self = .optional
        // At most one per attempt, and what lets the broker tell versions apart: never dropped.
        case .jobSourceOpened: self = .required
        case .jobDownload(let download): self = download.phase == .progress ? .droppable : .optional
        // A variant's final is not terminal (the set's last one is) and must arrive all the same.
        case .jobResult(let result, _): self = result.terminal || result.stage == .final ? .required : .optional
        // Small, and what gives a busy thread's credit back: never dropped.
        case .jobFailed, .jobCancelled, .ready, .disconnect, .occupancy: self = .required
        }
    }
}
