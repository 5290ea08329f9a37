/// A process's operational HTTP port (`--metrics ADDR`): `/metrics` (Prometheus text),
/// `/healthz` (alive: the service's loop answered within a second) and `/readyz` (ready to
/// do its job, as the service defines it).
///
/// Each request asks the loop through `probe` first, so what `/metrics` shows was published
/// by the loop after the request arrived, and a loop that no longer turns fails `/healthz`.
public final class TelemetryServer: Sendable {
    private let endpoint: HTTPEndpoint

    /// The address bound (`HOST:PORT`, port 0 resolved).
    public var address: String { endpoint.boundAddress }

    /// - Parameters:
    ///   - probe: The service loop's probe; its answer publishes the loop's state into
    ///     `registry` and `isReady`'s source.
    ///   - isReady: Read after the probe was answered. `nil`: ready; otherwise why not.
    public init(address: String, registry: MetricsRegistry, probe: LoopProbe,
                isReady: @escaping @Sendable () -> String?,
                patience: Duration = .seconds(1)) throws(TelemetryError) {
        endpoint = try HTTPEndpoint(address: address) { path in
            switch path {
            case "/metrics":
                guard probe.ask(timeout: patience) else {
                    return .init(status: 503, text: "the service loop did not answer within \(patience)\n")
                }
                return .init(status: 200, contentType: MetricsRegistry.contentType, body: registry.exposition())
            case "/healthz", "/livez":
                guard probe.ask(timeout: patience) else {
                    return .init(status: 503, text: "not alive: the service loop did not answer within \(patience)\n")
                }
                return .init(status: 200, text: "ok\n")
            case "/readyz":
                guard probe.ask(timeout: patience) else {
                    return .init(status: 503, text: "not ready: the service loop did not answer within \(patience)\n")
                }
                if let reason = isReady() { return .init(status: 503, text: "not ready: \(reason)\n") }
                return .init(status: 200, text: "ready\n")
            case "/":
                return .init(status: 200, text: "Enlarger telemetry: /metrics /healthz /readyz\n")
            default:
                return .init(status: 404, text: "not found; try /metrics, /healthz or /readyz\n")
            }
        }
    }

    public func start() { endpoint.start() }
    public func stop() { endpoint.stop() }
}
