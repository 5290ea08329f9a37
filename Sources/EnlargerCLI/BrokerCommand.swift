import ArgumentParser
import CLISupport
import EnlargerBroker
import Foundation
import Logging

/// Broker settings shared by `broker` and `serve`.
struct BrokerOptions: ParsableArguments {
    @Option(help: "Requests that may wait for a worker; a submit beyond it is rejected at once (OVERLOADED).")
    var queueLimit = BrokerConfiguration().queueLimit

    @Option(help: "Heartbeat interval in milliseconds; a peer silent for 3 intervals is presumed gone.")
    var heartbeatMs = 1000

    @Option(help: "Times a request may kill the worker it runs on alone before it fails with WORKER_LOST.")
    var maxRetries = BrokerConfiguration().maxRetries

    @Option(help: "Seconds a request may live when its Submit names no deadline; it then fails DEADLINE_EXCEEDED.")
    var defaultDeadline = 300

    @Option(help: "The longest deadline, in seconds, a Submit may ask for.")
    var maxDeadline = 3600

    @Option(help: "Seconds a worker may go without stopping a cancelled job or saying that its thread is still at work (a stage that cannot be interrupted) before it is retired as stuck.")
    var cancelAckTimeout = 10

    @Option(help: "Seconds results may wait for a client that is not reading or not connected before it is given up.")
    var clientPatience = 30

    @Option(help: ArgumentHelp("MiB of results kept for identical requests (0 turns the cache off): a request whose image digest, "
                + "spec and delivery match a cached result is answered at once."))
    var cacheMib = BrokerConfiguration().resultCacheBytes >> 20

    @Flag(name: .customLong("no-share-jobs"), help: "Give every request a job of its own, even when an identical one is in flight.")
    var noShareJobs = false

    @Flag(help: "Share cached results and jobs between principals (off: each principal sees only its own).")
    var shareAcrossPrincipals = false

    @Option(help: "MiB of source images the broker holds at once, over all live requests (each is kept until its request ends, for retries); a Submit beyond it is refused OVERLOADED. One principal's requests may hold a quarter of it (at least one image of --max-bytes), or what its --tenants line gives (image-mib=N); an admin (ipc peers included) may hold all of it. Size the broker's memory limit above it.")
    var maxImageMib = BrokerConfiguration().maxLiveImageBytes >> 20

    @Option(help: "Percent of the workers' capacity kept for interactive requests (0-90): bulk requests (sync's default, --priority bulk) never hold more than the rest, so an interactive request waits at most for a kept slot to free up.")
    var interactiveReserve = Int(BrokerConfiguration().interactiveReserve * 100)

    @Option(help: ArgumentHelp(
        "A file of per-principal weights and limits, re-read within a second of a change: one line per principal (as logs and status name it: local, anonymous, curve:KEY, or * for every other one), then its terms: weight=N (its jobs per turn in the fair share, default 1), queued=N (requests it may have waiting; beyond, OVERLOADED with a retry time), running=N (its jobs on workers at once), image-mib=N (MiB of source images its live requests may hold; default a quarter of --max-image-mib), live=N (its live requests over all its connections, default 4096; admins have no such bound), files=DIR (the directory of the workers' files root its file sources are read beneath, . for all of it; without it only admins, ipc peers included, may name files). Example line: * weight=1 queued=256 running=16",
        valueName: "file"))
    var tenants: String?

    func validate() throws {
        // Each named, so that a bad value from the environment is reported under its variable.
        for (flag, value) in [("--queue-limit", queueLimit), ("--heartbeat-ms", heartbeatMs),
                              ("--default-deadline", defaultDeadline), ("--max-deadline", maxDeadline),
                              ("--cancel-ack-timeout", cancelAckTimeout), ("--client-patience", clientPatience)]
        where value <= 0 {
            throw ValidationError("\(flag) must be positive, got \(value)")
        }
        for (flag, value) in [("--max-retries", maxRetries), ("--cache-mib", cacheMib)] where value < 0 {
            throw ValidationError("\(flag) must be 0 or more, got \(value)")
        }
        guard (1...(1 << 20)).contains(maxImageMib) else {
            throw ValidationError("--max-image-mib must be 1 to 1048576, not \(maxImageMib)")
        }
        guard (0...90).contains(interactiveReserve) else {
            throw ValidationError("--interactive-reserve must be 0 to 90 (percent), not \(interactiveReserve)")
        }
        guard cacheMib <= 1 << 20 else { throw ValidationError("--cache-mib must be at most 1048576 (1 TiB)") }
        guard defaultDeadline <= maxDeadline else {
            throw ValidationError("--default-deadline (\(defaultDeadline)) exceeds --max-deadline (\(maxDeadline))")
        }
    }

    /// `maxInputBytes` is the largest image accepted from a client.
    func configuration(clients: String, workers: String, maxInputBytes: Int) -> BrokerService.Configuration {
        var configuration = BrokerService.Configuration(clientsEndpoint: clients, workersEndpoint: workers)
        configuration.broker.queueLimit = queueLimit
        configuration.broker.heartbeatInterval = .milliseconds(heartbeatMs)
        configuration.broker.maxInputBytes = maxInputBytes
        configuration.broker.maxRetries = maxRetries
        configuration.broker.defaultDeadline = .seconds(defaultDeadline)
        configuration.broker.maxDeadline = .seconds(maxDeadline)
        configuration.broker.cancelAckTimeout = .seconds(cancelAckTimeout)
        configuration.clientBacklogPatience = .seconds(clientPatience)
        configuration.broker.resultCacheBytes = cacheMib << 20
        configuration.broker.shareJobs = !noShareJobs
        configuration.broker.shareAcrossPrincipals = shareAcrossPrincipals
        configuration.broker.interactiveReserve = Double(interactiveReserve) / 100
        configuration.broker.maxLiveImageBytes = maxImageMib << 20
        configuration.tenantsFile = tenants
        return configuration
    }
}

struct BrokerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "broker",
        abstract: "Run the broker: accept requests from clients and dispatch them to workers.",
        discussion: """
            Clients (DEALER) connect to --clients, workers (DEALER) to --workers. Endpoints are \
            ZeroMQ addresses: ipc:///path/to/socket on one host, tcp://*:5570 to listen on all \
            interfaces. SIGINT or SIGTERM stops it: live requests fail with BROKER_SHUTDOWN and \
            workers are told to disconnect.

            tcp endpoints need CURVE keys (fail closed): create them with `enlarger keygen`, \
            give the broker its key and the directories of allowed client and worker public \
            keys, and each client and worker its own key and the broker's public key. The \
            directories are re-read when they change: keys are added or revoked without a \
            restart.

            \(EnvironmentOptions.rule)

            Example: enlarger broker --clients tcp://*:5570 --workers tcp://*:5571 \
              --server-key keys/broker.key --client-keys keys/clients --worker-keys keys/workers
            """
    )

    @Option(help: "Endpoint to bind for clients.")
    var clients: String

    @Option(help: "Endpoint to bind for workers.")
    var workers: String

    @OptionGroup var brokerOptions: BrokerOptions

    @Option(help: "Largest image accepted from a client, in bytes.")
    var maxBytes = BrokerConfiguration().maxInputBytes

    @OptionGroup var auth: BrokerAuthOptions
    @OptionGroup var metrics: MetricsOption
    @OptionGroup var log: LogOptions

    func validate() throws {
        guard maxBytes > 0 else { throw ValidationError("--max-bytes must be positive") }
        try Endpoint.validate(clients, option: "--clients")
        try Endpoint.validate(workers, option: "--workers")
    }

    func run() throws {
        log.bootstrap()
        let logger = Logger(label: "enlarger.broker")
        AllocatorTuning.keepFreedMemoryForReuse(environment: ProcessInfo.processInfo.environment)
        var configuration = brokerOptions.configuration(clients: clients, workers: workers, maxInputBytes: maxBytes)
        try auth.apply(to: &configuration)
        configuration.metricsAddress = metrics.metrics
        configuration.requestLog = log.requestLog(label: logger.label)
        configuration.flushRequestLog = log.flushRequestLog
        let service = try BrokerService(configuration: configuration, logger: logger)
        let signals = onTerminationSignals { _ in service.stop() }
        defer { signals.forEach { $0.cancel() } }
        var listening: Logger.Metadata = ["clients": "\(service.clientsEndpoint)", "workers": "\(service.workersEndpoint)"]
        if let address = service.metricsAddress { listening["metrics"] = "http://\(address)/metrics" }
        logger.info("broker listening", metadata: listening)
        try service.run()
    }
}
