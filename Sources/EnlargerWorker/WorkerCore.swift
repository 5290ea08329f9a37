import EnlargerProtocol
import Foundation
import Imaging

/// The worker's decisions as a pure state machine: no sockets, no clock, no threads.
///
/// Feed it what happened — a message from the broker, mail from a job thread, the time
/// (`tick`) — and it returns the `WorkerAction`s to perform, in order. `WorkerLoop` is the
/// poll-and-perform loop around it; tests drive it directly with a hand-made clock.
///
/// Rules, each enforced here and nowhere else:
/// - **Registration and liveness.** Every new connection starts with `Ready{capacity}`; a
///   heartbeat goes out every interval; after `missedHeartbeats` intervals without a word
///   from the broker, or on its `Disconnect`, every job is abandoned without a word about it
///   and the worker registers again: at once after silence, one interval later after
///   `Disconnect`.
/// - **Frames per job.** `JobStarted`, then the results the delivery asks for, then exactly
///   one terminal frame per attempt (a terminal `JobResult`, `JobFailed` or `JobCancelled`),
///   then nothing. Once a `CancelJob` has reached the core, nothing but `JobCancelled` is sent
///   for the job, when its thread has stopped. A `Job` the worker already runs is ignored.
/// - **Honest occupancy.** A cancelled job keeps its thread (and its credit at the broker)
///   until the thread returns; a stage that cannot be interrupted may take a while. Every
///   heartbeat is followed by an `Occupancy` naming such jobs while there are any, so the
///   broker knows the thread is at work rather than stuck, and counting the threads still
///   busy with abandoned jobs, which `Ready` states too: the broker never gives this worker
///   more jobs than it has free threads. When an abandoned job's thread returns, an
///   `Occupancy` with the new count goes out at once.
/// - **Memory.** A file or URL job's thread first asks for its source bytes (the file's
///   size, or the input limit for a download, lowered to its Content-Length) and reads
///   nothing before they are admitted. A job's thread reads the header and reports the
///   estimated peak before it allocates pixel memory; the job then waits, first come first served, until the budget
///   has room (see `MemoryAdmission`), and fails at once with `TOO_LARGE` when its estimate
///   exceeds the whole budget. A job keeps its share until its thread has returned and the
///   buffers it freed off-thread are gone, abandoned jobs included: until then the memory is
///   still in use.
///
/// Not thread-safe: one thread (the loop's) owns it.
struct WorkerCore<Payload: FrameBytes> {
    typealias Action = WorkerAction<Payload>
    typealias Instant = ContinuousClock.Instant

    struct Configuration {
        var capacity: Int
        var name: String
        var pid: UInt32
        var heartbeatInterval: Duration
        var missedHeartbeats: Int
        var memoryBudget: Int

        var silenceLimit: Duration { heartbeatInterval * missedHeartbeats }
    }

    /// The current connection's timers.
    struct Connection {
        var lastHeard: Instant
        var nextHeartbeat: Instant
        /// The broker has sent something on this connection since `Ready`: it took the
        /// registration (a broker that refuses a worker, or never sees it, sends nothing).
        var registered = false
    }

    enum Phase: Equatable {
        /// The job thread is reading the header; nothing is reserved yet.
        case preparing
        /// Estimated (or, for a file or URL, its source size known) and queued for memory.
        case waitingForMemory
        /// A file or URL job admitted for its source bytes: reading them, then estimating.
        case reading
        /// A file or URL job told to drop its bytes (see `MemoryAdmission`): it asks for them
        /// again once it has.
        case yielding
        /// Admitted: its estimate is reserved and results may be sent.
        case running
        /// `CancelJob` arrived; nothing more is sent until `JobCancelled`.
        case cancelling
        /// The terminal frame went out; the job thread is finishing.
        case terminalSent
    }

    struct Job {
        let key: JobKey
        let requestID: String
        let control: JobControl
        /// Its results come from bytes known to be the version its source names: an inline
        /// image checked against its digest before any result is made, or a file that did not
        /// change while it was read. Only such results may be cached (`digest_verified`).
        var verified = false
        /// How it ended for the broker, once its terminal frame went out.
        var ending: JobEnd.Outcome?
        var phase: Phase = .preparing
        /// The estimate reserved in `admission` while admitted.
        var reserved = 0
        /// The connection it came on was replaced: nothing more is sent about it.
        var abandoned = false
        /// What its first JobSourceOpened named (sent once per attempt), and whether a later
        /// reading (after yielding its bytes) opened another version: its results then name
        /// no version and are not cached.
        var identity: Data?
        var identityChanged = false

        /// Frames about it other than its terminal one may still go out.
        var isSending: Bool {
            !abandoned && ([.preparing, .waitingForMemory, .reading, .yielding, .running] as [Phase]).contains(phase)
        }
    }

    // State. Internal rather than private only so that WorkerCore+Jobs.swift can reach it;
    // nothing outside the core writes it.
    let configuration: Configuration
    private(set) var connection: Connection?
    /// When to register again after a broker `Disconnect`.
    private(set) var reconnectAt: Instant?
    private(set) var isStopped = false
    /// Jobs whose thread has not returned, abandoned ones included.
    var jobs: [JobToken: Job] = [:]
    /// Live (not abandoned) jobs by their wire key.
    var tokens: [JobKey: JobToken] = [:]
    var lastToken: JobToken = 0
    var admission: MemoryAdmission
    /// Reservations of jobs whose threads returned, until their freed buffers are gone.
    var freeing: [JobToken: Int] = [:]

    init(configuration: Configuration) {
        self.configuration = configuration
        admission = MemoryAdmission(budget: configuration.memoryBudget)
    }

    // MARK: - Introspection

    /// The estimated peak memory of the jobs admitted whose buffers are not all freed yet.
    var memoryInUse: Int { admission.inUse }
    /// Jobs waiting for memory.
    var jobsWaitingForMemory: Int { admission.waitingCount }
    /// Threads still running jobs abandoned with an earlier connection (or queued to run
    /// them, briefly): busy, though the broker holds no job for them.
    var busyThreads: Int { min(configuration.capacity, jobs.values.count { $0.abandoned }) }
    /// Jobs the broker cancelled on this connection whose threads have not returned.
    var stoppingAttempts: [JobKey] {
        jobs.values.filter { !$0.abandoned && $0.phase == .cancelling }.map(\.key)
            .sorted { ($0.jobID, $0.attempt) < ($1.jobID, $1.attempt) }
    }
    /// What the broker is told about threads busy beyond its live jobs.
    var occupancy: Enlarger_V1_Occupancy {
        var occupancy = Enlarger_V1_Occupancy()
        occupancy.busyThreads = UInt32(busyThreads)
        occupancy.stopping = stoppingAttempts.map { key in
            var attempt = Enlarger_V1_JobAttempt()
            attempt.jobID = key.jobID
            attempt.attempt = key.attempt
            return attempt
        }
        return occupancy
    }
    /// Connected, and the broker has answered since this connection's `Ready`.
    var isRegistered: Bool { !isStopped && connection?.registered == true }

    /// When `tick` next has something to do: a heartbeat, the silence limit, a reconnect.
    var nextDeadline: Instant? {
        guard !isStopped else { return nil }
        let timers = [connection?.nextHeartbeat, connection.map { $0.lastHeard + configuration.silenceLimit }, reconnectAt]
        return timers.compactMap { $0 }.min()
    }

    // MARK: - Events

    /// The service starts: connect and register.
    mutating func start(now: Instant) -> [Action] {
        var actions: [Action] = []
        connect(now: now, &actions)
        return actions
    }

    /// Time passed. Call it after every wakeup.
    mutating func tick(now: Instant) -> [Action] {
        guard !isStopped else { return [] }
        var actions: [Action] = []
        if let due = reconnectAt, now >= due {
            reconnectAt = nil
            connect(now: now, &actions)
        }
        guard let current = connection else { return actions }
        let silence = now - current.lastHeard
        if silence >= configuration.silenceLimit {
            let abandoned = abandonAll(&actions)
            actions.append(.report(.brokerSilent(silence, abandoned: abandoned)))
            connect(now: now, &actions)
        } else if now >= current.nextHeartbeat {
            actions.append(.send(.heartbeat))
            if busyThreads > 0 || !stoppingAttempts.isEmpty { actions.append(.send(.occupancy(occupancy))) }
            let next = now + configuration.heartbeatInterval
            connection?.nextHeartbeat = next
        }
        return actions
    }

    /// A message arrived on the current connection.
    mutating func received(_ message: BrokerToWorkerMessage<Payload>, now: Instant) -> [Action] {
        guard !isStopped, connection != nil else { return [] }
        connection?.lastHeard = now
        connection?.registered = true
        var actions: [Action] = []
        switch message {
        case .job(let job, let image):
            startJob(job, image: image, &actions)
        case .cancelJob(let cancel):
            cancelJob(JobKey(jobID: cancel.jobID, attempt: cancel.attempt), &actions)
        case .heartbeat:
            break
        case .disconnect:
            let abandoned = abandonAll(&actions)
            actions.append(.report(.brokerDisconnected(abandoned: abandoned)))
            actions.append(.closeConnection)
            connection = nil
            reconnectAt = now + configuration.heartbeatInterval
        case .error(let error):
            actions.append(.report(.brokerError(error.code, error.message)))
        }
        return actions
    }

    /// Something arrived on the current connection that is not a valid message; it still
    /// shows that the broker is there.
    mutating func receivedMalformed(_ reason: String, now: Instant) -> [Action] {
        guard !isStopped, connection != nil else { return [] }
        connection?.lastHeard = now
        return [.report(.malformed(reason))]
    }

    /// The service is leaving: `Disconnect` (the broker re-queues this worker's jobs) and
    /// every job stopped without a word. Nothing happens after this.
    mutating func stop() -> [Action] {
        guard !isStopped else { return [] }
        var actions: [Action] = []
        if connection != nil { actions.append(.send(.disconnect)) }
        _ = abandonAll(&actions)
        isStopped = true
        reconnectAt = nil
        return actions
    }

    // MARK: - Connection

    private mutating func connect(now: Instant, _ actions: inout [Action]) {
        actions.append(.connect)
        connection = Connection(lastHeard: now, nextHeartbeat: now + configuration.heartbeatInterval)
        var ready = Enlarger_V1_Ready()
        ready.capacity = UInt32(configuration.capacity)
        ready.workerName = configuration.name
        ready.pid = configuration.pid
        // Threads still finishing abandoned jobs are not free: the broker counts them taken.
        ready.busyThreads = UInt32(busyThreads)
        actions.append(.send(.ready(ready)))
        actions.append(.report(.registering(capacity: configuration.capacity, memoryBudget: configuration.memoryBudget)))
    }

    /// Stops every live job without telling the broker (which is gone, or has forgotten this
    /// worker). Each keeps its memory until its thread returns. Returns how many there were.
    private mutating func abandonAll(_ actions: inout [Action]) -> Int {
        var count = 0
        for token in jobs.keys.sorted() where !jobs[token]!.abandoned {
            jobs[token]!.abandoned = true
            if jobs[token]!.phase == .waitingForMemory { admission.withdraw(token) }
            actions.append(.cancel(jobs[token]!.control))
            count += 1
        }
        tokens.removeAll()
        return count
    }
}
