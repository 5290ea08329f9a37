import EnlargerProtocol
import Timekeeping

/// The broker's decisions as a pure state machine: no sockets, no clock, no threads.
///
/// Feed it what arrived and the time (`clientFrames`, `workerFrames`, `tick`, and the
/// unreachable-peer and shutdown events); it returns the `BrokerAction`s to perform, in
/// order. `BrokerService` is the loop around it that moves bytes; tests drive it directly
/// with a hand-made clock.
///
/// `Payload` is the frame type. The core reads only the tag and header frames; image frames
/// are stored and handed back untouched, so the service can pass ZeroMQ messages through
/// without copying them while tests use `[UInt8]`.
///
/// Guarantees, each enforced here and nowhere else:
/// - every accepted request ends with exactly one terminal event to its submitter (a
///   terminal Result, Failed or Cancelled), and nothing about it follows;
/// - a degraded result is forwarded at most once and only before the terminal one;
/// - a worker never holds more jobs than its capacity;
/// - per-request state is freed at the terminal event; what outlives it (cancelled jobs
///   awaiting the worker's ack, recently ended ids) is bounded in count and age.
///
/// Not thread-safe: one thread (the service's loop) owns it.
public struct BrokerCore<Payload: FrameBytes> {
    public typealias Action = BrokerAction<Payload>

    // MARK: - State
    //
    // A live request is one that was accepted and has not ended. It is keyed by the job id
    // the broker gave it (stable across retries) and indexed by the producer's request id.
    // It is either waiting in `queue` (worker == nil) or held by one worker, whose `jobs`
    // map names the attempt it holds. A cancelled job that its worker has not acknowledged
    // yet is no longer a request at all: it is a tombstone on the worker, keeping the credit
    // until the ack (or a timeout), so late frames about it are recognised and dropped.
    // Clients are tracked only while they have live requests, for the liveness check.

    struct Request {
        let key: RequestKey
        var client: PeerID
        let spec: Enlarger_V1_ResizeSpec
        let delivery: Enlarger_V1_Delivery
        let image: Payload
        let deadline: MonotonicInstant
        /// When it was accepted.
        let acceptedAt: MonotonicInstant
        /// When a worker was first given it; nil while it has never left the queue.
        var firstDispatchedAt: MonotonicInstant?
        /// Bytes of results sent toward its client.
        var bytesOut = 0
        /// The latest dispatch; 0 until first dispatched.
        var attempt: UInt32 = 0
        /// The attempt the client was last told had started.
        var startedAttempt: UInt32 = 0
        /// Attempts that ended because their worker was lost while running this job alone:
        /// only those are blamed on the job (see Quarantine).
        var losses = 0
        var degradedSent = false
        /// The worker holding the current attempt; nil while waiting.
        var worker: PeerID?
        /// Its worker was lost while it ran beside other jobs: it runs alone from now on.
        var quarantined = false
        /// Taken off the queue because its client is not reading; waits in the client's
        /// `heldBack` list.
        var heldBack = false
        /// When it last started waiting in `quarantine`.
        var quarantinedAt: MonotonicInstant?

        var requestID: String { key.id }
    }

    struct Tombstone {
        let attempt: UInt32
        let cancelledAt: MonotonicInstant
    }

    struct Worker {
        let id: PeerID
        let name: String
        let pid: UInt32
        let capacity: Int
        var lastSeen: MonotonicInstant
        /// Live jobs held, job id → attempt.
        var jobs: [UInt64: UInt32] = [:]
        /// Cancelled jobs awaiting their terminal frame, each still holding a credit.
        var tombstones: [UInt64: Tombstone] = [:]
        /// A quarantined job this worker runs alone: it gets nothing else while the job
        /// holds its credit (live or cancelled and not yet acknowledged).
        var exclusiveJob: UInt64?
        /// Kept free for a quarantined job: it gets no new jobs until it is idle.
        var reserved = false

        var inFlight: Int { jobs.count + tombstones.count }
        var freeCredit: Int { capacity - inFlight }
        var isExclusive: Bool {
            guard let job = exclusiveJob else { return false }
            return jobs[job] != nil || tombstones[job] != nil
        }
        var takesOrdinaryJobs: Bool { !isExclusive && !reserved && freeCredit > 0 }
    }

    struct Client {
        let principal: Principal
        var lastSeen: MonotonicInstant
        var jobIDs: Set<UInt64> = []
        /// Bytes of messages waiting at the broker for this client (it is not reading, or
        /// not connected). While any wait, its queued jobs are not dispatched.
        var waitingBytes = 0
        /// Its jobs taken off the queue while it was not reading, oldest first.
        var heldBack: [UInt64] = []
    }

    public let configuration: BrokerConfiguration
    let startedAt: MonotonicInstant
    var requests: [UInt64: Request] = [:]
    var jobIDsByKey: [RequestKey: UInt64] = [:]
    var queue: JobQueue
    /// Jobs that must run alone on a worker, oldest first (see Quarantine).
    var quarantine: JobQueue
    /// In registration order, so dispatch and status are deterministic.
    var workers: [Worker] = []
    var workerIndex: [PeerID: Int] = [:]
    var clients: [PeerID: Client] = [:]
    var endedRequests: EndedRequests
    var deadlines = DeadlineHeap<UInt64, MonotonicInstant>()
    var nextJobID: UInt64 = 1
    /// Bytes of source images held by live requests (bounded by `maxLiveImageBytes`).
    var liveImageBytes = 0
    /// Bytes waiting at the broker toward all clients (the sum of `Client.waitingBytes`
    /// plus those of peers with no live requests).
    var clientBytesWaiting: [PeerID: Int] = [:]
    var counters = Enlarger_V1_Totals()
    var isShuttingDown = false
    /// When the core last heard of time passing (any event). A gap longer than a heartbeat
    /// interval means the broker itself was not running: peers are not blamed for it.
    var lastActivity: MonotonicInstant
    /// When the next heartbeat round (liveness, heartbeats, expiry) is due.
    var nextHousekeeping: MonotonicInstant

    /// When `tick` next has work to do (heartbeats, liveness checks, deadlines). The I/O
    /// loop polls for at most the time until then.
    public var nextDeadline: MonotonicInstant {
        min(nextHousekeeping, deadlines.earliest ?? nextHousekeeping)
    }

    public init(configuration: BrokerConfiguration = BrokerConfiguration(), now: MonotonicInstant) {
        self.configuration = configuration
        startedAt = now
        queue = JobQueue(capacity: min(configuration.queueLimit, 4096))
        quarantine = JobQueue(capacity: 16)
        endedRequests = EndedRequests(
            limit: configuration.endedRequestMemoryLimit, lifetime: configuration.endedRequestMemoryDuration)
        lastActivity = now
        nextHousekeeping = now + configuration.heartbeatInterval
    }

    // MARK: - Events

    /// A multipart message from a client, without its routing id. `principal` is who the
    /// connection authenticated as (`.local` on ipc).
    public mutating func clientFrames(
        from peer: PeerID, principal: Principal = .local, _ frames: some RandomAccessCollection<Payload>,
        now: MonotonicInstant
    ) -> [Action] {
        var actions: [Action] = []
        noteActivity(now)
        handleClientFrames(from: peer, principal: principal, frames, now: now, &actions)
        return actions
    }

    /// A multipart message from a worker, without its routing id.
    public mutating func workerFrames(
        from peer: PeerID, _ frames: some RandomAccessCollection<Payload>, now: MonotonicInstant
    ) -> [Action] {
        var actions: [Action] = []
        noteActivity(now)
        handleWorkerFrames(from: peer, frames, now: now, &actions)
        return actions
    }

    /// Time passed. Cheap when `now` is before `nextDeadline`; call it after every wakeup,
    /// once what waited on the sockets has been read (liveness is judged here).
    public mutating func tick(now: MonotonicInstant) -> [Action] {
        guard now >= nextDeadline else { return [] }
        var actions: [Action] = []
        noteActivity(now)
        expireDeadlines(now: now, &actions)
        if now >= nextHousekeeping {
            housekeeping(now: now, &actions)
            nextHousekeeping = now + configuration.heartbeatInterval
        }
        return actions
    }

    /// How many bytes now wait at the broker for this client because it is not reading or
    /// not connected (0 once everything went out). While any wait, its queued work is not
    /// dispatched, so a slow consumer gets backpressure instead of growing the broker.
    public mutating func clientBacklog(_ peer: PeerID, waitingBytes: Int, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        let before = clientBytesWaiting[peer] ?? 0
        if waitingBytes > 0 && before == 0 { counters.clientSendsDeferred += 1 }
        clientBytesWaiting[peer] = waitingBytes > 0 ? waitingBytes : nil
        guard var client = clients[peer] else { return actions }
        client.waitingBytes = waitingBytes
        if waitingBytes == 0, !client.heldBack.isEmpty {
            // Back to the front, oldest first: they were at the head of the queue when held.
            for jobID in client.heldBack.reversed() where requests[jobID]?.heldBack == true {
                requests[jobID]?.heldBack = false
                queue.prepend(jobID)
            }
            client.heldBack.removeAll()
        }
        clients[peer] = client
        dispatch(now: now, &actions)
        return actions
    }

    /// A client the broker can no longer reach at all (the I/O loop gave up on the messages
    /// waiting for it): its requests end as if it had gone silent.
    public mutating func clientUnreachable(_ peer: PeerID, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        counters.unroutable += 1
        clientBytesWaiting[peer] = nil
        clientVanished(peer, reason: "the broker could not reach the client", now: now, &actions)
        return actions
    }

    /// A send to this worker failed because it is no longer connected: it is lost.
    public mutating func workerUnreachable(_ peer: PeerID, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        counters.unroutable += 1
        if let index = workerIndex[peer] {
            loseWorker(at: index, reason: "unreachable", now: now, &actions)
        }
        return actions
    }

    /// The broker is stopping: every live request fails with `BROKER_SHUTDOWN`, every worker
    /// is sent Disconnect, and from now on Submits are rejected and workers turned away.
    public mutating func shutdown(now: MonotonicInstant) -> [Action] {
        guard !isShuttingDown else { return [] }
        isShuttingDown = true
        var actions: [Action] = []
        for jobID in requests.keys.sorted() {
            let request = endRequest(jobID, .failed(.brokerShutdown), now: now, &actions)
            sendFailed(request, .brokerShutdown, "the broker is shutting down", &actions)
        }
        while queue.popFirst() != nil {}
        while quarantine.popFirst() != nil {}
        for worker in workers {
            actions.append(.sendToWorker(worker.id, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
        }
        workers.removeAll()
        workerIndex.removeAll()
        return actions
    }

    /// Peers are judged by silence only while the broker is listening: when the loop itself
    /// did not run for longer than a heartbeat interval (the process was paused or starved),
    /// that gap is forgiven to every peer.
    ///
    /// The loop runs at least once per interval (its poll never waits past `nextDeadline`),
    /// so a gap of more than 1.5 intervals is a stall; the time beyond one interval is
    /// forgiven.
    mutating func noteActivity(_ now: MonotonicInstant) {
        let stall = now.duration(since: lastActivity + configuration.heartbeatInterval)
        if stall > configuration.heartbeatInterval / 2 {
            for index in workers.indices { workers[index].lastSeen = workers[index].lastSeen + stall }
            for peer in clients.keys { clients[peer]!.lastSeen = clients[peer]!.lastSeen + stall }
        }
        if now > lastActivity { lastActivity = now }
    }

    // MARK: - Introspection

    /// Counters since the broker started.
    public var totals: Enlarger_V1_Totals { counters }

    /// Accepted requests that have not ended.
    public var liveRequestCount: Int { requests.count }

    /// True when no request is live and no worker holds a credit for a cancelled job: all
    /// per-request state has been freed.
    public var isIdle: Bool {
        requests.isEmpty && jobIDsByKey.isEmpty && queue.isEmpty && quarantine.isEmpty && clients.isEmpty
            && deadlines.isEmpty && workers.allSatisfy { $0.inFlight == 0 && !$0.reserved }
    }

    /// Whether `principal` may cancel any request and see worker details.
    func isAdmin(_ principal: Principal) -> Bool {
        principal.isAdmin || principal == .local || configuration.admins.contains(principal)
    }

    /// The snapshot sent in reply to StatusRequest. Worker names and pids are for admins.
    public func status(now: MonotonicInstant, for principal: Principal = .local) -> Enlarger_V1_StatusReply {
        var reply = Enlarger_V1_StatusReply()
        let details = isAdmin(principal)
        reply.workers = workers.map { worker in
            var status = Enlarger_V1_WorkerStatus()
            status.id = worker.id.description
            if details {
                status.name = worker.name
                status.pid = worker.pid
            }
            status.capacity = UInt32(worker.capacity)
            status.inFlight = UInt32(worker.inFlight)
            status.lastSeenMsAgo = now.duration(since: worker.lastSeen).milliseconds
            return status
        }
        let waiting = queue.count + quarantine.count + clients.values.reduce(0) { $0 + $1.heldBack.count }
        reply.queueDepth = UInt32(waiting)
        reply.queueLimit = UInt32(configuration.queueLimit)
        reply.inFlight = UInt32(requests.count - waiting)
        reply.clientBytesWaiting = UInt64(clientBytesWaiting.values.reduce(0, +))
        reply.clients = UInt32(clients.count)
        reply.uptimeMs = now.duration(since: startedAt).milliseconds
        reply.totals = counters
        return reply
    }

    // MARK: - Ending requests
    //
    // Every terminal event goes through `endRequest`, which frees all per-request state and
    // remembers the id for a while so a late Cancel is answered FINISHED. Callers have
    // already taken the job off the queue or settled its worker's credit.

    @discardableResult
    mutating func endRequest(
        _ jobID: UInt64, _ outcome: RequestOutcome, now: MonotonicInstant, _ actions: inout [Action]
    ) -> Request {
        guard let request = requests.removeValue(forKey: jobID) else {
            preconditionFailure("ending job \(jobID), which is not live")
        }
        switch outcome {
        case .finished: counters.finished += 1
        case .failed(let code):
            counters.failed += 1
            if code == .deadlineExceeded { counters.deadlinesExceeded += 1 }
        case .cancelled: counters.cancelled += 1
        case .rejected: preconditionFailure("a live request is never rejected")
        }
        actions.append(.report(.requestEnded(RequestEnd(
            requestID: request.requestID, jobID: jobID, principal: request.key.principal.name, outcome: outcome,
            queueWait: request.firstDispatchedAt.map { $0.duration(since: request.acceptedAt) },
            duration: now.duration(since: request.acceptedAt), attempts: request.attempt,
            bytesIn: request.image.count, bytesOut: request.bytesOut))))
        jobIDsByKey[request.key] = nil
        liveImageBytes -= request.image.count
        deadlines.remove(jobID)
        if var client = clients[request.client] {
            client.jobIDs.remove(jobID)
            if request.heldBack { client.heldBack.removeAll { $0 == jobID } }
            clients[request.client] = client.jobIDs.isEmpty ? nil : client
        }
        endedRequests.remember(request.key, at: now)
        return request
    }

    /// Takes a live job away from wherever it is: off a queue or a client's held-back list,
    /// or (when a worker holds it) turned into a tombstone on that worker and the worker
    /// told to stop.
    mutating func withdraw(_ jobID: UInt64, now: MonotonicInstant, _ actions: inout [Action]) {
        guard let request = requests[jobID] else { return }
        guard let workerID = request.worker, let index = workerIndex[workerID] else {
            if !request.heldBack {
                if !queue.remove(jobID) { _ = quarantine.remove(jobID) }
            }
            return
        }
        workers[index].jobs[jobID] = nil
        workers[index].tombstones[jobID] = Tombstone(attempt: request.attempt, cancelledAt: now)
        var cancel = Enlarger_V1_CancelJob()
        cancel.jobID = jobID
        cancel.attempt = request.attempt
        actions.append(.sendToWorker(workerID, BrokerToWorkerMessage<Payload>.cancelJob(cancel).encoded()))
    }

    /// Requests still live at their deadline fail with `DEADLINE_EXCEEDED`; their workers
    /// are told to stop.
    mutating func expireDeadlines(now: MonotonicInstant, _ actions: inout [Action]) {
        while let jobID = deadlines.popExpired(at: now) {
            guard requests[jobID] != nil else { continue }
            withdraw(jobID, now: now, &actions)
            let request = endRequest(jobID, .failed(.deadlineExceeded), now: now, &actions)
            sendFailed(request, .deadlineExceeded, "the request's deadline passed before it ended", &actions)
        }
        dispatch(now: now, &actions)
    }

    func sendFailed(
        _ request: Request, _ code: Enlarger_V1_ErrorCode, _ message: String, _ actions: inout [Action]
    ) {
        var failed = Enlarger_V1_Failed()
        failed.requestID = request.requestID
        failed.code = code
        failed.message = message
        actions.append(.sendToClient(request.client, BrokerToClientMessage<Payload>.failed(failed).encoded()))
    }
}
