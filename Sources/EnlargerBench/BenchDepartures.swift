import ArgumentParser
import CLISupport
import EnlargerProtocol
import EnlargerTransport
import Foundation
import ZeroMQ

/// Broker memory as clients leave with work outstanding: each of many connections submits
/// one request, hears it accepted and closes; the worker answers only after the client has
/// gone (or is told to cancel). What the broker keeps per departed client must be bounded:
/// its RSS is sampled as connections come and go, and once everything has settled.
struct BenchDepartures: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "departures",
        abstract: "Broker RSS as many clients disconnect with a request still running."
    )

    @Option(help: "Client connections, one request each.")
    var connections = 24_000

    @Option(help: "Milliseconds the worker takes to answer a job.")
    var answerDelayMs = 50

    @Option(help: "Seconds to wait after the last client before the settled sample (the broker's default client patience is 30).")
    var settle = 35.0

    @OptionGroup var enlarger: EnlargerExecutable

    func validate() throws {
        guard connections >= 1 else { throw ValidationError("--connections must be at least 1") }
        guard answerDelayMs >= 0 else { throw ValidationError("--answer-delay-ms must not be negative") }
        guard settle >= 0 else { throw ValidationError("--settle must not be negative") }
    }

    func run() throws {
        let broker = try BrokerProcess(enlarger: enlarger.path, name: "left")
        defer { broker.stop() }
        let clients = broker.clients, workers = broker.workers
        usleep(300_000)
        let pid = broker.pid
        let context = try Context()
        let delay = Duration.milliseconds(answerDelayMs)
        let workerThread = Thread { answerLate(context: context, endpoint: workers, delay: delay) }
        workerThread.start()
        usleep(300_000)

        let baseline = BenchBroker.rss(pid)
        let image = [UInt8](repeating: 0xD8, count: 1000)
        var samples: [Int] = []
        var accepted = 0
        var refusals: [String: Int] = [:]
        let every = max(1, connections / 6)
        let start = ContinuousClock.now
        for index in 0..<connections {
            let client = try Socket(context, .dealer)
            try client.connect(clients)
            let submit = ClientToBrokerMessage.submit(.with {
                $0.requestID = "left-\(index)"
                $0.spec.width = 64
                $0.delivery = .final
            }, image: image)
            for (position, frame) in submit.encoded().frames.enumerated() {
                _ = try client.send(frame, position < 2 ? .more : [])
            }
            // Until Accepted (or Rejected): the request is the broker's before the client goes.
            let deadline = ContinuousClock.now + .seconds(5)
            while ContinuousClock.now < deadline {
                guard let frames = try client.receiveFrames() else {
                    usleep(100)
                    continue
                }
                switch try BrokerToClientMessage(frames: frames) {
                case .accepted: accepted += 1
                case .rejected(let rejected): refusals[rejected.message, default: 0] += 1
                default: continue
                }
                break
            }
            client.close()
            if (index + 1) % every == 0 { samples.append(BenchBroker.rss(pid)) }
        }
        let elapsed = ContinuousClock.now - start
        // Every job is answered or cancelled, the broker notices every departure, and what
        // waited for a departed client outlives its patience.
        var settling: [Int] = []
        let settleEnd = ContinuousClock.now + .milliseconds(Int64(settle * 1000))
        while ContinuousClock.now < settleEnd {
            sleep(5)
            settling.append(BenchBroker.rss(pid))
        }
        let settled = BenchBroker.rss(pid)
        let status = try Self.status(context: context, endpoint: clients)
        let peak = max(samples.max() ?? baseline, settled)
        let mib = { (bytes: Int) in String(format: "%.1f", Double(bytes) / 1_048_576) }
        print("\(connections) clients each submitted one request (\(accepted) accepted) and left before its answer "
              + "(the worker answers after \(answerDelayMs) ms), in \(elapsed)")
        for (reason, count) in refusals.sorted(by: { $0.value > $1.value }) { print("refused \(count)×: \(reason)") }
        print("broker RSS MiB: baseline \(mib(baseline)); every \(every) clients: "
              + samples.map(mib).joined(separator: " ") + "; settled \(mib(settled))")
        print("while settling, every 5 s: " + settling.map(mib).joined(separator: " "))
        print("then the broker's status: \(status.clients) clients, \(status.queueDepth) queued, "
              + "\(status.inFlight) in flight, \(status.clientBytesWaiting) bytes waiting for clients")
        print(String(format: "growth %.2f KiB per departed client at the peak, %.2f KiB once settled",
                     Double(peak - baseline) / 1024 / Double(connections),
                     Double(settled - baseline) / 1024 / Double(connections)))
    }
}

extension BenchDepartures {
    /// The broker's Status, asked on a connection of its own.
    static func status(context: Context, endpoint: String) throws -> Enlarger_V1_StatusReply {
        let socket = try Socket(context, .dealer)
        defer { socket.close() }
        try socket.connect(endpoint)
        _ = try socket.send(ClientToBrokerMessage<Message>.statusRequest.encoded())
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            guard let frames = try socket.receiveFrames() else {
                usleep(1000)
                continue
            }
            if case .statusReply(let reply) = try BrokerToClientMessage(frames: frames) { return reply }
        }
        throw CLIError("the broker did not answer Status")
    }
}

/// A worker that answers every Job `delay` after it came (and acknowledges cancels at once).
private func answerLate(context: Context, endpoint: String, delay: Duration) {
    do {
        let socket = try Socket(context, .dealer)
        defer { socket.close() }
        try socket.connect(endpoint)
        var ready = Enlarger_V1_Ready()
        ready.capacity = WireLimits.maxCapacity
        ready.workerName = "bench"
        _ = try socket.send(WorkerToBrokerMessage<Message>.ready(ready).encoded())
        let output = Message([UInt8](repeating: 0xCD, count: 100))
        var pending: [(job: Enlarger_V1_Job, due: ContinuousClock.Instant)] = []
        var lastSent = ContinuousClock.now
        while true {
            let now = ContinuousClock.now
            while let first = pending.first, first.due <= now {
                pending.removeFirst()
                var result = Enlarger_V1_JobResult()
                result.jobID = first.job.jobID
                result.attempt = first.job.attempt
                result.stage = .final
                result.terminal = true
                result.width = 10
                result.height = 10
                while try !socket.send(WorkerToBrokerMessage.jobResult(result, image: output).encoded()) { usleep(1000) }
                lastSent = now
            }
            if now - lastSent > .milliseconds(300) {
                _ = try socket.send(WorkerToBrokerMessage<Message>.heartbeat.encoded())
                lastSent = now
            }
            guard let frames = try socket.receiveFrames() else {
                usleep(500)
                continue
            }
            switch try BrokerToWorkerMessage<Message>(frames: frames) {
            case .job(let job, _):
                pending.append((job, ContinuousClock.now + delay))
            case .cancelJob(let cancel):
                pending.removeAll { $0.job.jobID == cancel.jobID && $0.job.attempt == cancel.attempt }
                var cancelled = Enlarger_V1_JobCancelled()
                cancelled.jobID = cancel.jobID
                cancelled.attempt = cancel.attempt
                _ = try socket.send(WorkerToBrokerMessage<Message>.jobCancelled(cancelled).encoded())
                lastSent = ContinuousClock.now
            default:
                break
            }
        }
    } catch {
        // The socket closes when the benchmark ends; nothing to report.
    }
}
