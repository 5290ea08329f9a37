import ArgumentParser
import CLISupport
import Enlarger
import EnlargerProtocol
import EnlargerWorker
import Foundation
import Imaging
import Logging
import ZeroMQ

/// `cancel()` → `Cancelled` over a real broker: each request is cancelled once a worker has
/// started it; the time is that of the `cancel` call, which returns when the broker's
/// acknowledgement arrives — after the submitter's `Cancelled` on the same connection.
struct BenchCancelRoundTrip: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel-rtt",
        abstract: "Latency of cancel() through a running broker (e.g. `enlarger serve`)."
    )

    @Option(help: "A JPEG that keeps a worker busy for a while.")
    var input = "../shared/corpus/good/bimg_vertical.jpg"

    @Option(help: "Cancelled requests.")
    var runs = 200

    @OptionGroup var service: ServiceOptions

    func run() async throws {
        let bytes = try InputFile.read(path: input, maxBytes: DecodeLimits().maxInputBytes)
        var latencies: [Double] = []
        try await withEnlargerClient(brokerEndpoint: service.clientEndpoint) { client in
            for index in 0..<runs {
                let id = "cancel-rtt-\(getpid())-\(index)"
                var iterator = client.submit(ResizeRequest(id: id, image: bytes, options: .init(width: 2000), delivery: .final))
                    .makeAsyncIterator()
                // Wait until a worker has the job, so the cancel crosses broker and worker.
                while let event = try await iterator.next() {
                    if case .started = event { break }
                }
                let start = ContinuousClock.now
                let result = try await client.cancel(id)
                latencies.append(milliseconds(ContinuousClock.now - start))
                guard result == .cancelled else { throw CLIError("\(id) was \(result), not cancelled") }
                guard try await iterator.next() == nil else { throw CLIError("an event after cancel for \(id)") }
            }
        }
        print("cancel() -> Cancelled + acknowledgement over \(service.clientEndpoint), \(runs) runs: "
              + percentiles(latencies) + " (target p50 <= 1 ms)")
    }
}

/// A worker's job thread freed after a cancel: a fake broker (a ROUTER in this process)
/// sends a real `WorkerService` a job, then `CancelJob` at a random moment of it, and times
/// the `JobCancelled` that the worker sends once the job thread has stopped.
struct BenchWorkerCancel: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker-cancel",
        abstract: "Time from CancelJob reaching a worker to its JobCancelled (job thread free)."
    )

    @Option(help: "A large JPEG (e.g. the 99.6 MP corpus file).")
    var input = "../shared/corpus/good/thumbor_9643x10328.jpg"

    @Option(help: "Target width of the job.")
    var width = 720

    @Option(help: "Cancelled jobs.")
    var runs = 100

    @Option(help: "Random seed for the cancel moments.")
    var seed: UInt64 = 1

    func run() throws {
        let bytes = try InputFile.read(path: input, maxBytes: DecodeLimits().maxInputBytes)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-wbench-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: directory) }
        let endpoint = "ipc://\(directory.path)/workers.sock"
        let context = try Context()
        let router = try Socket(context, .router)
        defer { router.close() }
        try router.set(.maxMessageSize(-1))
        try router.bind(endpoint)
        var logger = Logger(label: "bench.worker")
        logger.logLevel = .error
        let worker = try WorkerService(configuration: WorkerConfiguration(brokerEndpoint: endpoint, concurrency: 1, logger: logger))
        let handle = worker.start()
        defer { try? handle.stop() }

        func receive() throws -> (peer: ZeroMQ.Message, message: WorkerToBrokerMessage<[UInt8]>) {
            let frames = try router.receiveMultipart()
            return (frames[0], try WorkerToBrokerMessage<[UInt8]>(frames: frames.dropFirst().map(\.bytes)))
        }
        func send(_ peer: ZeroMQ.Message, _ message: BrokerToWorkerMessage<[UInt8]>) throws {
            let frames = message.encoded().frames
            _ = try router.send(peer, .more)
            for (index, frame) in frames.enumerated() { _ = try router.send(frame, index < frames.count - 1 ? .more : []) }
        }
        var peer: ZeroMQ.Message
        repeat {
            let (from, message) = try receive()
            peer = from
            if case .ready = message { break }
        } while true

        var job = Enlarger_V1_Job()
        job.spec.width = UInt32(width)
        job.delivery = .final
        // One uncancelled job measures the window in which cancels are placed.
        func runJob(_ id: UInt64, cancelAfter delay: Double?) throws -> Double? {
            job.jobID = id
            job.attempt = 1
            job.requestID = "bench-\(id)"
            try send(peer, .job(job, image: bytes))
            var cancelledAt: ContinuousClock.Instant?
            let start = ContinuousClock.now
            while true {
                var poller = Poller()
                _ = poller.register(router)
                let wait: Duration? = cancelledAt == nil && delay != nil
                    ? max(.zero, start + .microseconds(Int(delay! * 1000)) - .now) : nil
                if try poller.poll(timeout: wait) == 0, cancelledAt == nil {
                    var cancel = Enlarger_V1_CancelJob()
                    cancel.jobID = id
                    cancel.attempt = 1
                    try send(peer, .cancelJob(cancel))
                    cancelledAt = .now
                    continue
                }
                let (_, message) = try receive()
                switch message {
                case .jobCancelled: return cancelledAt.map { milliseconds(ContinuousClock.now - $0) }
                case .jobResult(let result, _) where result.terminal: return delay == nil ? milliseconds(ContinuousClock.now - start) : nil
                case .jobFailed(let failed): throw CLIError("job failed: \(failed.message)")
                default: continue
                }
            }
        }
        let full = try (0..<3).map { try runJob(UInt64($0 + 1), cancelAfter: nil)! }.sorted()[1]
        print("uncancelled job: \(String(format: "%.1f", full)) ms; cancelling \(runs) jobs at random moments (seed \(seed))")
        var generator = SplitMix(seed: seed)
        var latencies: [Double] = []
        var finishedFirst = 0
        for index in 0..<runs {
            let delay = Double.random(in: 0..<(full * 0.9), using: &generator)
            if let latency = try runJob(UInt64(100 + index), cancelAfter: delay) { latencies.append(latency) } else { finishedFirst += 1 }
        }
        print("CancelJob -> JobCancelled (job thread free) over \(latencies.count) cancelled jobs "
              + "(\(finishedFirst) finished first): " + percentiles(latencies) + " (target p99 <= 10 ms)")
    }
}

func percentiles(_ values: [Double]) -> String {
    let sorted = values.sorted()
    func at(_ p: Double) -> String {
        sorted.isEmpty ? "-" : String(format: "%.3f", sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))])
    }
    return "p50 \(at(0.5)) ms, p90 \(at(0.9)) ms, p99 \(at(0.99)) ms, max \(at(1)) ms"
}
