import CoreMetrics
import Prometheus

/// One process's metrics, exposed in the Prometheus text format.
///
/// The services record through swift-metrics' own types (`Counter`, `Meter`, `Timer`), so
/// the code that records knows nothing of Prometheus; this registry creates them on a
/// swift-prometheus collector registry of its own (never the global one: a test process
/// runs several brokers and workers side by side), each with its help text.
///
/// Names follow Prometheus' conventions: the `enlarger_` prefix, `_total` on counters, base
/// units in the name (`_seconds`, `_bytes`).
public final class MetricsRegistry: Sendable {
    private let registry = PrometheusCollectorRegistry()

    public init() {}

    public func counter(_ name: String, help: String, labels: [(String, String)] = []) -> CoreMetrics.Counter {
        let handler = registry.makeCounter(descriptor: Self.descriptor(name, help), labels: labels)
        return CoreMetrics.Counter(label: name, dimensions: labels, handler: handler)
    }

    /// A value that goes up and down (`set`, `increment`, `decrement`).
    public func gauge(_ name: String, help: String, labels: [(String, String)] = []) -> Meter {
        let handler = registry.makeGauge(descriptor: Self.descriptor(name, help), labels: labels)
        return Meter(label: name, dimensions: labels, handler: handler)
    }

    /// A latency histogram, recorded in nanoseconds and exposed in seconds.
    public func timer(_ name: String, help: String, buckets: [Duration] = MetricsRegistry.latencyBuckets,
                      labels: [(String, String)] = []) -> CoreMetrics.Timer {
        let handler = registry.makeDurationHistogram(descriptor: Self.descriptor(name, help), labels: labels,
                                                     buckets: buckets)
        return CoreMetrics.Timer(label: name, dimensions: labels, handler: handler)
    }

    /// Counters of one name, one per set of label values, each made on first use.
    public func counters(_ name: String, help: String, labels: [String]) -> Family<CoreMetrics.Counter> {
        Family(labels: labels) { self.counter(name, help: help, labels: $0) }
    }

    /// Latency histograms of one name, one per set of label values, each made on first use.
    public func timers(_ name: String, help: String, labels: [String]) -> Family<CoreMetrics.Timer> {
        Family(labels: labels) { self.timer(name, help: help, labels: $0) }
    }

    /// Metrics of one name told apart by label values (`family("failed", "TRUNCATED")`).
    /// Used from one thread (a service's loop); the metrics it hands out are thread-safe.
    public final class Family<Metric> {
        private let labels: [String]
        private let make: ([(String, String)]) -> Metric
        private var made: [[String]: Metric] = [:]

        init(labels: [String], make: @escaping ([(String, String)]) -> Metric) {
            self.labels = labels
            self.make = make
        }

        /// The metric for these label values, in the order of the family's label names.
        public func callAsFunction(_ values: String...) -> Metric {
            precondition(values.count == labels.count, "\(labels.count) label values expected")
            if let metric = made[values] { return metric }
            let metric = make(Array(zip(labels, values)))
            made[values] = metric
            return metric
        }
    }

    /// The exposition, `text/plain; version=0.0.4`.
    public func exposition() -> [UInt8] {
        registry.emitToBuffer()
    }

    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// From a millisecond to two minutes: a thumbnail takes milliseconds, a 100 MP enlargement
    /// seconds, and a request queued behind a busy pool may wait minutes.
    public static let latencyBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(2.5), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
        .seconds(2.5), .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(120),
    ]

    private static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        // The full name is given as the metric name; the unit stays in it.
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }
}

extension CoreMetrics.Timer {
    /// Records a `Duration` (negative ones as zero).
    public func record(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        recordNanoseconds(max(0, seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000))
    }
}
