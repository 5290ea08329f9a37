import EnlargerProtocol

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
        let requestID: String
        let client: PeerID
        let spec: Enlarger_V1_ResizeSpec
        let delivery: Enlarger_V1_Delivery
        let image: Payload
        /// The latest dispatch; 0 until first dispatched.
        var attempt: UInt32 = 0
        /// The attempt the client was last told had started.
        var startedAttempt: UInt32 = 0
        /// Attempts that ended because their worker was lost.
        var losses = 0
        var degradedSent = false
        /// The worker holding the current attempt; nil while queued.
        var worker: PeerID?
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

        var inFlight: Int { jobs.count + tombstones.count }
        var freeCredit: Int { capacity - inFlight }
    }

    struct Client {
        var lastSeen: MonotonicInstant
        var jobIDs: Set<UInt64> = []
    }

    public let configuration: BrokerConfiguration
    let startedAt: MonotonicInstant
    var requests: [UInt64: Request] = [:]
    var jobIDsByRequestID: [String: UInt64] = [:]
    var queue: JobQueue
    /// In registration order, so dispatch and status are deterministic.
    var workers: [Worker] = []
    var workerIndex: [PeerID: Int] = [:]
    var clients: [PeerID: Client] = [:]
    var endedRequests: EndedRequests
    var nextJobID: UInt64 = 1
    /// Bytes of source images held by live requests (bounded by `maxLiveImageBytes`).
    var liveImageBytes = 0
    var counters = Enlarger_V1_Totals()
    var isShuttingDown = false

    /// When `tick` next has work to do (heartbeats and expiry checks). The I/O loop polls
    /// for at most the time until then.
    public private(set) var nextDeadline: MonotonicInstant

    public init(configuration: BrokerConfiguration = BrokerConfiguration(), now: MonotonicInstant) {
        self.configuration = configuration
        startedAt = now
        queue = JobQueue(capacity: min(configuration.queueLimit, 4096))
        endedRequests = EndedRequests(
            limit: configuration.endedRequestMemoryLimit, lifetime: configuration.endedRequestMemoryDuration)
        nextDeadline = now + configuration.heartbeatInterval
    }

    // MARK: - Events

    /// A multipart message from a client, without its routing id.
    public mutating func clientFrames(
        from peer: PeerID, _ frames: some RandomAccessCollection<Payload>, now: MonotonicInstant
    ) -> [Action] {
        var actions: [Action] = []
        handleClientFrames(from: peer, frames, now: now, &actions)
        return actions
    }

    /// A multipart message from a worker, without its routing id.
    public mutating func workerFrames(
        from peer: PeerID, _ frames: some RandomAccessCollection<Payload>, now: MonotonicInstant
    ) -> [Action] {
        var actions: [Action] = []
        handleWorkerFrames(from: peer, frames, now: now, &actions)
        return actions
    }

    /// Time passed. Cheap when `now` is before `nextDeadline`; call it after every wakeup.
    public mutating func tick(now: MonotonicInstant) -> [Action] {
        guard now >= nextDeadline else { return [] }
        var actions: [Action] = []
        housekeeping(now: now, &actions)
        nextDeadline = now + configuration.heartbeatInterval
        return actions
    }

    /// A send to this client failed because it is no longer connected: its live requests are
    /// cancelled as if it had gone silent.
    public mutating func clientUnreachable(_ peer: PeerID, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        counters.unroutable += 1
        clientVanished(peer, now: now, &actions)
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
            let request = endRequest(jobID, now: now)
            counters.failed += 1
            sendFailed(request, .brokerShutdown, "the broker is shutting down", &actions)
        }
        while queue.popFirst() != nil {}
        for worker in workers {
            actions.append(.sendToWorker(worker.id, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
        }
        workers.removeAll()
        workerIndex.removeAll()
        return actions
    }

    // MARK: - Introspection

    /// Counters since the broker started.
    public var totals: Enlarger_V1_Totals { counters }

    /// Accepted requests that have not ended.
    public var liveRequestCount: Int { requests.count }

    /// True when no request is live and no worker holds a credit for a cancelled job: all
    /// per-request state has been freed.
    public var isIdle: Bool {
        requests.isEmpty && jobIDsByRequestID.isEmpty && queue.isEmpty && clients.isEmpty
            && workers.allSatisfy { $0.inFlight == 0 }
    }

    /// The snapshot sent in reply to StatusRequest.
    public func status(now: MonotonicInstant) -> Enlarger_V1_StatusReply {
        var reply = Enlarger_V1_StatusReply()
        reply.workers = workers.map { worker in
            var status = Enlarger_V1_WorkerStatus()
            status.id = worker.id.description
            status.name = worker.name
            status.pid = worker.pid
            status.capacity = UInt32(worker.capacity)
            status.inFlight = UInt32(worker.inFlight)
            status.lastSeenMsAgo = now.duration(since: worker.lastSeen).milliseconds
            return status
        }
        reply.queueDepth = UInt32(queue.count)
        reply.queueLimit = UInt32(configuration.queueLimit)
        reply.inFlight = UInt32(requests.count - queue.count)
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
    mutating func endRequest(_ jobID: UInt64, now: MonotonicInstant) -> Request {
        guard let request = requests.removeValue(forKey: jobID) else {
            preconditionFailure("ending job \(jobID), which is not live")
        }
        jobIDsByRequestID[request.requestID] = nil
        liveImageBytes -= request.image.count
        if var client = clients[request.client] {
            client.jobIDs.remove(jobID)
            clients[request.client] = client.jobIDs.isEmpty ? nil : client
        }
        endedRequests.remember(request.requestID, at: now)
        return request
    }

    /// Takes a live job away from wherever it is: off the queue, or (when a worker holds it)
    /// turned into a tombstone on that worker and the worker told to stop.
    mutating func withdraw(_ jobID: UInt64, now: MonotonicInstant, _ actions: inout [Action]) {
        guard let request = requests[jobID] else { return }
        guard let workerID = request.worker, let index = workerIndex[workerID] else {
            _ = queue.remove(jobID)
            return
        }
        workers[index].jobs[jobID] = nil
        workers[index].tombstones[jobID] = Tombstone(attempt: request.attempt, cancelledAt: now)
        var cancel = Enlarger_V1_CancelJob()
        cancel.jobID = jobID
        cancel.attempt = request.attempt
        actions.append(.sendToWorker(workerID, BrokerToWorkerMessage<Payload>.cancelJob(cancel).encoded()))
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
