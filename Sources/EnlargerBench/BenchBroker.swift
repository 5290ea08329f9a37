import ArgumentParser
import CLISupport
import EnlargerProtocol
import Foundation
import ZeroMQ

/// Broker CPU per request and broker memory under a load of tiny jobs. The broker runs as
/// its own `enlarger broker` process so that its CPU time and RSS can be read from /proc;
/// this process plays a client (a window of outstanding Submits) and a worker that answers
/// every Job at once. The `enlarger` binary is looked for beside this one (both are products
/// of the same package build) unless `--enlarger` names it.
struct BenchBroker: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "broker",
        abstract: "Broker CPU time per request and RSS drift over many tiny requests."
    )

    @Option(help: "Requests measured after warm-up.")
    var requests = 100_000

    @Option(help: "Warm-up requests (not measured).")
    var warmup = 10_000

    @Option(help: "Requests outstanding at once.")
    var inFlight = 256

    @Option(help: "Worker capacity announced to the broker.")
    var capacity = 64

    @OptionGroup var enlarger: EnlargerExecutable

    @Flag(inversion: .prefixedNo,
          help: "Also measure a raw ZeroMQ relay moving the same messages (see RawRelay), and print the ratio.")
    var relay = true

    @Option(name: .customLong("broker-option"), parsing: .unconditionalSingleValue,
            help: "An extra argument for `enlarger broker` (repeat it: --broker-option --log-level --broker-option notice).")
    var brokerOptions: [String] = []

    func run() throws {
        let broker = try BrokerProcess(enlarger: enlarger.path, name: "broker",
                                       arguments: ["--queue-limit", "\(inFlight * 2)"] + brokerOptions)
        defer { broker.stop() }
        let clients = broker.clients, workers = broker.workers
        usleep(200_000)

        let context = try Context()
        let worker = Thread { runFakeWorker(context: context, endpoint: workers, capacity: capacity) }
        worker.start()

        let client = try Socket(context, .dealer)
        defer { client.close() }
        try client.connect(clients)
        let image: [UInt8] = Array(repeating: 0xAB, count: 100)
        var spec = Enlarger_V1_ResizeSpec()
        spec.width = 10
        // Everything goes over one connection: what it receives is the one-connection figure.
        var sent = 0, done = 0, received = 0
        func submit() throws {
            var header = Enlarger_V1_Submit()
            header.requestID = "b\(sent)"
            header.spec = spec
            header.delivery = .final
            for (index, frame) in ClientToBrokerMessage.submit(header, image: image).encoded().frames.enumerated() {
                _ = try client.send(frame, index < 2 ? .more : [])
            }
            sent += 1
        }
        /// Runs `count` more requests through the broker with the window kept full.
        func drive(_ count: Int) throws {
            let target = done + count
            while sent < min(target, done + inFlight) { try submit() }
            while done < target {
                let frames = try client.receiveMultipart().map(\.bytes)
                received += 1
                guard case .result(let result, _) = try BrokerToClientMessage<[UInt8]>(frames: frames) else { continue }
                if result.terminal {
                    done += 1
                    if sent < target { try submit() }
                }
            }
        }

        let pid = broker.pid
        try drive(warmup)
        let receivedBefore = received
        let rssAfterWarmup = Self.rss(pid)
        let cpuBefore = Self.cpuSeconds(pid)
        let start = ContinuousClock.now
        var samples: [Int] = []
        for _ in 0..<10 {
            try drive(requests / 10)
            samples.append(Self.rss(pid))
        }
        let elapsed = milliseconds(ContinuousClock.now - start) / 1000
        let cpu = Self.cpuSeconds(pid) - cpuBefore
        print("\(requests) requests after \(warmup) warm-up, \(inFlight) in flight, worker capacity \(capacity)")
        print(String(format: "throughput %.0f requests/s (target >= 50000); broker CPU %.2f s = %.1f µs per request (target <= 15)",
                     Double(requests) / elapsed, cpu, cpu / Double(requests) * 1e6))
        print(String(format: "one client connection received %.0f messages/s, %.0f of them results (target >= 20000 results/s)",
                     Double(received - receivedBefore) / elapsed, Double(requests) / elapsed))
        if relay {
            let (relayRate, relayCPU) = try measureRelay(context: context)
            print(String(format: "raw ZeroMQ relay, same messages and window: %.0f requests/s, %.1f µs per request; "
                         + "broker/relay CPU per request %.2f", relayRate, relayCPU * 1e6,
                         cpu / Double(requests) / relayCPU))
        }
        let drift = Double(samples.last! - rssAfterWarmup) / Double(rssAfterWarmup) * 100
        print("broker RSS after warm-up \(rssAfterWarmup / 1024) KB; every \(requests / 10) requests: "
              + samples.map { "\($0 / 1024)" }.joined(separator: " ") + " KB; "
              + String(format: "drift %+.1f%% (target within ±10%%)", drift))
    }

    /// The raw relay's throughput and CPU seconds per request, driven as the broker was.
    private func measureRelay(context: Context) throws -> (rate: Double, cpuPerRequest: Double) {
        let child = try RawRelay.Child()
        defer { child.stop() }
        usleep(200_000)
        let endpoint = child.workers
        let worker = Thread { RawRelay.runWorker(context: context, endpoint: endpoint) }
        worker.start()
        usleep(100_000)
        let client = try Socket(context, .dealer)
        defer { client.close() }
        try client.connect(child.clients)
        let image = [UInt8](repeating: 0xAB, count: 100)
        var sent = 0, done = 0
        var frames: [Message] = []
        func submit() throws {
            _ = try client.send(RawRelay.submitTag, .more)
            _ = try client.send(RawRelay.header, .more)
            _ = try client.send(image)
            sent += 1
        }
        func drive(_ count: Int) throws {
            let target = done + count
            while sent < min(target, done + inFlight) { try submit() }
            while done < target {
                _ = try client.receive(multipart: &frames, wait: true)
                guard frames.first?.bytes == RawRelay.resultTag else { continue }
                done += 1
                if sent < target { try submit() }
            }
        }
        try drive(warmup)
        let cpuBefore = Self.cpuSeconds(child.pid)
        let start = ContinuousClock.now
        try drive(requests)
        let elapsed = milliseconds(ContinuousClock.now - start) / 1000
        let cpu = Self.cpuSeconds(child.pid) - cpuBefore
        return (Double(requests) / elapsed, cpu / Double(requests))
    }

    /// User + system CPU seconds of a process, from /proc/PID/stat.
    static func cpuSeconds(_ pid: pid_t) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command name: state is field 3, utime 14, stime 15 (1-based in proc(5)).
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident set size in bytes, from /proc/PID/status.
    static func rss(_ pid: pid_t) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
        return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
    }
}

/// A worker that announces `capacity` and answers every Job at once with a terminal result.
private func runFakeWorker(context: Context, endpoint: String, capacity: Int) {
    do {
        let socket = try Socket(context, .dealer)
        defer { socket.close() }
        try socket.connect(endpoint)
        var ready = Enlarger_V1_Ready()
        ready.capacity = UInt32(capacity)
        ready.workerName = "bench"
        try send(WorkerToBrokerMessage<[UInt8]>.ready(ready).encoded().frames, on: socket)
        let output: [UInt8] = Array(repeating: 0xCD, count: 100)
        while true {
            let frames = try socket.receiveMultipart().map(\.bytes)
            guard case .job(let job, _) = try BrokerToWorkerMessage<[UInt8]>(frames: frames) else { continue }
            var result = Enlarger_V1_JobResult()
            result.jobID = job.jobID
            result.attempt = job.attempt
            result.stage = .final
            result.terminal = true
            result.width = 10
            result.height = 10
            try send(WorkerToBrokerMessage.jobResult(result, image: output).encoded().frames, on: socket)
        }
    } catch {
        // The socket closes when the benchmark ends; nothing to report.
    }
}

private func send(_ frames: [[UInt8]], on socket: Socket) throws {
    for (index, frame) in frames.enumerated() {
        _ = try socket.send(frame, index < frames.count - 1 ? .more : [])
    }
}
