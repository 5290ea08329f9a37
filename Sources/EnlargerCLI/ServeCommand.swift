import ArgumentParser
import CLISupport
import EnlargerBroker
import EnlargerWorker
import Foundation
import Logging
import Locking
import Telemetry
import ZeroMQ

struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the whole service on this host: a broker plus N worker processes over ipc:// sockets.",
        discussion: """
            The sockets live in a private runtime directory (mode 0700; default \
            \(RuntimeDirectory.defaultPath), or $ENLARGER_RUNTIME_DIR), where the client commands \
            (submit, cancel, status) find them by default. A worker process that dies is restarted. \
            Ctrl-C or SIGTERM stops everything cleanly: workers hand their jobs back, live \
            requests fail with BROKER_SHUTDOWN, the sockets are removed.

            \(EnvironmentOptions.rule) The workers get their settings as flags.

            Example: enlarger serve --workers 2, then from another terminal: \
            enlarger submit photo.jpg --width 720 --height 588 --out thumbs
            """
    )

    @Option(help: "Worker processes to run.")
    var workers = 2

    @Option(help: "Jobs each worker runs at once (default: active cores divided among the workers, at least 1).")
    var concurrency: Int?

    @Option(help: "Private directory for the sockets (default: \(RuntimeDirectory.defaultPath)).")
    var runtimeDir: String?

    @Option(help: ArgumentHelp(
        "Memory all workers' jobs may use together, split evenly among the workers, e.g. 2G "
            + "(default: \(Int(MemoryBudget.defaultFraction * 100))% of the cgroup memory limit, or of physical RAM).",
        valueName: "bytes"),
            transform: parseMemoryBudget)
    var memoryBudget: Int?

    @OptionGroup var brokerOptions: BrokerOptions
    @OptionGroup var limitOptions: LimitOptions
    @OptionGroup var sources: SourceOptions
    @Option(help: ArgumentHelp(
        "Serve /metrics, /healthz and /readyz over HTTP: the broker on HOST:PORT, worker i on HOST:PORT+1+i "
            + "(off by default; no authentication on that port, so keep it on 127.0.0.1 or an operators' network).",
        valueName: "host:port"))
    var metrics: String?
    @OptionGroup var log: LogOptions

    func validate() throws {
        guard (1...256).contains(workers) else { throw ValidationError("--workers must be 1…256") }
        try MetricsOption.check(metrics)
        if let concurrency, !(1...1024).contains(concurrency) { throw ValidationError("--concurrency must be 1…1024") }
    }

    func run() throws {
        log.bootstrap()
        let logger = Logger(label: "enlarger.serve")
        AllocatorTuning.keepFreedMemoryForReuse(environment: ProcessInfo.processInfo.environment)
        let directory = RuntimeDirectory(path: runtimeDir ?? RuntimeDirectory.defaultPath)
        try directory.prepare()
        let lock = try directory.lock()
        defer { close(lock) }
        // Under the lock no other serve uses these paths: leftovers are from a crash.
        unlink(directory.clientsSocket)
        unlink(directory.workersSocket)
        defer {
            unlink(directory.clientsSocket)
            unlink(directory.workersSocket)
        }

        // One byte limit for both: the broker refuses what the workers would refuse.
        var configuration = brokerOptions.configuration(
            clients: directory.clientsEndpoint, workers: directory.workersEndpoint, maxInputBytes: limitOptions.maxBytes)
        configuration.metricsAddress = metrics
        configuration.requestLog = log.requestLog(label: "enlarger.broker")
        configuration.flushRequestLog = log.flushRequestLog
        let service = try BrokerService(configuration: configuration, logger: Logger(label: "enlarger.broker"))
        // A stop request or the broker's own end (a failure) wakes the main thread.
        let wake = DispatchSemaphore(value: 0)
        let brokerOutcome = Lock<Result<Void, ZMQError>?>(nil)
        let brokerThread = Thread {
            let outcome = Result { () throws(ZMQError) in try service.run() }
            brokerOutcome.withLock { $0 = outcome }
            wake.signal()
        }
        brokerThread.name = "enlarger-broker"
        brokerThread.start()

        let perWorker = concurrency ?? max(1, ProcessInfo.processInfo.activeProcessorCount / workers)
        // The workers share this host's memory: each gets its share of one budget.
        let budgetPerWorker = max(1, (memoryBudget ?? MemoryBudget.defaultBudget()) / workers)
        let logArguments = log.arguments
        let supervisor = WorkerSupervisor(count: workers, logger: logger) { index in
            ["worker", "--broker", directory.workersEndpoint, "--concurrency", "\(perWorker)",
             "--memory-budget", "\(budgetPerWorker)",
             "--name", "serve-\(index)", "--heartbeat-ms", "\(brokerOptions.heartbeatMs)",
             "--max-pixels", "\(limitOptions.maxPixels)", "--max-bytes", "\(limitOptions.maxBytes)",
             "--max-scans", "\(limitOptions.maxScans)", "--max-avif-pixels", "\(limitOptions.maxAVIFPixels)", "--parent-pid", "\(getpid())"] + logArguments
                + sources.arguments
                + (metrics.map { ["--metrics", MetricsOption.address($0, offset: index + 1)] } ?? [])
        }
        try supervisor.start()

        let signals = onTerminationSignals { _ in wake.signal() }
        defer { signals.forEach { $0.cancel() } }
        let metricsNote = service.metricsAddress.map { "; metrics at http://\($0)/metrics" } ?? ""
        FileHandle.standardOutput.write(Data(
            "enlarger serve: clients connect to \(directory.clientsEndpoint); \(workers) workers × \(perWorker) jobs\(metricsNote); Ctrl-C stops\n".utf8))
        wake.wait()

        logger.info("stopping: workers first, so that they hand their jobs back")
        supervisor.stop(grace: .seconds(5))
        service.stop()
        while brokerOutcome.withLock({ $0 == nil }) { wake.wait() }
        if case .failure(let error) = brokerOutcome.withLock({ $0! }) {
            throw CLIError("the broker failed: \(error)")
        }
        logger.info("stopped")
    }
}

/// Keeps N `enlarger worker` processes running, restarting one that exits unexpectedly
/// (with a back-off that grows while it keeps dying quickly).
final class WorkerSupervisor: Sendable {
    private struct Slot {
        var process: Process?
        var restarts = 0
        var startedAt = ContinuousClock.now
    }

    private let count: Int
    private let arguments: @Sendable (Int) -> [String]
    private let logger: Logger
    private let executable: URL
    private let state: Lock<(slots: [Slot], stopping: Bool)>

    init(count: Int, logger: Logger, arguments: @escaping @Sendable (Int) -> [String]) {
        self.count = count
        self.arguments = arguments
        self.logger = logger
        executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        state = Lock((slots: Array(repeating: Slot(), count: count), stopping: false))
    }

    func start() throws {
        for index in 0..<count { try launch(index) }
    }

    private func launch(_ index: Int) throws {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments(index)
        process.terminationHandler = { [weak self] finished in self?.exited(index, finished) }
        let launched: Bool = state.withLock { state in
            guard !state.stopping else { return false }
            state.slots[index].process = process
            state.slots[index].startedAt = .now
            return true
        }
        guard launched else { return }
        try process.run()
        // A stop() between recording the slot and run() saw nothing running: end it here.
        if state.withLock({ $0.stopping }) { process.terminate() }
    }

    private func exited(_ index: Int, _ process: Process) {
        let delay: Duration? = state.withLock { state in
            guard !state.stopping, state.slots[index].process === process else { return nil }
            // The back-off is for a worker that cannot start (a bad option, a missing
            // library): it dies within moments, again and again. One that ran a while died
            // of its work (a poison image), and one killed by SIGKILL was killed from outside,
            // in practice by the out-of-memory killer for the job it had just taken, however
            // soon after its start: the broker quarantines that work, and the slot comes back
            // at once, so bad requests never keep a slot of capacity away for long.
            let killed = process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL
            let quick = !killed && ContinuousClock.now - state.slots[index].startedAt < .seconds(2)
            state.slots[index].restarts = quick ? state.slots[index].restarts + 1 : 0
            return .milliseconds(min(5_000, 100 << min(state.slots[index].restarts, 6)))
        }
        guard let delay else { return }
        logger.warning("worker exited; restarting", metadata: [
            "worker": .stringConvertible(index), "status": .stringConvertible(process.terminationStatus),
            "reason": "\(process.terminationReason == .uncaughtSignal ? "signal" : "exit")",
            "restart_in_s": .stringConvertible(LogField.seconds(delay))])
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delay.components.seconds * 1000
            + delay.components.attoseconds / 1_000_000_000_000_000))) { [self] in
            do { try launch(index) } catch { logger.error("cannot restart worker \(index): \(error)") }
        }
    }

    /// SIGTERM to every worker (a graceful leave), SIGKILL to those still running after `grace`.
    func stop(grace: Duration) {
        let processes = state.withLock { state in
            state.stopping = true
            return state.slots.compactMap(\.process)
        }
        for process in processes where process.isRunning { process.terminate() }
        let deadline = ContinuousClock.now + grace
        for process in processes {
            while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
    }
}
