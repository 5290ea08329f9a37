import Dispatch
import Fetching
import Foundation
import Imaging
import Locking
import Synchronization
import Telemetry
import ZeroMQ

/// A worker process's service: connects a DEALER to the broker's worker endpoint, takes up
/// to `configuration.concurrency` jobs at once and streams their results back.
///
/// **Threads.** `run()` turns the calling thread into the worker's I/O thread, the only one
/// that calls ZeroMQ; `configuration.concurrency` job threads run the image pipeline and post
/// their results back to it through a mailbox.
///
/// **Protocol duties** (see worker.proto): `Ready{capacity}` on every new connection, a
/// heartbeat every interval, `JobStarted` then the results the job's delivery asks for, and
/// exactly one terminal frame per job (terminal `JobResult`, `JobFailed` or `JobCancelled`).
/// After a `CancelJob` reaches the I/O thread nothing more is sent for the job but
/// `JobCancelled`, once its thread has stopped at the pipeline's next checkpoint.
///
/// **Liveness.** When the broker is silent for `missedHeartbeats` intervals, or sends
/// `Disconnect`, the worker abandons its jobs without a word about them, replaces its socket
/// and sends `Ready` again (so it rejoins a restarted broker).
///
/// **Memory.** Each job's peak memory is estimated from its JPEG header before any pixel
/// memory is allocated; jobs run only while their estimates fit `configuration.memoryBudget`
/// together, waiting first come first served (and cancellable) otherwise, and a job that
/// could never fit fails at once with `TOO_LARGE`. A buffer that cannot be allocated fails
/// its job (`TOO_LARGE`), never the process. `memoryInUse` shows the budget in use.
///
/// **Backpressure.** A message the broker connection cannot take now waits in order for the
/// socket to become writable; a terminal frame is never dropped while the connection lives.
///
/// **Stopping.** `stop()`, from any thread, makes `run()` send `Disconnect` (the broker
/// re-queues this worker's jobs), stop the jobs, wait for the job threads and return.
public final class WorkerService: Sendable {
    public let configuration: WorkerConfiguration
    private let mailbox: Mailbox<WorkerMail>
    private let gauges = WorkerGauges()
    private let hasRun = Atomic<Bool>(false)
    private let telemetry: Instruments?
    private let sources: SourceAccess

    /// What `--metrics` adds: the HTTP port, the loop's probe, and what the loop publishes.
    struct Instruments: Sendable {
        let server: TelemetryServer
        let probe: LoopProbe
        let registry: MetricsRegistry
        let unreadiness: Lock<String?>
    }

    /// The metrics address bound, port resolved; nil without `metricsAddress`.
    public var metricsAddress: String? { telemetry?.server.address }

    /// Binds the metrics port, if configured; the broker connection is made by `run()`.
    ///
    /// - Throws: `ZMQError` (no mailbox), `TelemetryError` (the metrics address) or
    ///   `WorkerSetupError` (the files root cannot be opened).
    /// - Precondition: `configuration.problem == nil`.
    public init(configuration: WorkerConfiguration) throws {
        if let problem = configuration.problem { preconditionFailure("invalid worker configuration: \(problem)") }
        self.configuration = configuration
        // Its thread starts now, before any job brings the process near its memory cap.
        BufferReaper.start()
        let files = try configuration.filesRoot.map { path throws(WorkerSetupError) in try FilesRoot(path: path) }
        let mailbox = try Mailbox<WorkerMail>()
        self.mailbox = mailbox
        if let address = configuration.metricsAddress {
            let registry = MetricsRegistry()
            let probe = LoopProbe(wake: { mailbox.post(.probe) })
            let unreadiness = Lock<String?>("not started")
            let server = try TelemetryServer(address: address, registry: registry, probe: probe,
                                             isReady: { unreadiness.withLock { $0 } })
            telemetry = Instruments(server: server, probe: probe, registry: registry, unreadiness: unreadiness)
        } else {
            telemetry = nil
        }
        // Last: nothing after it throws, so its event loop thread is never left behind.
        let urls = configuration.urlSources.map { policy in
            var policy = policy
            policy.maxBytes = configuration.limits.maxInputBytes
            return URLFetcher(policy: policy)
        }
        sources = SourceAccess(files: files, maxInputBytes: configuration.limits.maxInputBytes, urls: urls)
    }

    deinit {
        // A service that never ran still owns the fetcher's event loop.
        sources.urls?.shutdown()
    }

    /// Serves the broker on the calling thread until `stop()`; then leaves gracefully and
    /// returns. Throws when a ZeroMQ call fails (an unusable endpoint, for instance). Call
    /// it once.
    public func run() throws(ZMQError) {
        precondition(!hasRun.exchange(true, ordering: .relaxed), "WorkerService.run() called twice")
        telemetry?.server.start()
        defer { telemetry?.server.stop() }
        // The job threads have all returned by then: no download is running.
        defer { sources.urls?.shutdown() }
        try WorkerLoop(configuration: configuration, mailbox: mailbox, gauges: gauges, sources: sources,
                       telemetry: telemetry).run()
    }

    /// The memory budget in use: the sum of the estimated peaks of the jobs admitted and not
    /// yet ended (abandoned jobs included until their threads return). Safe from any thread;
    /// updated after every turn of the I/O loop.
    public var memoryInUse: Int { gauges.memoryInUse }

    /// Jobs estimated and waiting for memory. Safe from any thread.
    public var jobsWaitingForMemory: Int { gauges.jobsWaitingForMemory }

    /// Jobs whose threads have not returned (running, waiting or finishing). Safe from any thread.
    public var jobCount: Int { gauges.jobCount }

    /// Asks `run()` to leave gracefully. Safe from any thread (a signal handler's queue, for
    /// instance), at any time, also before `run()` has started.
    public func stop() {
        mailbox.post(.stop)
    }

    /// Runs the service on a new thread; for tests and for embedding.
    public func start() -> Handle {
        let handle = Handle(service: self)
        let thread = Thread { [self] in
            let outcome = Result { () throws(ZMQError) in try run() }
            handle.finish(outcome)
        }
        thread.name = "enlarger-worker-io"
        thread.start()
        return handle
    }

    /// A service running on its own thread (see `start()`).
    public final class Handle: Sendable {
        private let service: WorkerService
        private let outcome = Lock<Result<Void, ZMQError>?>(nil)
        private let finished = DispatchSemaphore(value: 0)

        init(service: WorkerService) {
            self.service = service
        }

        fileprivate func finish(_ result: Result<Void, ZMQError>) {
            outcome.withLock { $0 = result }
            finished.signal()
        }

        /// Stops the service gracefully and waits until its thread has finished.
        public func stop() throws(ZMQError) {
            service.stop()
            try wait()
        }

        /// Blocks until `run()` has returned; rethrows its error.
        public func wait() throws(ZMQError) {
            finished.wait()
            finished.signal()  // later waits return at once
            try outcome.withLock { $0! }.get()
        }
    }
}
