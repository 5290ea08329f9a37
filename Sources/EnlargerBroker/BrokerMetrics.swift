import CoreMetrics
import EnlargerProtocol
import Telemetry

/// The broker's metrics (see `--metrics`). Requests are counted and timed as they end;
/// gauges and the broker's other counters are published from its status whenever a scrape
/// asks (through the loop's probe), so a scrape sees the state after it arrived.
///
/// Used only on the broker loop's thread; the registry it writes to is read by the HTTP
/// thread.
final class BrokerMetrics {
    let registry: MetricsRegistry
    private let requests: MetricsRegistry.Family<CoreMetrics.Counter>
    private let durations: MetricsRegistry.Family<CoreMetrics.Timer>
    private let queueWait: CoreMetrics.Timer
    private let bytesIn: CoreMetrics.Counter
    private let bytesOut: CoreMetrics.Counter
    private let queueDepth: Meter
    private let queueLimit: Meter
    private let inFlight: Meter
    private let workers: Meter
    private let capacity: Meter
    private let clients: Meter
    private let clientBytesWaiting: Meter
    private let uptime: Meter
    private let cacheEntries: Meter
    private let cacheBytes: Meter
    private let cacheEvictions: CoreMetrics.Counter
    private var publishedEvictions: UInt64 = 0
    private let totals: [(KeyPath<Enlarger_V1_Totals, UInt64>, CoreMetrics.Counter)]
    private var published = Enlarger_V1_Totals()

    init(registry: MetricsRegistry) {
        self.registry = registry
        requests = registry.counters(
            "enlarger_requests_total", help: "Requests ended, by outcome and code (OK if finished, CANCELLED if cancelled, else the contract's error code).",
            labels: ["outcome", "code"])
        durations = registry.timers(
            "enlarger_request_duration_seconds",
            help: "Time from a request's acceptance to its terminal event, by outcome.", labels: ["outcome"])
        queueWait = registry.timer(
            "enlarger_request_queue_wait_seconds",
            help: "Time from a request's acceptance to its first dispatch to a worker.")
        bytesIn = registry.counter("enlarger_input_bytes_total", help: "Bytes of source images in accepted requests.")
        bytesOut = registry.counter("enlarger_output_bytes_total", help: "Bytes of results sent toward clients.")
        queueDepth = registry.gauge("enlarger_queue_depth", help: "Requests accepted and waiting for a worker.")
        queueLimit = registry.gauge("enlarger_queue_limit", help: "Requests that may wait before Submits are refused OVERLOADED.")
        inFlight = registry.gauge("enlarger_requests_in_flight", help: "Requests held by workers.")
        workers = registry.gauge("enlarger_workers", help: "Workers registered.")
        capacity = registry.gauge("enlarger_worker_capacity", help: "Jobs the registered workers run at once, together.")
        clients = registry.gauge("enlarger_clients", help: "Client connections with live requests.")
        clientBytesWaiting = registry.gauge(
            "enlarger_client_backlog_bytes", help: "Bytes waiting at the broker for clients that are not reading.")
        uptime = registry.gauge("enlarger_uptime_seconds", help: "Seconds since the broker started.")
        cacheEntries = registry.gauge("enlarger_cache_entries", help: "Results held in the result cache.")
        cacheBytes = registry.gauge("enlarger_cache_bytes", help: "Bytes held in the result cache (its limit is --cache-mib).")
        cacheEvictions = registry.counter("enlarger_cache_evictions_total", help: "Results dropped from the cache to make room.")
        func total(_ name: String, _ help: String, _ path: KeyPath<Enlarger_V1_Totals, UInt64>)
            -> (KeyPath<Enlarger_V1_Totals, UInt64>, CoreMetrics.Counter)
        {
            (path, registry.counter("enlarger_\(name)_total", help: help))
        }
        totals = [
            total("submits", "Submits received, accepted or not.", \.submitted),
            total("accepted", "Submits accepted (each ends once, counted in enlarger_requests_total).", \.accepted),
            total("duplicate_ids", "Submits refused DUPLICATE_ID (the id was live).", \.duplicateIds),
            total("late_results_dropped", "Worker frames about jobs already ended or retried, dropped.", \.lateResultsDropped),
            total("malformed_dropped", "Malformed messages dropped, from clients or workers.", \.malformedDropped),
            total("workers_lost", "Workers declared dead (silent, unreachable, or reset).", \.workersLost),
            total("workers_disconnected", "Workers that left gracefully.", \.workersDisconnected),
            total("jobs_requeued", "Jobs put back on the queue after their worker was lost or left.", \.jobsRequeued),
            total("clients_vanished", "Clients given up on (silent or not reading) with live requests.", \.clientsVanished),
            total("unroutable", "Messages for peers that were no longer connected.", \.unroutable),
            total("cancel_acks_timed_out", "Cancelled jobs whose worker never acknowledged; the worker was retired.",
                  \.cancelAcksTimedOut),
            total("deadlines_exceeded", "Requests that failed DEADLINE_EXCEEDED.", \.deadlinesExceeded),
            total("client_sends_deferred", "Times a client's pipe was full and messages waited at the broker.",
                  \.clientSendsDeferred),
            total("jobs_quarantined", "Jobs moved to run alone after a worker died running them with others.",
                  \.jobsQuarantined),
            total("protocol_breaches", "Worker results that broke their job's framing; the request failed INTERNAL.",
                  \.protocolBreaches),
            total("cache_hits", "Requests answered from the result cache (no worker ran).", \.cacheHits),
            total("cache_misses", "Requests with a digest that the result cache could not answer.", \.cacheMisses),
            total("jobs_shared", "Requests that joined an identical request's live job.", \.jobsShared),
            total("batches_completed", "Batches whose every item got its result.", \.batchesCompleted),
            total("batches_failed", "Batches ended by an item that failed or was refused.", \.batchesFailed),
            total("batches_cancelled", "Batches ended by a cancelled item.", \.batchesCancelled),
        ]
    }

    /// A request ended or was rejected.
    func record(_ report: BrokerReport) {
        switch report {
        case .requestEnded(let end):
            requests(end.outcome.name, end.outcome.code).increment()
            if let wait = end.queueWait { queueWait.record(wait) }
            durations(end.outcome.name).record(end.duration)
            bytesIn.increment(by: end.bytesIn)
            bytesOut.increment(by: end.bytesOut)
        case .requestRejected(_, let code):
            let outcome = RequestOutcome.rejected(code)
            requests(outcome.name, outcome.code).increment()
        default:
            break
        }
    }

    /// The loop's state, on a scrape.
    func publish(_ status: Enlarger_V1_StatusReply) {
        queueDepth.set(Int(status.queueDepth))
        queueLimit.set(Int(status.queueLimit))
        inFlight.set(Int(status.inFlight))
        workers.set(status.workers.count)
        capacity.set(status.workers.reduce(0) { $0 + Int($1.capacity) })
        clients.set(Int(status.clients))
        clientBytesWaiting.set(Int(status.clientBytesWaiting))
        uptime.set(Double(status.uptimeMs) / 1000)
        cacheEntries.set(Int(status.cache.entries))
        cacheBytes.set(Int(status.cache.bytes))
        if status.cache.evictions > publishedEvictions {
            cacheEvictions.increment(by: Int64(clamping: status.cache.evictions - publishedEvictions))
            publishedEvictions = status.cache.evictions
        }
        for (path, counter) in totals {
            let now = status.totals[keyPath: path], before = published[keyPath: path]
            if now > before { counter.increment(by: Int64(now - before)) }
        }
        published = status.totals
    }
}
