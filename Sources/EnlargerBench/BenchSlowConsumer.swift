import ArgumentParser
import CLISupport
import EnlargerProtocol
import EnlargerTransport
import Foundation
import ZeroMQ

/// Broker memory under a client that submits and then does not read. The broker runs as its
/// own `enlarger broker` process (its RSS is read from /proc); this process plays a worker
/// that answers every job at once with a large result, and a client that submits them all,
/// keeps pinging but reads nothing for a while, then reads everything.
struct BenchSlowConsumer: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "slow-consumer",
        abstract: "Broker RSS while a client leaves about 1 GB of results unread."
    )

    @Option(help: "Requests submitted.")
    var requests = 80

    @Option(help: "Bytes of each result (the default is a 2048x2048 RGB PNM).")
    var resultBytes = 2048 * 2048 * 3

    @Option(help: "Seconds the client reads nothing.")
    var hold = 5.0

    @Option(help: "Worker capacity announced to the broker.")
    var capacity = 4

    @OptionGroup var enlarger: EnlargerExecutable

    func run() throws {
        let broker = try BrokerProcess(enlarger: enlarger.path, name: "slow")
        defer { broker.stop() }
        let clients = broker.clients, workers = broker.workers
        usleep(300_000)
        let pid = broker.pid
        let context = try Context()
        let workerThread = Thread { [capacity, resultBytes] in
            // Created on the worker thread: one buffer, shared by every result sent.
            let result = Message([UInt8](repeating: 0xCD, count: resultBytes))
            answerJobs(context: context, endpoint: workers, capacity: capacity, result: result)
        }
        workerThread.start()

        let client = try Socket(context, .dealer)
        defer { client.close() }
        try client.set(.receiveHighWaterMark(1))
        try client.connect(clients)
        usleep(200_000)
        let baseline = BenchBroker.rss(pid)
        let image = Message([UInt8](repeating: 0xD8, count: 1000))
        for index in 0..<requests {
            let message = ClientToBrokerMessage.submit(.with {
                $0.requestID = "slow-\(index)"
                $0.spec.width = 64
                $0.delivery = .final
            }, image: image)
            while try !client.send(message.encoded()) { usleep(1000) }
        }
        var peak = baseline
        let holdEnd = ContinuousClock.now + .milliseconds(Int64(hold * 1000))
        while ContinuousClock.now < holdEnd {
            _ = try client.send(ClientToBrokerMessage<Message>.ping.encoded())
            peak = max(peak, BenchBroker.rss(pid))
            usleep(100_000)
        }
        var finals = 0
        let readEnd = ContinuousClock.now + .seconds(120)
        var lastPing = ContinuousClock.now
        while finals < requests, ContinuousClock.now < readEnd {
            if ContinuousClock.now - lastPing > .milliseconds(300) {
                _ = try client.send(ClientToBrokerMessage<Message>.ping.encoded())
                lastPing = ContinuousClock.now
            }
            if let frames = try client.receiveFrames() {
                if case .result(let result, _) = try BrokerToClientMessage(frames: frames), result.terminal { finals += 1 }
            } else {
                peak = max(peak, BenchBroker.rss(pid))
                usleep(1000)
            }
        }
        let unread = Double(requests * resultBytes) / 1_048_576
        print(String(format: "asked for %.0f MiB of results and read none for %.1f s", unread, hold))
        print(String(format: "broker RSS: baseline %.1f MiB, peak %.1f MiB, growth %.1f MiB",
                     Double(baseline) / 1_048_576, Double(peak) / 1_048_576, Double(peak - baseline) / 1_048_576))
        print("then read \(finals) of \(requests) results")
        if finals != requests { throw ExitCode(1) }
    }
}

/// A worker that announces `capacity` and answers every Job at once with `result`.
private func answerJobs(context: Context, endpoint: String, capacity: Int, result image: Message) {
    do {
        let socket = try Socket(context, .dealer)
        defer { socket.close() }
        try socket.connect(endpoint)
        var ready = Enlarger_V1_Ready()
        ready.capacity = UInt32(capacity)
        ready.workerName = "bench"
        _ = try socket.send(WorkerToBrokerMessage<Message>.ready(ready).encoded())
        var lastSent = ContinuousClock.now
        while true {
            // Heartbeats keep it registered while no job comes (the client is not reading).
            if ContinuousClock.now - lastSent > .milliseconds(300) {
                _ = try socket.send(WorkerToBrokerMessage<Message>.heartbeat.encoded())
                lastSent = ContinuousClock.now
            }
            guard let frames = try socket.receiveFrames() else {
                usleep(1000)
                continue
            }
            guard case .job(let job, _) = try BrokerToWorkerMessage<Message>(frames: frames) else { continue }
            var result = Enlarger_V1_JobResult()
            result.jobID = job.jobID
            result.attempt = job.attempt
            result.stage = .final
            result.terminal = true
            result.width = 2048
            result.height = 2048
            result.format = .pnm
            while try !socket.send(WorkerToBrokerMessage.jobResult(result, image: image).encoded()) { usleep(1000) }
            lastSent = ContinuousClock.now
        }
    } catch {
        // The socket closes when the benchmark ends; nothing to report.
    }
}
