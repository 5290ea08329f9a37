import ArgumentParser
import CLISupport
import Enlarger
import Foundation
import Telemetry

/// `enlarger health`: a probe for container healthchecks and scripts. Exit status 0 when
/// healthy, 1 otherwise, with one line saying why.
struct HealthCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "Check that a broker or worker is healthy (exit status 0) or say why not (1).",
        discussion: """
            Two ways to ask:

            --http HOST:PORT asks a broker's or worker's --metrics port: /readyz by default \
            (broker: at least one worker registered; worker: registered with its broker), \
            /healthz with --live (the process's loop is turning). This is what container \
            healthchecks use: it needs no keys.

            Otherwise it asks a broker over ZeroMQ, like `status` (--broker, or the local \
            `serve`; the usual key options for tcp), and with --ready also requires a \
            registered worker.

            Examples:
              enlarger health --http 127.0.0.1:9570
              enlarger health --broker tcp://broker:5570 --ready
            """
    )

    @Option(help: ArgumentHelp("Ask this --metrics port over HTTP instead of the broker.", valueName: "host:port"))
    var http: String?

    @Flag(help: "Only check that the process is alive (/healthz), not that it is ready.")
    var live = false

    @Flag(help: "Over ZeroMQ: also require at least one registered worker.")
    var ready = false

    @Option(help: "Give up after this many milliseconds.")
    var timeoutMs = 3000

    @OptionGroup var service: ServiceOptions

    func validate() throws {
        guard timeoutMs > 0 else { throw ValidationError("--timeout-ms must be positive") }
        if let http {
            do { _ = try HTTPEndpoint.split(http) } catch { throw ValidationError("--http: \(error)") }
            if ready { throw ValidationError("--ready is for the ZeroMQ check; over --http, /readyz is the default") }
        } else if live {
            throw ValidationError("--live needs --http (over ZeroMQ an answer is the liveness check)")
        }
    }

    func run() async throws {
        if let http {
            let path = live ? "/healthz" : "/readyz"
            let response: HTTPGet.Response
            do {
                response = try HTTPGet.fetch(http, path: path, timeout: .milliseconds(timeoutMs))
            } catch {
                throw CLIError("unhealthy: \(error)")
            }
            let said = response.body.trimmingCharacters(in: .whitespacesAndNewlines)
            guard response.status == 200 else { throw CLIError("unhealthy: \(http)\(path) answered \(response.status): \(said)") }
            print("healthy: \(http)\(path): \(said)")
            return
        }
        let endpoint = service.clientEndpoint
        var configuration = try service.clientConfiguration()
        // Unreachable is declared after three silent heartbeat intervals.
        configuration.heartbeatInterval = .milliseconds(max(100, timeoutMs / 3))
        let status: BrokerStatus
        do {
            status = try await withEnlargerClient(brokerEndpoint: endpoint, configuration: configuration) { try await $0.status() }
        } catch let error as EnlargerClientError {
            throw CLIError("unhealthy: \(endpoint): \(error.codeAndMessage.message)")
        }
        if ready && status.workers.isEmpty { throw CLIError("unhealthy: \(endpoint): no worker is registered") }
        print("healthy: \(endpoint): \(status.workers.count) workers, queue \(status.queueDepth)/\(status.queueLimit)")
    }
}
