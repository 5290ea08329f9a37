import Enlarger
import EnlargerBroker
import EnlargerWorker
import Foundation
import Imaging
import Logging
import XCTest
import TestSupport

/// A broker and workers over real ipc sockets in a private directory per test: the broker
/// on a thread of the test process, workers either as threads (`WorkerService`) or as
/// `enlarger worker` processes (for kill -9 and SIGSTOP).
final class Cluster: @unchecked Sendable {
    let directory: URL
    let clientsEndpoint: String
    let workersEndpoint: String
    let heartbeat: Duration
    /// The broker's metrics port, when `configure` asked for one.
    let metricsAddress: String?
    private let broker: BrokerThread
    private var threadWorkers: [WorkerService.Handle] = []
    private(set) var processWorkers: [Process] = []

    /// `tcp` binds the client endpoint on loopback tcp instead of ipc; `configure` adjusts the
    /// broker's configuration.
    init(_ test: XCTestCase, heartbeat: Duration = .milliseconds(200), queueLimit: Int = 1024, tcp: Bool = false,
         configure: (inout BrokerService.Configuration) -> Void = { _ in }) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-e2e-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        self.heartbeat = heartbeat
        var configuration = BrokerService.Configuration(
            clientsEndpoint: tcp ? "tcp://127.0.0.1:*" : "ipc://\(directory.path)/clients.sock",
            workersEndpoint: "ipc://\(directory.path)/workers.sock")
        configuration.broker.heartbeatInterval = heartbeat
        configuration.broker.queueLimit = queueLimit
        configure(&configuration)
        var logger = Logger(label: "test.broker")
        logger.logLevel = .error
        let service = try BrokerService(configuration: configuration, logger: logger)
        clientsEndpoint = service.clientsEndpoint
        workersEndpoint = service.workersEndpoint
        metricsAddress = service.metricsAddress
        broker = service.startInBackground()
        test.addTeardownBlock { [self] in shutdown() }
    }

    /// Starts `count` in-process workers.
    func startThreadWorkers(_ count: Int, concurrency: Int,
                            configure: (inout WorkerConfiguration) -> Void = { _ in }) throws {
        var logger = Logger(label: "test.worker")
        logger.logLevel = .error
        for index in 0..<count {
            var configuration = WorkerConfiguration(brokerEndpoint: workersEndpoint, concurrency: concurrency,
                                                    heartbeatInterval: heartbeat, name: "thread-\(index)", logger: logger)
            configure(&configuration)
            threadWorkers.append(try WorkerService(configuration: configuration).start())
        }
    }

    /// Starts `count` `enlarger worker` processes.
    func startProcessWorkers(_ count: Int, concurrency: Int) throws {
        for index in 0..<count {
            let process = Process()
            process.executableURL = Cluster.enlargerBinary
            process.arguments = ["worker", "--broker", workersEndpoint, "--concurrency", "\(concurrency)",
                                 "--heartbeat-ms", "\(Int(milliseconds(heartbeat)))", "--name", "process-\(index)"]
            try process.run()
            processWorkers.append(process)
        }
    }

    func client(endpoint: String? = nil, configuration: EnlargerClient.Configuration? = nil) throws -> EnlargerClient {
        try EnlargerClient(brokerEndpoint: endpoint ?? clientsEndpoint,
                           configuration: configuration ?? .init(heartbeatInterval: heartbeat, missedHeartbeats: 5))
    }

    /// Waits until the broker reports `count` workers, returning the last status.
    @discardableResult
    func waitForWorkers(_ count: Int, client: EnlargerClient, timeout: Duration = .seconds(20)) async throws -> BrokerStatus {
        let deadline = ContinuousClock.now + timeout
        while true {
            let status = try await client.status()
            if status.workers.count == count { return status }
            if ContinuousClock.now > deadline {
                throw ClusterError("\(status.workers.count) workers registered, expected \(count)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Waits until nothing is queued or in flight anywhere (cancel acks included).
    func waitUntilIdle(client: EnlargerClient, timeout: Duration = .seconds(30)) async throws -> BrokerStatus {
        let deadline = ContinuousClock.now + timeout
        while true {
            let status = try await client.status()
            if status.queueDepth == 0 && status.inFlight == 0 && status.workers.allSatisfy({ $0.inFlight == 0 }) {
                return status
            }
            if ContinuousClock.now > deadline {
                throw ClusterError("not idle: queue \(status.queueDepth), in flight \(status.inFlight)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func shutdown() {
        for process in processWorkers where process.isRunning {
            kill(process.processIdentifier, SIGCONT)
            process.terminate()
            process.waitUntilExit()
        }
        processWorkers.removeAll()
        for worker in threadWorkers { try? worker.stop() }
        threadWorkers.removeAll()
        try? broker.stopAndWait()
        try? FileManager.default.removeItem(at: directory)
    }

    /// The `enlarger` executable built beside the test bundle.
    static let enlargerBinary: URL = {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("enlarger")
    }()
}

struct ClusterError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
