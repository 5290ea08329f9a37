import ArgumentParser
import Telemetry

/// `--metrics ADDR` of `broker` and `worker`: the process's operational HTTP port.
struct MetricsOption: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Serve /metrics (Prometheus), /healthz and /readyz over HTTP on HOST:PORT, e.g. 0.0.0.0:9570 "
            + "(off by default; the port has no authentication: keep it on an operators' network).",
        valueName: "host:port"))
    var metrics: String?

    func validate() throws {
        try Self.check(metrics)
    }

    static func check(_ address: String?) throws {
        guard let address else { return }
        do { _ = try HTTPEndpoint.split(address) } catch { throw ValidationError("--metrics: \(error)") }
    }

    /// The address for the `offset`-th process of a group sharing one `--metrics` (serve:
    /// the broker at PORT, worker i at PORT+1+i; port 0 stays 0, each process picking its own).
    static func address(_ address: String, offset: Int) -> String {
        guard offset > 0, let (host, port) = try? HTTPEndpoint.split(address), let number = Int(port), number > 0
        else { return address }
        let shown = host.map { $0.contains(":") ? "[\($0)]" : $0 } ?? "*"
        return "\(shown):\(number + offset)"
    }
}
