/// The broker's policy: queue bound, liveness and retry rules, memory limits. Shared by the
/// core (which enforces it) and the service (which sizes its sockets from it).
public struct BrokerConfiguration: Sendable {
    /// Accepted requests that may wait for a worker; a Submit beyond it is answered at once
    /// with `Rejected{OVERLOADED}`.
    public var queueLimit: Int = 1024
    /// How often the broker sends heartbeats to workers, and how often clients and workers
    /// must show signs of life.
    public var heartbeatInterval: Duration = .seconds(1)
    /// Heartbeat intervals of silence after which a worker is dead, or a client with live
    /// requests has vanished.
    public var heartbeatLiveness: Int = 3
    /// Times a request is re-dispatched after losing its worker; after that it fails with
    /// `WORKER_LOST`. The default 2 means at most 3 attempts.
    public var maxRetries: Int = 2
    /// Largest source image accepted; larger ones are `Rejected{TOO_LARGE}`.
    public var maxInputBytes: Int = 64 << 20
    /// Source image bytes the broker holds at once over all live requests (an image is kept
    /// until its request ends, for retries). A Submit that would exceed it is answered with
    /// `Rejected{OVERLOADED}`: the queue's count limit alone would let a few clients park
    /// `queueLimit × maxInputBytes` (64 GiB) of images.
    public var maxLiveImageBytes: Int = 1 << 30
    /// Of those, the bytes one principal's live requests may hold unless its tenant terms say
    /// otherwise (`image-mib`), an admin's aside (the total alone bounds those); nil: a quarter of `maxLiveImageBytes`, and never less than
    /// one image of `maxInputBytes`. Without it one principal could fill the broker's image
    /// memory and have every other principal's Submit refused.
    public var maxLiveImageBytesPerPrincipal: Int?
    /// Live requests one client connection may hold, so that one producer cannot take every
    /// queue slot from the others (`Rejected{OVERLOADED}` beyond it).
    public var maxLiveRequestsPerClient: Int = 512
    /// Live requests one principal may hold over all its connections, requests sharing a job
    /// included, unless its tenant terms say otherwise (`live=`); an admin has no such bound.
    public var maxLiveRequestsPerPrincipal: Int = 4096
    /// Ended request ids remembered, so a late Cancel is answered `FINISHED` rather than
    /// `UNKNOWN`: at most this many per principal (a principal's own churn never pushes out
    /// another's), for at most `endedRequestMemoryDuration`. Ended batch ids alike.
    public var endedRequestMemoryLimit: Int = 4096
    public var endedRequestMemoryDuration: Duration = .seconds(60)
    /// How long a cancelled job may go unaccounted for: neither acknowledged (`JobCancelled`)
    /// nor named by the worker as still stopping (`Occupancy.stopping`, a stage that cannot be
    /// interrupted; its credit stays taken meanwhile). A worker silent about it that long has a
    /// stuck job thread: it is retired (its other jobs re-queued) and told to register afresh.
    public var cancelAckTimeout: Duration = .seconds(10)
    /// The deadline of a request whose Submit names none (`deadline_ms` 0).
    public var defaultDeadline: Duration = .seconds(300)
    /// The longest deadline a Submit may ask for; longer ones are shortened to it.
    public var maxDeadline: Duration = .seconds(3600)
    /// Principals that may cancel any request and see worker names and pids in status.
    /// `Principal.local` (ipc peers, all the socket owner) is always an admin.
    public var admins: Set<Principal> = []
    /// How long a quarantined job (one whose worker was lost while it ran beside others)
    /// waits before a worker is reserved for it: after that the worker with the fewest jobs
    /// takes no new ones until the quarantined job can run on it alone.
    public var quarantineReservationDelay: Duration = .seconds(1)
    /// Names this broker process in Pong and Accepted (never 0), so that clients notice a
    /// restart: the requests they had live at the old instance are gone.
    public var instance: UInt64 = UInt64.random(in: 1...UInt64.max)

    /// Bytes of terminal results kept for identical requests (see CACHE AND SHARED JOBS in
    /// client.proto); 0 turns the cache off.
    public var resultCacheBytes: Int = 256 << 20
    /// Whether an identical request joins a live job rather than starting its own.
    public var shareJobs = true
    /// Whether cached results and live jobs are shared between principals. Off by default:
    /// a tenant learns nothing from another's traffic (not even, through timing, that an
    /// image was asked for before).
    public var shareAcrossPrincipals = false

    /// The share of the workers' total capacity kept for interactive requests: bulk ones
    /// never hold more than the rest (rounded so that the reserve is at least one slot, but
    /// never all of them). 0 keeps nothing back.
    public var interactiveReserve: Double = 0.25
    /// Each principal's weight in the fair share and its limits (see `TenantPolicy`); the
    /// service replaces it when the tenants file changes.
    public var tenants = TenantPolicy()

    /// Batches that may be live at once; an item starting one more is `Rejected{OVERLOADED}`.
    /// (A batch lives at most until its first item's deadline.)
    public var maxLiveBatches: Int = 4096
    /// Live batches one principal may hold of those: a principal whose batches stay live at no
    /// cost (items answered from the cache, a far deadline) cannot take every one.
    public var maxLiveBatchesPerPrincipal: Int = 512

    public init() {}

    /// The image bytes a principal may hold when its terms name no limit.
    var defaultImageBytesPerPrincipal: Int {
        maxLiveImageBytesPerPrincipal ?? max(maxLiveImageBytes / 4, min(maxInputBytes, maxLiveImageBytes))
    }

    /// Silence after which a peer is considered gone.
    var peerTimeout: Duration { heartbeatInterval * heartbeatLiveness }
}
