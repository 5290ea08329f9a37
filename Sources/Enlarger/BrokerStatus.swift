import EnlargerProtocol

/// A snapshot of the broker (client.proto's `StatusReply`).
public struct BrokerStatus: Sendable, Equatable {
    public struct Worker: Sendable, Equatable {
        /// The worker's routing id, hex encoded.
        public var id: String
        public var name: String
        public var pid: Int
        public var capacity: Int
        /// Jobs holding one of its credits, including cancelled jobs not yet acknowledged.
        public var inFlight: Int
        public var lastSeen: Duration
    }

    /// Counters since the broker started; see client.proto's `Totals` for their relations.
    public struct Totals: Sendable, Equatable {
        public var submitted: UInt64
        public var accepted: UInt64
        public var finished: UInt64
        public var failed: UInt64
        public var cancelled: UInt64
        public var rejected: UInt64
        public var duplicateIDs: UInt64
        public var lateResultsDropped: UInt64
        public var malformedDropped: UInt64
        public var workersLost: UInt64
        public var workersDisconnected: UInt64
        public var jobsRequeued: UInt64
        public var clientsVanished: UInt64
        public var unroutable: UInt64
        public var cancelAcksTimedOut: UInt64
        public var deadlinesExceeded: UInt64
        public var clientSendsDeferred: UInt64
        public var jobsQuarantined: UInt64
        public var protocolBreaches: UInt64
        /// Requests answered from the result cache; requests with a digest it could not
        /// answer; requests that joined an identical request's job.
        public var cacheHits: UInt64
        public var cacheMisses: UInt64
        public var jobsShared: UInt64
        /// Batches that ended, by outcome.
        public var batchesCompleted: UInt64
        public var batchesFailed: UInt64
        public var batchesCancelled: UInt64
    }

    /// The broker's result cache: results held and their bytes, its limit (0: off), and
    /// results dropped to make room.
    public struct Cache: Sendable, Equatable {
        public var entries: Int
        public var bytes: UInt64
        public var limitBytes: UInt64
        public var evictions: UInt64
    }

    /// Registered workers, in registration order.
    public var workers: [Worker]
    /// Accepted requests waiting for a worker, and the most that may wait.
    public var queueDepth: Int
    public var queueLimit: Int
    /// Jobs currently held by a worker (identical requests share one).
    public var inFlight: Int
    /// Client connections with live requests.
    public var clients: Int
    public var uptime: Duration
    /// Bytes of results waiting at the broker for clients that are not reading.
    public var clientBytesWaiting: UInt64
    public var totals: Totals
    public var cache: Cache

    init(_ reply: Enlarger_V1_StatusReply) {
        workers = reply.workers.map {
            Worker(id: $0.id, name: $0.name, pid: Int($0.pid), capacity: Int($0.capacity),
                   inFlight: Int($0.inFlight), lastSeen: .milliseconds($0.lastSeenMsAgo))
        }
        queueDepth = Int(reply.queueDepth)
        queueLimit = Int(reply.queueLimit)
        inFlight = Int(reply.inFlight)
        clients = Int(reply.clients)
        uptime = .milliseconds(reply.uptimeMs)
        clientBytesWaiting = reply.clientBytesWaiting
        let totals = reply.totals
        self.totals = Totals(
            submitted: totals.submitted, accepted: totals.accepted, finished: totals.finished,
            failed: totals.failed, cancelled: totals.cancelled, rejected: totals.rejected,
            duplicateIDs: totals.duplicateIds, lateResultsDropped: totals.lateResultsDropped,
            malformedDropped: totals.malformedDropped, workersLost: totals.workersLost,
            workersDisconnected: totals.workersDisconnected, jobsRequeued: totals.jobsRequeued,
            clientsVanished: totals.clientsVanished, unroutable: totals.unroutable,
            cancelAcksTimedOut: totals.cancelAcksTimedOut, deadlinesExceeded: totals.deadlinesExceeded,
            clientSendsDeferred: totals.clientSendsDeferred, jobsQuarantined: totals.jobsQuarantined,
            protocolBreaches: totals.protocolBreaches, cacheHits: totals.cacheHits, cacheMisses: totals.cacheMisses,
            jobsShared: totals.jobsShared, batchesCompleted: totals.batchesCompleted, batchesFailed: totals.batchesFailed,
            batchesCancelled: totals.batchesCancelled)
        cache = Cache(entries: Int(reply.cache.entries), bytes: reply.cache.bytes, limitBytes: reply.cache.limitBytes,
                      evictions: reply.cache.evictions)
    }
}
