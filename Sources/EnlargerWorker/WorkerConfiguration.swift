import EnlargerProtocol
import Fetching
import Foundation
import Imaging
import Logging
import ZeroMQ

/// How a `WorkerService` connects, how much it runs at once and what it accepts.
public struct WorkerConfiguration: Sendable {
    /// The broker's worker endpoint, e.g. `ipc:///run/enlarger/workers.sock` or `tcp://broker:5571`.
    public var brokerEndpoint: String
    /// Jobs run at once, each on its own job thread; announced to the broker as `Ready.capacity`
    /// (1 to 1024).
    public var concurrency: Int
    /// How often a heartbeat is sent; the broker is presumed gone after `missedHeartbeats`
    /// intervals without a message from it.
    public var heartbeatInterval: Duration
    public var missedHeartbeats: Int
    /// Free text shown in the broker's status (host or container name), at most 256 bytes.
    public var name: String
    /// Checked from each job's JPEG header before any pixel is decoded.
    public var limits: DecodeLimits
    /// Bytes the running jobs may use together, by their estimated peaks (see
    /// `MemoryEstimate`): a job waits until it fits, first come first served, and fails at
    /// once with TOO_LARGE when its estimate exceeds the whole budget. Default:
    /// `MemoryBudget.defaultBudget()`, from the cgroup limit or physical RAM.
    public var memoryBudget: Int
    public var logger: Logger
    /// Keys for a broker that requires CURVE (`nil`: none).
    public var curve: CurveClientCredentials?
    /// Where to serve `/metrics`, `/healthz` and `/readyz` over HTTP (`HOST:PORT`; port 0
    /// picks one); `nil`: no HTTP port. Ready means registered with a broker.
    public var metricsAddress: String?
    /// The directory file sources are read from (`FileSource.path` is relative to it, and
    /// cannot leave it); `nil`: file sources are refused with SOURCE_REFUSED.
    public var filesRoot: String?
    /// How URL sources are downloaded: the address policy (public unicast only unless
    /// allowed), redirects, timeouts. Its byte limit is `limits.maxInputBytes`. `nil`: URL
    /// sources are refused with SOURCE_REFUSED.
    public var urlSources: URLSourcePolicy? = URLSourcePolicy()
    /// The DEALER's send high-water mark (messages), or nil for libzmq's default (1000).
    /// Small, so that what a slow broker has not taken waits in the worker's outbox, whose
    /// bytes count against the memory budget, rather than unseen in libzmq's pipe; tests
    /// lower it further to make the broker connection refuse messages.
    var sendHighWaterMark: Int32? = 64

    public init(
        brokerEndpoint: String,
        concurrency: Int = ProcessInfo.processInfo.activeProcessorCount,
        heartbeatInterval: Duration = .seconds(1),
        missedHeartbeats: Int = 3,
        name: String = ProcessInfo.processInfo.hostName,
        limits: DecodeLimits = DecodeLimits(),
        memoryBudget: Int = MemoryBudget.defaultBudget(),
        logger: Logger = Logger(label: "enlarger.worker")
    ) {
        self.brokerEndpoint = brokerEndpoint
        self.concurrency = concurrency
        self.heartbeatInterval = heartbeatInterval
        self.missedHeartbeats = missedHeartbeats
        self.name = name
        self.limits = limits
        self.memoryBudget = memoryBudget
        self.logger = logger
    }

    /// The inbound frame size above which libzmq drops the broker's connection (`ZMQ_MAXMSGSIZE`).
    ///
    /// At least the broker's default input limit (64 MiB) even when `limits.maxInputBytes` is
    /// lower: a job over the worker's own limit must be answered with `JobFailed{TOO_LARGE}`,
    /// not by a dropped connection that the broker would take for a dead worker.
    var maxInboundFrameBytes: Int64 {
        Int64(max(limits.maxInputBytes, 64 << 20) + WireLimits.maxHeaderBytes)
    }

    /// The broker is presumed gone after this much silence.
    var brokerSilenceLimit: Duration { heartbeatInterval * missedHeartbeats }

    /// A problem that makes the configuration unusable, or `nil`.
    public var problem: String? {
        if !(1...Int(WireLimits.maxCapacity)).contains(concurrency) {
            return "concurrency must be 1 to \(WireLimits.maxCapacity), got \(concurrency)"
        }
        if name.utf8.count > WireLimits.maxWorkerNameBytes {
            return "name must be at most \(WireLimits.maxWorkerNameBytes) bytes, got \(name.utf8.count)"
        }
        if heartbeatInterval <= .zero { return "heartbeat interval must be positive" }
        if missedHeartbeats < 1 { return "missed heartbeats must be at least 1" }
        if memoryBudget < 1 { return "the memory budget must be positive, got \(memoryBudget)" }
        return nil
    }
}
