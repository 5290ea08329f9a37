import ArgumentParser
import EnlargerBroker
import Foundation
import Logging

/// Broker settings shared by `broker` and `serve`.
struct BrokerOptions: ParsableArguments {
    @Option(help: "Requests that may wait for a worker; a submit beyond it is rejected at once (OVERLOADED).")
    var queueLimit = BrokerConfiguration().queueLimit

    @Option(help: "Heartbeat interval in milliseconds; a peer silent for 3 intervals is presumed gone.")
    var heartbeatMs = 1000

    @Option(help: "Times a request is retried after its worker is lost before it fails with WORKER_LOST.")
    var maxRetries = BrokerConfiguration().maxRetries

    func validate() throws {
        guard queueLimit > 0, heartbeatMs > 0, maxRetries >= 0 else {
            throw ValidationError("broker limits must be positive")
        }
    }

    /// `maxInputBytes` is the largest image accepted from a client.
    func configuration(clients: String, workers: String, maxInputBytes: Int) -> BrokerService.Configuration {
        var configuration = BrokerService.Configuration(clientsEndpoint: clients, workersEndpoint: workers)
        configuration.broker.queueLimit = queueLimit
        configuration.broker.heartbeatInterval = .milliseconds(heartbeatMs)
        configuration.broker.maxInputBytes = maxInputBytes
        configuration.broker.maxRetries = maxRetries
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

            Example: enlarger broker --clients tcp://*:5570 --workers tcp://*:5571
            """
    )

    @Option(help: "Endpoint to bind for clients.")
    var clients: String

    @Option(help: "Endpoint to bind for workers.")
    var workers: String

    @OptionGroup var brokerOptions: BrokerOptions

    @Option(help: "Largest image accepted from a client, in bytes.")
    var maxBytes = BrokerConfiguration().maxInputBytes

    func validate() throws {
        guard maxBytes > 0 else { throw ValidationError("--max-bytes must be positive") }
    }

    func run() throws {
        let logger = Logger(label: "enlarger.broker")
        let service = try BrokerService(
            configuration: brokerOptions.configuration(clients: clients, workers: workers, maxInputBytes: maxBytes),
            logger: logger)
        let signals = onTerminationSignals { _ in service.stop() }
        defer { signals.forEach { $0.cancel() } }
        logger.info("broker listening", metadata: ["clients": "\(service.clientsEndpoint)", "workers": "\(service.workersEndpoint)"])
        try service.run()
    }
}
