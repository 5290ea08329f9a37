import CLISupport
import ArgumentParser
import Dispatch
import EnlargerProtocol
import EnlargerWorker
import Fetching
import Foundation
import Logging

struct WorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Run a worker: take resize jobs from a broker and stream back degraded, then final results.",
        discussion: """
            The worker connects to the broker's worker endpoint, announces how many jobs it runs \
            at once (--concurrency) and processes them on that many threads, sending a quick \
            degraded result before the final one when the job asks for it. A cancelled job \
            stops at its next checkpoint and sends nothing more.

            Jobs are admitted against a memory budget (--memory-budget): each job's peak is \
            estimated from its JPEG header before any pixel memory is allocated, a job waits \
            (first come, first served) while the others leave too little room, and a job that \
            could never fit fails at once with TOO_LARGE.

            If the broker falls silent for three heartbeat intervals, or restarts, the worker \
            drops its jobs (the broker retries them elsewhere) and registers again. SIGINT or \
            SIGTERM stops it gracefully: it tells the broker it is leaving, so its jobs are \
            re-queued at once, and exits.

            Besides images sent with the request, a worker reads files under --files-root \
            (opened with openat2 beneath it: nothing outside can be reached) and downloads http \
            and https URLs: within the input byte limit, with connect, read and total timeouts, \
            following at most --url-max-redirects redirects, and only from public addresses: \
            loopback, private, link-local, multicast and cloud metadata addresses are refused \
            after name resolution (the connection goes to the address checked), unless \
            --url-allow names them.

            \(EnvironmentOptions.rule)

            Example: enlarger worker --broker ipc:///run/enlarger/workers.sock --concurrency 4
            """
    )

    @Option(help: "The broker's worker endpoint, e.g. ipc:///run/enlarger/workers.sock or tcp://broker:5571.")
    var broker: String

    @Option(help: "Jobs run at once, one thread each (1…1024; default: the number of active cores).")
    var concurrency: Int?

    @Option(help: "Name shown in the broker's status, at most 256 bytes (default: the host name).")
    var name: String?

    @Option(help: "Heartbeat interval in milliseconds; the broker is presumed gone after 3 silent intervals.")
    var heartbeatMs = 1000

    @Option(help: ArgumentHelp(
        "Memory the running jobs may use together, by their estimated peaks, e.g. 512M or 2G "
            + "(default: \(Int(MemoryBudget.defaultFraction * 100))% of the cgroup memory limit, or of physical RAM).",
        valueName: "bytes"),
            transform: parseMemoryBudget)
    var memoryBudget: Int?

    @Option(help: ArgumentHelp("Leave gracefully when this process (the supervising `serve`) is gone.", visibility: .hidden))
    var parentPid: Int32?

    @OptionGroup var limitOptions: LimitOptions
    @OptionGroup var sources: SourceOptions

    @OptionGroup var auth: PeerAuthOptions
    @OptionGroup var metrics: MetricsOption
    @OptionGroup var log: LogOptions

    private var workerConfiguration: WorkerConfiguration {
        WorkerConfiguration(brokerEndpoint: broker,
                            concurrency: concurrency ?? ProcessInfo.processInfo.activeProcessorCount,
                            heartbeatInterval: .milliseconds(heartbeatMs),
                            name: name ?? ProcessInfo.processInfo.hostName,
                            limits: limitOptions.limits, memoryBudget: memoryBudget ?? MemoryBudget.defaultBudget(),
                            logger: Logger(label: "enlarger.worker"))
    }

    func validate() throws {
        try Endpoint.validate(broker, option: "--broker")
        // The flags by name, so that a bad value from the environment is reported under its variable.
        if let concurrency, !(1...Int(WireLimits.maxCapacity)).contains(concurrency) {
            throw ValidationError("--concurrency must be 1 to \(WireLimits.maxCapacity), got \(concurrency)")
        }
        if let name, name.utf8.count > WireLimits.maxWorkerNameBytes {
            throw ValidationError("--name must be at most \(WireLimits.maxWorkerNameBytes) bytes, got \(name.utf8.count)")
        }
        guard heartbeatMs > 0 else { throw ValidationError("--heartbeat-ms must be positive, got \(heartbeatMs)") }
        if let problem = workerConfiguration.problem { throw ValidationError(problem) }
    }

    func run() throws {
        log.bootstrap()
        Self.preferAsOOMVictim(Logger(label: "enlarger.worker"))
        var configuration = workerConfiguration
        configuration.curve = try auth.credentials(for: broker)
        configuration.metricsAddress = metrics.metrics
        sources.apply(to: &configuration)
        let service = try WorkerService(configuration: configuration)
        if let address = service.metricsAddress {
            Logger(label: "enlarger.worker").info("metrics", metadata: ["url": "http://\(address)/metrics"])
        }
        // Signals become a graceful stop (handled on a dispatch queue, not in signal context).
        let signalSources = onTerminationSignals { _ in service.stop() }
        defer { signalSources.forEach { $0.cancel() } }
        // A supervised worker must not outlive its supervisor (e.g. `serve` killed with -9).
        let orphanCheck = parentPid.map { parent in
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.schedule(deadline: .now() + .milliseconds(500), repeating: .milliseconds(500))
            timer.setEventHandler { if getppid() != parent { service.stop() } }
            timer.resume()
            return timer
        }
        defer { orphanCheck?.cancel() }
        try service.run()
    }

    /// The worker's `oom_score_adj`: where a worker shares a memory limit with its broker or
    /// `serve` (one container, one cgroup), the kernel's out-of-memory killer takes a worker
    /// (whose jobs the broker runs again elsewhere) before them, whose death would end every
    /// request. Raising one's own score needs no privilege; a score already higher is kept.
    static let oomScoreAdjustment = 500

    private static func preferAsOOMVictim(_ logger: Logger) {
        let path = "/proc/self/oom_score_adj"
        guard let current = try? String(contentsOfFile: path, encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines), let score = Int(current) else { return }
        guard score < oomScoreAdjustment else { return }
        do {
            try "\(oomScoreAdjustment)\n".write(toFile: path, atomically: false, encoding: .utf8)
        } catch {
            logger.debug("could not raise oom_score_adj", metadata: ["error": "\(error)"])
        }
    }
}

/// Parses `--memory-budget`: a byte count with an optional binary suffix (K, M, G, T).
func parseMemoryBudget(_ text: String) throws -> Int {
    guard let bytes = MemoryBudget.parseByteCount(text) else {
        throw ValidationError("--memory-budget must be a positive byte count such as 536870912, 512M or 2G, got '\(text)'")
    }
    return bytes
}

/// Where a worker may read images from besides the Submit itself (file and URL sources).
struct SourceOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Serve file sources: requests name paths relative to DIR and cannot leave it (.., absolute paths and "
            + "symbolic links out are refused). Without it, file sources are refused.",
        valueName: "dir"))
    var filesRoot: String?

    @Flag(help: "Refuse URL sources (by default a worker downloads http and https URLs, guarded as below).")
    var noUrlSources = false

    @Option(help: ArgumentHelp(
        "Also allow downloads from this network (CIDR such as 10.1.0.0/16 or an address), which the "
            + "address guard refuses by default (loopback, private, link-local, ...). Repeatable. A cloud "
            + "metadata address must be named exactly.",
        valueName: "cidr"),
            transform: parseNetwork)
    var urlAllow: [IPNetwork] = []

    @Option(help: ArgumentHelp("Seconds a download may take, redirects included.", valueName: "seconds"))
    var urlTimeout: Double = 60

    @Option(help: "Redirects a download follows, each checked like the first URL.")
    var urlMaxRedirects = 5

    func validate() throws {
        guard urlTimeout > 0 && urlTimeout <= 3600 else { throw ValidationError("--url-timeout must be more than 0 and at most 3600 seconds") }
        guard (0...20).contains(urlMaxRedirects) else { throw ValidationError("--url-max-redirects must be 0 to 20") }
    }

    /// The options again, for a worker started by `serve`.
    var arguments: [String] {
        var arguments = filesRoot.map { ["--files-root", ($0 as NSString).standardizingPath] } ?? []
        if noUrlSources { arguments.append("--no-url-sources") }
        for network in urlAllow { arguments += ["--url-allow", network.description] }
        arguments += ["--url-timeout", "\(urlTimeout)", "--url-max-redirects", "\(urlMaxRedirects)"]
        return arguments
    }

    func apply(to configuration: inout WorkerConfiguration) {
        configuration.filesRoot = filesRoot
        if noUrlSources {
            configuration.urlSources = nil
        } else {
            var policy = URLSourcePolicy()
            policy.addresses = AddressPolicy(allowed: urlAllow)
            policy.totalTimeout = .milliseconds(Int64((urlTimeout * 1000).rounded(.up)))
            policy.maxRedirects = urlMaxRedirects
            configuration.urlSources = policy
        }
    }
}

/// Parses `--url-allow`: a network in CIDR notation, or one address.
func parseNetwork(_ text: String) throws -> IPNetwork {
    guard let network = IPNetwork(text) else {
        throw ValidationError("--url-allow takes a network such as 10.1.0.0/16, 127.0.0.1 or fd00::/8, got '\(text)'")
    }
    return network
}
