import Foundation
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
    // A request is what a client sees: one accepted Submit, keyed by the producer's request
    // id within its principal, live until its terminal event. A job is the work behind it,
    // keyed by the job id the broker gave it (stable across retries). Identical requests (same
    // source, spec, delivery and sharing scope) share one job, and a single-output request may
    // share one variant of a set's job (`onlyVariant`); every other job has exactly one
    // request. A job is either waiting (`waiting` knows where: a lane, quarantine or its
    // owner's held-back list) or held by one worker, whose `jobs` map names the attempt it
    // holds. A job whose
    // last request ended before the worker finished is no longer a job at all: it is a
    // tombstone on the worker, keeping the credit until the ack (or a timeout), so late
    // frames about it are recognised and dropped. Clients are tracked only while they have
    // live requests, for the liveness check.

    struct Request {
        let key: RequestKey
        var client: PeerID
        /// Changes only when a file or URL job merges into another reading the same version.
        var jobID: UInt64
        /// When it was accepted.
        let acceptedAt: MonotonicInstant
        /// The attempt the client was last told had started.
        var startedAttempt: UInt32 = 0
        /// Bytes of the image its Submit carried.
        let bytesIn: Int
        /// Bytes of results sent toward its client.
        var bytesOut = 0
        /// The batch it is an item of, and its place there.
        var batch: BatchPlace?
        /// Counted in `jobsShared` (it joined or was merged into another request's job): once.
        var sharedWork = false
        /// The lane its Submit asked for.
        var lane: Lane = .interactive
        /// Its Submit did not say no_placeholder.
        var wantsPlaceholder = true
        /// A single-output request sharing one variant of another request's set (see
        /// Sharing): it gets only that variant's final, as its own terminal Result.
        var onlyVariant: UInt32?

        var requestID: String { key.id }
    }

    struct Job {
        let spec: Enlarger_V1_ResizeSpec
        let delivery: Enlarger_V1_Delivery
        let image: Payload
        /// As the first Submit named it: the worker checks a digest, opens a file, downloads
        /// a URL.
        let source: Enlarger_V1_ImageSource
        /// The key its first Submit gave it: a digest, or a file or URL's location (nil: it is
        /// neither shared nor cached).
        let submittedKey: ShareKey?
        /// Set while identical requests may share this job (and, naming a version, its result
        /// may be cached). A file or URL job's key names its location until the worker reports
        /// the version it opened, then that version, for the attempt that opened it only.
        var shareKey: ShareKey?
        /// Its requests in the order they came; the first owns it (its id names the job to
        /// the worker, and the job is held back on its client's list).
        var requests: [RequestKey]
        /// When a worker was first given it; nil while it has never left the queue.
        var firstDispatchedAt: MonotonicInstant?
        /// When a worker was last given it.
        var lastDispatchedAt: MonotonicInstant?
        /// The latest dispatch; 0 until first dispatched.
        var attempt: UInt32 = 0
        /// The latest attempt a worker reported started.
        var startedAttempt: UInt32 = 0
        /// Attempts that ended because their worker was lost while running this job alone:
        /// only those are blamed on the job (see Quarantine).
        var losses = 0
        var degradedSent = false
        /// A request on it wants a placeholder (Job.placeholder, until one is sent).
        var placeholder = false
        var placeholderSent = false
        /// The worker holding the current attempt; nil while waiting.
        var worker: PeerID?
        /// Its worker was lost while it ran beside other jobs: it runs alone from now on.
        var quarantined = false
        /// When it last started waiting in quarantine.
        var quarantinedAt: MonotonicInstant?
        /// The lane it waits in: the highest of its requests'.
        var lane: Lane
        /// While a worker holds it: the lane and principal its place in `running` is counted
        /// under.
        var runningAs: RunningCounts.Key?
        /// A Submit's variants (VARIANTS in client.proto), each with its index; empty for one
        /// output. `variantsSent`: those already forwarded (a retry asks only for the rest).
        var variants: [Enlarger_V1_JobVariant] = []
        var variantsSent: Set<UInt32> = []
        /// The key each variant's final is cached under (a single-output request's), by index.
        var variantKeys: [ShareKey?] = []
        /// Its inline image's entry in `imageHolds` (nil: no bytes held, a file or URL source).
        var imageHold: UInt64?
        /// A file source's directory under the files root (its first Submit's principal's).
        var filesScope = ""

        var owner: RequestKey { requests[0] }
    }

    struct Tombstone {
        let attempt: UInt32
        let cancelledAt: MonotonicInstant
        /// When the worker last said the attempt's thread is still stopping (an Occupancy
        /// naming it); the cancel-ack timeout runs from here.
        var accountedAt: MonotonicInstant
    }

    struct Worker {
        let id: PeerID
        /// The key it registered with: only frames from a connection of that key are its own.
        let principal: Principal
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
        /// Threads still running jobs the worker abandoned with an earlier connection, as it
        /// last said (Ready, Occupancy): taken credits.
        var busyThreads = 0

        var inFlight: Int { jobs.count + tombstones.count + busyThreads }
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
        var requests: Set<RequestKey> = []
        /// Bytes of messages waiting at the broker for this client (it is not reading, or
        /// not connected). While any wait, the jobs only it waits for are not dispatched.
        var waitingBytes = 0
    }

    public let configuration: BrokerConfiguration
    let startedAt: MonotonicInstant
    var requests: [RequestKey: Request] = [:]
    var jobs: [UInt64: Job] = [:]
    /// Live jobs that identical requests may join, and the result cache.
    var sharing: Sharing<Payload>
    /// Each principal's own request counts (see `tally`).
    var tallies: [String: Enlarger_V1_Totals] = [:]
    /// Live batches, by principal and batch id (see Batches).
    var batches: [RequestKey: Batch] = [:]
    /// Live batches per principal (see `maxLiveBatchesPerPrincipal`), kept with `batches`.
    var liveBatchesBy: [Principal: Int] = [:]
    /// Batches whose end was decided during the current event, to settle before it returns.
    var unsettledBatches: [RequestKey] = []
    var batchDeadlines = DeadlineHeap<RequestKey, MonotonicInstant>()
    /// Recently ended batches, so a late item is refused rather than starting the batch anew.
    var endedBatches: EndedRequests
    /// Every job waiting for a worker, and in what order they go (lanes, fair share,
    /// quarantine, held back).
    var waiting = WaitingJobs()
    /// Jobs on workers, per lane and per principal (for the interactive reserve and the
    /// principals' running limits).
    var running = RunningCounts()
    /// Each principal's weight and limits, as the operator last set them.
    public private(set) var tenants: TenantPolicy
    /// In registration order, so dispatch and status are deterministic.
    var workers: [Worker] = []
    var workerIndex: [PeerID: Int] = [:]
    var clients: [PeerID: Client] = [:]
    var endedRequests: EndedRequests
    var deadlines = DeadlineHeap<RequestKey, MonotonicInstant>()
    var nextJobID: UInt64 = 1
    /// Bytes of source images held by live jobs (bounded by `maxLiveImageBytes`), and by
    /// each principal (bounded by its share): each image counted once (see `ImageHold`).
    var liveImageBytes = 0
    var liveImageBytesBy: [Principal: Int] = [:]
    /// Live requests by principal, over all its connections (bounded by its terms' `live=`).
    var liveRequestsBy: [Principal: Int] = [:]
    /// Connections named by live batches (by how many): their end still matters (see
    /// `batchConnectionGone`) once they hold no request.
    var batchPeers: [PeerID: BatchPeer] = [:]
    /// A non-admin's last status reply and when it was made (see `statusReply`).
    var recentStatus: [Principal: (at: MonotonicInstant, reply: Enlarger_V1_StatusReply)] = [:]
    var imageHolds: [UInt64: ImageHold] = [:]
    /// The fair-share cost of each live job that costs more than 1 (a set of variants, see
    /// `fairShareCost`): looked up at every dispatch, so kept apart from the jobs.
    var jobCosts: [UInt64: Int] = [:]
    /// Bytes waiting at the broker toward all clients (the sum of `Client.waitingBytes`
    /// plus those of peers with no live requests).
    var clientBytesWaiting: [PeerID: Int] = [:]
    var counters = Enlarger_V1_Totals()
    /// A moving average of how long a job takes on a worker, for `retryAfter`.
    var recentJobTime: Duration = .milliseconds(500)
    var isShuttingDown = false
    /// When the core last heard of time passing (any event). A gap longer than a heartbeat
    /// interval means the broker itself was not running: peers are not blamed for it.
    var lastActivity: MonotonicInstant
    /// When the next heartbeat round (liveness, heartbeats, expiry) is due.
    var nextHousekeeping: MonotonicInstant

    /// When `tick` next has work to do (heartbeats, liveness checks, deadlines). The I/O
    /// loop polls for at most the time until then.
    public var nextDeadline: MonotonicInstant {
        min(nextHousekeeping, deadlines.earliest ?? nextHousekeeping, batchDeadlines.earliest ?? nextHousekeeping)
    }

    public init(configuration: BrokerConfiguration = BrokerConfiguration(), now: MonotonicInstant) {
        self.configuration = configuration
        startedAt = now
        tenants = configuration.tenants
        sharing = Sharing(joinsJobs: configuration.shareJobs, cacheBytes: configuration.resultCacheBytes)
        endedBatches = EndedRequests(
            limit: configuration.endedRequestMemoryLimit, lifetime: configuration.endedRequestMemoryDuration)
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
        settleBatches(now: now, &actions)
        return actions
    }

    /// A multipart message from a worker, without its routing id.
    /// Frames from a worker connection, authenticated as `principal` (its key; `local` on ipc).
    public mutating func workerFrames(
        from peer: PeerID, principal: Principal = .local, _ frames: some RandomAccessCollection<Payload>,
        now: MonotonicInstant
    ) -> [Action] {
        var actions: [Action] = []
        noteActivity(now)
        handleWorkerFrames(from: peer, principal: principal, frames, now: now, &actions)
        settleBatches(now: now, &actions)
        return actions
    }

    /// Time passed. Cheap when `now` is before `nextDeadline`; call it after every wakeup,
    /// once what waited on the sockets has been read (liveness is judged here).
    public mutating func tick(now: MonotonicInstant) -> [Action] {
        guard now >= nextDeadline else { return [] }
        var actions: [Action] = []
        noteActivity(now)
        expireDeadlines(now: now, &actions)
        expireBatchDeadlines(now: now, &actions)
        if now >= nextHousekeeping {
            housekeeping(now: now, &actions)
            nextHousekeeping = now + configuration.heartbeatInterval
        }
        settleBatches(now: now, &actions)
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
        guard clients[peer] != nil else { return actions }
        clients[peer]!.waitingBytes = waitingBytes
        if waitingBytes == 0 && waiting.heldBackCount > 0 {
            // Every held job this client waits for goes back to the front of its lane: they
            // were at its head when held.
            let reading = waiting.allHeldBack.filter { jobID in
                jobs[jobID]?.requests.contains { requests[$0]?.client == peer } == true
            }
            releaseHeldJobs(reading)
        }
        dispatch(now: now, &actions)
        settleBatches(now: now, &actions)
        return actions
    }

    /// A client the broker can no longer reach at all (the I/O loop gave up on the messages
    /// waiting for it, notices included): its requests end, and what is sent about them is
    /// not delivered.
    public mutating func clientUnreachable(_ peer: PeerID, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        counters.unroutable += 1
        clientBytesWaiting[peer] = nil
        clientVanished(peer, reason: "the broker could not reach the client", now: now, &actions)
        batchConnectionGone(peer)
        settleBatches(now: now, &actions)
        return actions
    }

    /// The connection of a client whose id cannot come back ended (`PeerID.isGenerated`): its
    /// live requests end (their work is cancelled, as for a silent client) without a message,
    /// at once rather than after the silence limit.
    public mutating func clientDeparted(_ peer: PeerID, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        clientBytesWaiting[peer] = nil
        clientVanished(peer, reason: "the client's connection ended", notify: false, now: now, &actions)
        batchConnectionGone(peer)
        settleBatches(now: now, &actions)
        return actions
    }

    /// A client that let its results wait too long or too much (the I/O loop shed them): its
    /// live requests end with Failed{CLIENT_NOT_READING}, which waits for it to read again.
    public mutating func clientNotReading(_ peer: PeerID, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        clientVanished(peer, reason: "the client did not read its results in time", code: .clientNotReading,
                       now: now, &actions)
        settleBatches(now: now, &actions)
        return actions
    }

    /// A send to this worker failed because it is no longer connected: it is lost.
    public mutating func workerUnreachable(_ peer: PeerID, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        counters.unroutable += 1
        if let index = workerIndex[peer] {
            loseWorker(at: index, reason: "unreachable", now: now, &actions)
        }
        settleBatches(now: now, &actions)
        return actions
    }

    /// The broker is stopping: every live request fails with `BROKER_SHUTDOWN`, every worker
    /// is sent Disconnect, and from now on Submits are rejected and workers turned away.
    public mutating func shutdown(now: MonotonicInstant) -> [Action] {
        guard !isShuttingDown else { return [] }
        isShuttingDown = true
        var actions: [Action] = []
        for jobID in jobs.keys.sorted() {
            failJob(jobID, .brokerShutdown, "the broker is shutting down", now: now, &actions)
        }
        waiting.removeAll()
        running = RunningCounts()
        for worker in workers {
            actions.append(.sendToWorker(worker.id, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
        }
        workers.removeAll()
        workerIndex.removeAll()
        failLiveBatches(code: .brokerShutdown, message: "the broker is shutting down")
        settleBatches(now: now, &actions)
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
        // Per message: nanoseconds compared, not Durations divided.
        let heartbeat = configuration.heartbeatInterval.nanoseconds
        guard now.nanoseconds > lastActivity.nanoseconds &+ heartbeat &+ heartbeat / 2 else {
            if now > lastActivity { lastActivity = now }
            return
        }
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

    /// Jobs behind them (identical requests share one).
    public var liveJobCount: Int { jobs.count }

    /// True when no request is live and no worker holds a credit for a cancelled job: all
    /// per-request state has been freed.
    public var isIdle: Bool {
        requests.isEmpty && jobs.isEmpty && sharing.isIdle && batches.isEmpty && unsettledBatches.isEmpty
            && batchDeadlines.isEmpty && waiting.isEmpty && running.isEmpty && clients.isEmpty
            && deadlines.isEmpty && liveRequestsBy.isEmpty && batchPeers.isEmpty && workers.allSatisfy { $0.inFlight == 0 && !$0.reserved }
    }

    /// Whether `principal` may cancel any request and see worker details.
    func isAdmin(_ principal: Principal) -> Bool {
        principal.isAdmin || principal == .local || configuration.admins.contains(principal)
    }

    /// The operator changed the principals' weights and limits: they apply to what waits
    /// from now on (nothing running is stopped; a raised limit may dispatch more at once).
    public mutating func setTenants(_ policy: TenantPolicy, now: MonotonicInstant) -> [Action] {
        tenants = policy
        var actions: [Action] = []
        dispatch(now: now, &actions)
        return actions
    }

    /// A principal's key was removed from the client allow-list: its live requests end
    /// with Failed{UNAUTHORIZED}.
    public mutating func clientPrincipalRevoked(_ principal: Principal, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        revokeClient(principal, now: now, &actions)
        settleBatches(now: now, &actions)
        return actions
    }

    /// A key was removed from the worker allow-list: its workers are lost.
    public mutating func workerPrincipalRevoked(_ principal: Principal, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        while let index = workers.firstIndex(where: { $0.principal == principal }) {
            loseWorker(at: index, reason: "its key was revoked", charge: false, now: now, &actions)
        }
        settleBatches(now: now, &actions)
        return actions
    }

    /// The principals of the client connections with live requests, and of the workers.
    public var clientPrincipals: Set<Principal> { Set(clients.values.map(\.principal)) }
    public var workerPrincipals: Set<Principal> { Set(workers.map(\.principal)) }

    /// The principal whose connection `peer` is, while it has live requests.
    public func clientPrincipal(_ peer: PeerID) -> Principal? { clients[peer]?.principal }

    /// Whether the core still needs to hear of the end of `peer`'s connection: it has live
    /// requests, or a live batch may tell it how it ends.
    public func tracksClient(_ peer: PeerID) -> Bool { clients[peer] != nil || batchPeers[peer] != nil }

    /// How often a non-admin principal's status is made afresh: its reply scans every live
    /// request, so one made less than this ago is given again (its uptime brought up to date),
    /// and a principal asking in a loop costs the broker at most ten scans a second.
    static var statusInterval: Duration { .milliseconds(100) }

    /// The reply to a StatusRequest (see `statusInterval`).
    mutating func statusReply(for principal: Principal, now: MonotonicInstant) -> Enlarger_V1_StatusReply {
        guard !isAdmin(principal) else { return status(now: now, for: principal) }
        if let recent = recentStatus[principal], now.duration(since: recent.at) < Self.statusInterval {
            var reply = recent.reply
            reply.uptimeMs = now.duration(since: startedAt).milliseconds
            return reply
        }
        let reply = status(now: now, for: principal)
        recentStatus[principal] = (now, reply)
        return reply
    }

    /// The snapshot sent in reply to StatusRequest. Worker names and pids are for admins.
    public func status(now: MonotonicInstant, for principal: Principal = .local) -> Enlarger_V1_StatusReply {
        var reply = Enlarger_V1_StatusReply()
        let details = isAdmin(principal)
        guard details else {
            // Nothing of other principals: not their counts, not the cache's occupancy (which
            // would show another asking again for a cached image), not the workers' ids.
            let mine = requests.values.filter { $0.key.principal == principal }
            let waiting = mine.filter { request in
                guard let job = jobs[request.jobID] else { return false }
                return job.worker == nil
            }.count
            reply.queueDepth = UInt32(waiting)
            reply.queueLimit = UInt32(configuration.queueLimit)
            reply.inFlight = UInt32(mine.count - waiting)
            reply.clientBytesWaiting = UInt64(clients.filter { $0.value.principal == principal }
                .reduce(0) { $0 + (clientBytesWaiting[$1.key] ?? 0) })
            reply.clients = UInt32(clients.values.count { $0.principal == principal })
            reply.uptimeMs = now.duration(since: startedAt).milliseconds
            reply.totals = tallies[principal.name] ?? Enlarger_V1_Totals()
            return reply
        }
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
        reply.queueDepth = UInt32(waiting.count)
        reply.queueLimit = UInt32(configuration.queueLimit)
        reply.inFlight = UInt32(jobs.count - waiting.count)
        reply.cache = sharing.cacheStatus
        reply.clientBytesWaiting = UInt64(clientBytesWaiting.values.reduce(0, +))
        reply.clients = UInt32(clients.count)
        reply.uptimeMs = now.duration(since: startedAt).milliseconds
        reply.totals = counters
        return reply
    }

    // MARK: - Ending requests
    //
    // Every terminal event goes through `endRequest`, which frees the request's state and
    // remembers its id for a while so a late Cancel is answered FINISHED. A job ends in one
    // of two ways: as a whole (`endJob`: its result, its failure, the broker stopping), when
    // every request on it ends alike; or one request at a time (`endOneRequest`: a cancel, a
    // deadline, a client gone), when the job is withdrawn with its last request. Callers of
    // `endJob` have already settled the worker's credit or withdrawn the job.

    @discardableResult
    mutating func endRequest(
        _ key: RequestKey, _ outcome: RequestOutcome, job: Job, now: MonotonicInstant, _ actions: inout [Action]
    ) -> Request {
        guard let request = requests.removeValue(forKey: key) else {
            preconditionFailure("ending request \(key.id), which is not live")
        }
        count(outcome, for: key.principal)
        // Once per request: one lookup each in these tables, through its index.
        let live = liveRequestsBy.index(forKey: key.principal)!
        liveRequestsBy.values[live] -= 1
        if liveRequestsBy.values[live] == 0 { liveRequestsBy.remove(at: live) }
        let queueWait = job.firstDispatchedAt.map {
            $0 > request.acceptedAt ? $0.duration(since: request.acceptedAt) : .zero
        }
        actions.append(.report(.requestEnded(RequestEnd(
            requestID: request.requestID, jobID: request.jobID, principal: key.principal.name, outcome: outcome,
            queueWait: queueWait, duration: now.duration(since: request.acceptedAt), attempts: job.attempt,
            bytesIn: request.bytesIn, bytesOut: request.bytesOut))))
        deadlines.remove(key)
        leaveImage(job.imageHold, by: key.principal)
        // In place: a copy of the client would copy its set of requests.
        if let client = clients.index(forKey: request.client), clients.values[client].requests.remove(key) != nil,
           clients.values[client].requests.isEmpty {
            clients.remove(at: client)
        }
        endedRequests.remember(key, at: now)
        if let place = request.batch { batchItemEnded(place, request: key, outcome) }
        return request
    }

    mutating func count(_ outcome: RequestOutcome, for principal: Principal) {
        switch outcome {
        case .finished: tally(principal, .finished)
        case .failed(let code):
            tally(principal, .failed)
            if code == .deadlineExceeded { tally(principal, .deadlinesExceeded) }
        case .cancelled: tally(principal, .cancelled)
        case .rejected: preconditionFailure("a live request is never rejected")
        }
    }

    /// Counts a request's event in the broker's totals and in its principal's own, which is
    /// all a non-admin's Status shows.
    mutating func tally(_ principal: Principal, _ field: Tally, _ n: UInt64 = 1) {
        field.add(n, to: &counters)
        field.add(n, to: &tallies[principal.name, default: Enlarger_V1_Totals()])
    }

    /// The totals counted per principal (a switch: a key path costs more than the count).
    enum Tally {
        case submitted, accepted, finished, failed, cancelled, rejected, deadlinesExceeded, duplicateIds
        case cacheHits, cacheMisses, jobsShared

        func add(_ n: UInt64, to totals: inout Enlarger_V1_Totals) {
            switch self {
            case .submitted: totals.submitted += n
            case .accepted: totals.accepted += n
            case .finished: totals.finished += n
            case .failed: totals.failed += n
            case .cancelled: totals.cancelled += n
            case .rejected: totals.rejected += n
            case .deadlinesExceeded: totals.deadlinesExceeded += n
            case .duplicateIds: totals.duplicateIds += n
            case .cacheHits: totals.cacheHits += n
            case .cacheMisses: totals.cacheMisses += n
            case .jobsShared: totals.jobsShared += n
            }
        }
    }

    /// Takes a job out of the tables (its queue position, if any, is the caller's to settle).
    @discardableResult
    mutating func removeJob(_ jobID: UInt64) -> Job {
        guard let job = jobs.removeValue(forKey: jobID) else {
            preconditionFailure("removing job \(jobID), which is not live")
        }
        sharing.release(job.shareKey, heldBy: jobID)
        for key in job.variantKeys { sharing.release(key, heldBy: jobID) }
        if !job.variants.isEmpty { jobCosts[jobID] = nil }
        releaseImage(of: job, jobID)
        waiting.withdraw(jobID)
        if let key = job.runningAs { running.remove(key) }
        return job
    }

    /// An inline image the broker holds (until the last job holding it ends), counted once
    /// against the broker's image memory, and once against each principal with a live request
    /// on a job holding it (`holders`: how many). A principal is charged for the images its own
    /// requests hold, whoever else shares them: what another principal does (joins, cancels)
    /// never moves a charge onto it or off it. The jobs a set's sharers are given
    /// (`giveVariantSharersJobsOfTheirOwn`) hold the set's image with it.
    struct ImageHold {
        var holders: [Principal: Int]
        let bytes: Int
        var jobs: [UInt64]
    }

    /// Counts a new job's image as held, by the broker and by its owner's principal.
    mutating func holdImage(ofNew jobID: UInt64) {
        let job = jobs[jobID]!
        guard job.image.count > 0 else { return }  // a file or URL source: the worker reads it
        imageHolds[jobID] = ImageHold(holders: [job.owner.principal: 1], bytes: job.image.count, jobs: [jobID])
        jobs[jobID]!.imageHold = jobID
        liveImageBytes += job.image.count
        charge(job.image.count, to: job.owner.principal)
    }

    /// The bytes `principal` would be charged for joining a job holding `hold`: none when a
    /// request of its own already holds that image.
    func imageBytesToJoin(_ hold: UInt64?, by principal: Principal) -> Int {
        guard let hold, let held = imageHolds[hold], held.holders[principal] == nil else { return 0 }
        return held.bytes
    }

    /// A request of `principal` joined a job holding `hold`.
    mutating func joinImage(_ hold: UInt64?, by principal: Principal) {
        guard let hold, imageHolds[hold] != nil else { return }
        imageHolds[hold]!.holders[principal, default: 0] += 1
        if imageHolds[hold]!.holders[principal] == 1 { charge(imageHolds[hold]!.bytes, to: principal) }
    }

    /// A request of `principal` on a job holding `hold` ended (nothing once the hold is gone:
    /// its last job's end uncharged every holder).
    mutating func leaveImage(_ hold: UInt64?, by principal: Principal) {
        guard let hold, let count = imageHolds[hold]?.holders[principal] else { return }
        if count > 1 {
            imageHolds[hold]!.holders[principal] = count - 1
        } else {
            imageHolds[hold]!.holders[principal] = nil
            charge(-imageHolds[hold]!.bytes, to: principal)
        }
    }

    /// `jobID` holds the image of `hold` too (the same bytes and requests: not counted again).
    mutating func shareImage(_ hold: UInt64?, with jobID: UInt64) {
        guard let hold else { return }
        imageHolds[hold]!.jobs.append(jobID)
        jobs[jobID]!.imageHold = hold
    }

    /// `job` (`jobID`, taken out of the tables) holds its image no more; with the last job
    /// holding it, the image goes, and so does every holder's charge.
    mutating func releaseImage(of job: Job, _ jobID: UInt64) {
        guard let hold = job.imageHold else { return }
        imageHolds[hold]!.jobs.removeAll { $0 == jobID }
        if imageHolds[hold]!.jobs.isEmpty {
            let released = imageHolds.removeValue(forKey: hold)!
            liveImageBytes -= released.bytes
            for principal in released.holders.keys { charge(-released.bytes, to: principal) }
        }
    }

    private mutating func charge(_ bytes: Int, to principal: Principal) {
        liveImageBytesBy[principal, default: 0] += bytes
        if liveImageBytesBy[principal] == 0 { liveImageBytesBy[principal] = nil }
    }

    /// Ends every request on the job alike, each told by its own `message`.
    mutating func endJob(
        _ jobID: UInt64, _ outcome: RequestOutcome, now: MonotonicInstant, _ actions: inout [Action],
        message: (Request) -> BrokerToClientMessage<Payload>
    ) {
        let job = removeJob(jobID)
        for key in job.requests {
            guard let request = requests[key] else { continue }
            send(message(request), to: request, &actions)
            endRequest(key, outcome, job: job, now: now, &actions)
        }
    }

    mutating func failJob(
        _ jobID: UInt64, _ code: Enlarger_V1_ErrorCode, _ message: String, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        endJob(jobID, .failed(code), now: now, &actions) { request in
            .failed(.with {
                $0.requestID = request.requestID
                $0.code = code
                $0.message = message
            })
        }
    }

    /// Ends one request. The job goes on for the others; with its last request it is
    /// withdrawn (off its queue, or its worker told to stop).
    @discardableResult
    mutating func endOneRequest(
        _ key: RequestKey, _ outcome: RequestOutcome, now: MonotonicInstant, _ actions: inout [Action]
    ) -> Request {
        guard let jobID = requests[key]?.jobID, jobs[jobID] != nil else {
            preconditionFailure("ending request \(key.id), which is not live")
        }
        if jobs[jobID]!.requests.count == 1 {
            withdraw(jobID, now: now, &actions)
            let job = removeJob(jobID)
            return endRequest(key, outcome, job: job, now: now, &actions)
        }
        // The job changes hands when its owner leaves: a held job goes back to its lane,
        // where dispatch looks at its remaining clients afresh, and a waiting job now waits
        // for the new owner's principal.
        let wasOwner = jobs[jobID]!.owner == key
        jobs[jobID]!.requests.removeAll { $0 == key }
        // A set's job left, before any worker has it, only to requests sharing its variants:
        // they are better served by a job per variant than by every variant of the set.
        if jobs[jobID]!.worker == nil, leftOnlyToVariantSharers(jobID) {
            giveVariantSharersJobsOfTheirOwn(jobID)
            return endRequest(key, outcome, job: removeJob(jobID), now: now, &actions)
        }
        if wasOwner { rehome(jobID) }
        return endRequest(key, outcome, job: jobs[jobID]!, now: now, &actions)
    }

    /// Held jobs back to the front of their lanes, the oldest (smallest id) first.
    mutating func releaseHeldJobs(_ jobIDs: [UInt64]) {
        waiting.releaseHeldBack(jobIDs.filter { jobs[$0] != nil }, lane: { jobs[$0]!.lane },
                                principal: { jobs[$0]!.owner.principal })
    }

    /// A waiting job whose owner changed: a held one goes back to its lane, one in a lane
    /// moves to the new owner's principal (at the front: it had waited its turn).
    mutating func rehome(_ jobID: UInt64) {
        guard let job = jobs[jobID], let place = waiting.place(of: jobID) else { return }
        switch place {
        case .heldBack:
            releaseHeldJobs([jobID])
        case .lane(let lane, let principal) where principal != job.owner.principal:
            waiting.withdraw(jobID)
            waiting.place(jobID, lane: lane, principal: job.owner.principal, atFront: true)
        case .lane, .quarantine:
            break
        }
    }

    /// Takes a live job away from wherever it is: off a queue or a client's held-back list,
    /// or (when a worker holds it) turned into a tombstone on that worker and the worker
    /// told to stop.
    mutating func withdraw(_ jobID: UInt64, now: MonotonicInstant, _ actions: inout [Action]) {
        guard let job = jobs[jobID] else { return }
        guard let workerID = job.worker, let index = workerIndex[workerID] else {
            waiting.withdraw(jobID)
            return
        }
        if let key = job.runningAs { running.remove(key) }
        jobs[jobID]!.runningAs = nil
        workers[index].jobs[jobID] = nil
        workers[index].tombstones[jobID] = Tombstone(attempt: job.attempt, cancelledAt: now, accountedAt: now)
        var cancel = Enlarger_V1_CancelJob()
        cancel.jobID = jobID
        cancel.attempt = job.attempt
        actions.append(.sendToWorker(workerID, BrokerToWorkerMessage<Payload>.cancelJob(cancel).encoded()))
    }

    /// Requests still live at their deadline fail with `DEADLINE_EXCEEDED`; a job left with
    /// no request is withdrawn and its worker told to stop.
    mutating func expireDeadlines(now: MonotonicInstant, _ actions: inout [Action]) {
        while let key = deadlines.popExpired(at: now) {
            guard requests[key] != nil else { continue }
            let request = endOneRequest(key, .failed(.deadlineExceeded), now: now, &actions)
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
        actions.append(.sendToClient(request.client, BrokerToClientMessage<Payload>.failed(failed).encoded(),
                                     for: request.key.principal, shed: .keep))
    }
}
