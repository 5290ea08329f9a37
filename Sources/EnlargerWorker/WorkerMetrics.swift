import CoreMetrics
import Telemetry

/// The worker's metrics (see `--metrics`): jobs by outcome and code, where their time went
/// (decode, resize, encode, and the whole run), bytes in and out, and, published on each
/// scrape, the jobs running, waiting for memory, and the memory budget in use.
///
/// Used only on the worker's I/O thread; the registry it writes to is read by the HTTP
/// thread.
final class WorkerMetrics {
    let registry: MetricsRegistry
    private let jobCounts: MetricsRegistry.Family<CoreMetrics.Counter>
    private let runTimes: MetricsRegistry.Family<CoreMetrics.Timer>
    private let decode: CoreMetrics.Timer
    private let resize: CoreMetrics.Timer
    private let encode: CoreMetrics.Timer
    private let bytesIn: CoreMetrics.Counter
    private let bytesOut: CoreMetrics.Counter
    private let jobs: Meter
    private let waiting: Meter
    private let memoryInUse: Meter
    private let memoryBudget: Meter
    private let capacity: Meter
    private let registered: Meter

    private static let stageHelp = "Time a job spent in one step of the pipeline (summed over its degraded and final results)."

    init(registry: MetricsRegistry) {
        self.registry = registry
        jobCounts = registry.counters(
            "enlarger_worker_jobs_total", help: "Jobs ended on this worker, by outcome and error code.",
            labels: ["outcome", "code"])
        runTimes = registry.timers(
            "enlarger_worker_job_seconds", help: "Time from a job thread taking a job to its return, by outcome.",
            labels: ["outcome"])
        decode = registry.timer("enlarger_worker_stage_seconds", help: Self.stageHelp, labels: [("stage", "decode")])
        resize = registry.timer("enlarger_worker_stage_seconds", help: Self.stageHelp, labels: [("stage", "resize")])
        encode = registry.timer("enlarger_worker_stage_seconds", help: Self.stageHelp, labels: [("stage", "encode")])
        bytesIn = registry.counter("enlarger_worker_input_bytes_total", help: "Bytes of source images of the jobs run.")
        bytesOut = registry.counter("enlarger_worker_output_bytes_total", help: "Bytes of encoded results produced.")
        jobs = registry.gauge("enlarger_worker_jobs", help: "Jobs whose threads have not returned (running, waiting, finishing).")
        waiting = registry.gauge("enlarger_worker_jobs_waiting_for_memory", help: "Jobs estimated and waiting for memory.")
        memoryInUse = registry.gauge(
            "enlarger_worker_memory_in_use_bytes", help: "Memory budget held by admitted jobs (their estimated peaks).")
        memoryBudget = registry.gauge("enlarger_worker_memory_budget_bytes", help: "The memory budget jobs are admitted against.")
        capacity = registry.gauge("enlarger_worker_threads", help: "Jobs this worker runs at once (its job threads).")
        registered = registry.gauge("enlarger_worker_registered", help: "1 while registered with a broker, else 0.")
    }

    func record(_ report: WorkerReport) {
        guard case .jobEnded(let end) = report else { return }
        jobCounts(end.outcome.name, end.outcome.code).increment()
        runTimes(end.outcome.name).record(end.figures.run)
        if end.figures.decode > .zero { decode.record(end.figures.decode) }
        if end.figures.resize > .zero { resize.record(end.figures.resize) }
        if end.figures.encode > .zero { encode.record(end.figures.encode) }
        bytesIn.increment(by: end.figures.bytesIn)
        bytesOut.increment(by: end.figures.bytesOut)
    }

    func publish<Payload>(_ core: WorkerCore<Payload>) {
        jobs.set(core.jobs.count)
        waiting.set(core.jobsWaitingForMemory)
        memoryInUse.set(core.memoryInUse)
        memoryBudget.set(core.configuration.memoryBudget)
        capacity.set(core.configuration.capacity)
        registered.set(core.isRegistered ? 1 : 0)
    }
}
