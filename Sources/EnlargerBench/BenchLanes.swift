import ArgumentParser
import CLISupport
import EnlargerProtocol
import EnlargerTransport
import Foundation
import ZeroMQ

/// Priority lanes and fair share, measured through a real broker over tcp with CURVE (so
/// that two producers are two principals). This process plays two producers, Alice and
/// Bob, each with a key of its own, and workers that take `--job-ms` per job.
///
/// 1. Alice alone: interactive requests at a steady pace; their wait (Submit to Started,
///    which the broker sends when the job reaches a worker) and latency (to the result).
/// 2. The same while Bob floods `--flood` bulk requests (as many in flight as the broker
///    lets one connection have).
/// 3. Alice and Bob both flood the same lane at once: each one's share of the completions.
struct BenchLanes: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lanes",
        abstract: "Interactive wait under another principal's bulk flood; two flooding principals' shares."
    )

    @Option(help: "Worker connections.")
    var workers = 2

    @Option(help: "Jobs each worker runs at once.")
    var capacity = 4

    @Option(help: "Milliseconds each job takes.")
    var jobMs = 5

    @Option(help: "Alice's interactive requests in each of the first two phases.")
    var interactive = 200

    @Option(help: "Milliseconds between Alice's requests.")
    var intervalMs = 20

    @Option(help: "Bob's bulk requests in the second phase.")
    var flood = 5000

    @Option(help: "Completions counted in the third phase.")
    var shareCompletions = 4000

    @OptionGroup var enlarger: EnlargerExecutable

    func run() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-bench-lanes-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: directory) }
        for sub in ["keys", "clients", "workers"] {
            try FileManager.default.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        let keys = directory.appendingPathComponent("keys").path
        let server = try CurveKeyPair.generate(), worker = try CurveKeyPair.generate()
        let alice = try CurveKeyPair.generate(), bob = try CurveKeyPair.generate()
        let serverFiles = try server.write(name: "broker", directory: keys)
        try alice.publicKey.writePublicKeyFile(to: directory.appendingPathComponent("clients/alice.pub").path)
        try bob.publicKey.writePublicKeyFile(to: directory.appendingPathComponent("clients/bob.pub").path)
        try worker.publicKey.writePublicKeyFile(to: directory.appendingPathComponent("workers/worker.pub").path)

        // Below Linux's ephemeral range (32768 up), which outgoing connections take from.
        let port = Int.random(in: 21000...32000)
        let clients = "tcp://127.0.0.1:\(port)", workersEndpoint = "tcp://127.0.0.1:\(port + 1)"
        let broker = try BrokerProcess(enlarger: enlarger.path, arguments: [
            "--clients", clients, "--workers", workersEndpoint, "--server-key", serverFiles.keyFile,
            "--client-keys", directory.appendingPathComponent("clients").path,
            "--worker-keys", directory.appendingPathComponent("workers").path,
            "--queue-limit", "20000", "--log-level", "warning", "--cache-mib", "0",
        ])
        defer { broker.stop() }
        usleep(300_000)

        let context = try Context()
        let stop = StopFlag()
        var threads: [Thread] = []
        for index in 0..<workers {
            let thread = Thread { [capacity, jobMs] in
                runTimedWorker(context: context, endpoint: workersEndpoint, keyPair: worker, serverKey: server.publicKey,
                               name: "bench-\(index)", capacity: capacity, jobTime: .milliseconds(jobMs), stop: stop)
            }
            thread.start()
            threads.append(thread)
        }
        defer { stop.set() }

        var producers = try Producers(context: context, endpoint: clients, server: server.publicKey, keys: [alice, bob])
        usleep(300_000)
        print("\(workers) workers × \(capacity) slots, \(jobMs) ms a job; interactive reserve 25% (the broker's default)")

        // 1. Alice alone.
        let alone = try producers.run(aliceEvery: .milliseconds(intervalMs), aliceRequests: interactive, bobBulk: 0,
                                      bobLane: .bulk)
        print("alone:    Alice's wait " + percentiles(alone.aliceWaits) + "; latency " + percentiles(alone.aliceLatencies))
        // 2. While Bob floods the bulk lane.
        let flooded = try producers.run(aliceEvery: .milliseconds(intervalMs), aliceRequests: interactive, bobBulk: flood,
                                        bobLane: .bulk)
        print("flooded:  Alice's wait " + percentiles(flooded.aliceWaits) + "; latency " + percentiles(flooded.aliceLatencies))
        print(String(format: "          (Bob had %d bulk requests completed meanwhile, %d waiting at the end)",
                     flooded.bobCompleted, flooded.bobLeft))
        let p99Alone = alone.aliceLatencies.sorted()[Int(Double(alone.aliceLatencies.count) * 0.99)]
        let p99Flooded = flooded.aliceLatencies.sorted()[Int(Double(flooded.aliceLatencies.count) * 0.99)]
        print(String(format: "interactive p99 latency flooded / alone: %.2f", p99Flooded / p99Alone))
        // 3. Both flood one lane.
        let shares = try producers.share(completions: shareCompletions)
        print(String(format: "two equal principals flooding the bulk lane: Alice %d, Bob %d of %d completions (%.1f%% / %.1f%%)",
                     shares.0, shares.1, shares.0 + shares.1, Double(shares.0) * 100 / Double(shares.0 + shares.1),
                     Double(shares.1) * 100 / Double(shares.0 + shares.1)))
        producers.close()
    }
}

/// Set once, read by the worker threads.
private final class StopFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    func set() { lock.lock(); stopped = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return stopped }
}

/// Alice (index 0) and Bob (index 1), each a DEALER with its own key.
private struct Producers {
    struct Outcome {
        var aliceWaits: [Double] = []
        var aliceLatencies: [Double] = []
        var bobCompleted = 0
        var bobLeft = 0
    }

    let sockets: [Socket]
    var poller = Poller()
    var serial = 0
    let image: [UInt8] = [0xFF, 0xD8, 0xFF, 0xDB] + [UInt8](repeating: 0, count: 60)

    init(context: Context, endpoint: String, server: CurvePublicKey, keys: [CurveKeyPair]) throws {
        var sockets: [Socket] = []
        for key in keys {
            let socket = try Socket(context, .dealer)
            try socket.setCurveClient(key, serverKey: server)
            try socket.set(.routingID(Array(UUID().uuidString.utf8.prefix(16))))
            try socket.connect(endpoint)
            sockets.append(socket)
        }
        self.sockets = sockets
        for socket in sockets { poller.register(socket) }
    }

    func close() { for socket in sockets { socket.close() } }

    mutating func submit(_ producer: Int, lane: Enlarger_V1_Priority) throws -> String {
        serial += 1
        let id = "\(producer == 0 ? "a" : "b")\(serial)"
        var submit = Enlarger_V1_Submit()
        submit.requestID = id
        submit.spec.width = 16
        submit.delivery = .final
        submit.priority = lane
        let message = ClientToBrokerMessage.submit(submit, image: Message(image)).encoded()
        while try !sockets[producer].send(message) { usleep(100) }
        return id
    }

    /// Both producers show signs of life every 300 ms (they have live requests).
    func pingIfDue(_ lastPing: inout ContinuousClock.Instant) throws {
        guard ContinuousClock.now - lastPing > .milliseconds(300) else { return }
        for socket in sockets { _ = try socket.send(ClientToBrokerMessage<Message>.ping.encoded()) }
        lastPing = ContinuousClock.now
    }

    /// Alice submits interactive requests every `aliceEvery`; Bob keeps up to 500 bulk ones
    /// in flight until `bobBulk` have been sent. Ends when Alice's are all done.
    mutating func run(aliceEvery: Duration, aliceRequests: Int, bobBulk: Int, bobLane: Enlarger_V1_Priority) throws -> Outcome {
        var outcome = Outcome()
        var submittedAt: [String: ContinuousClock.Instant] = [:]
        var aliceDone = 0, aliceSent = 0, bobSent = 0, bobLive = 0
        var nextAlice = ContinuousClock.now + .milliseconds(200)
        var lastPing = ContinuousClock.now
        // Bob's flood gets going first.
        while bobSent < bobBulk && bobLive < 500 {
            _ = try submit(1, lane: bobLane)
            bobSent += 1
            bobLive += 1
        }
        while aliceDone < aliceRequests {
            let now = ContinuousClock.now
            if aliceSent < aliceRequests && now >= nextAlice {
                let id = try submit(0, lane: .interactive)
                submittedAt[id] = ContinuousClock.now
                aliceSent += 1
                nextAlice = nextAlice + aliceEvery
            }
            try pingIfDue(&lastPing)
            _ = try poller.poll(timeout: .milliseconds(1))
            for producer in 0..<2 {
                while let frames = try sockets[producer].receiveFrames() {
                    guard let event = try? BrokerToClientMessage(frames: frames) else { continue }
                    switch event {
                    case .started(let started) where producer == 0:
                        if let at = submittedAt[started.requestID] {
                            outcome.aliceWaits.append(milliseconds(ContinuousClock.now - at))
                        }
                    case .result(let result, _) where result.terminal:
                        if producer == 0 {
                            if let at = submittedAt.removeValue(forKey: result.requestID) {
                                outcome.aliceLatencies.append(milliseconds(ContinuousClock.now - at))
                            }
                            aliceDone += 1
                        } else {
                            outcome.bobCompleted += 1
                            bobLive -= 1
                            if bobSent < bobBulk {
                                _ = try submit(1, lane: bobLane)
                                bobSent += 1
                                bobLive += 1
                            }
                        }
                    case .failed(let failed):
                        throw CLIError("\(failed.requestID) failed: \(failed.message)")
                    case .rejected(let rejected):
                        throw CLIError("\(rejected.requestID) rejected: \(rejected.message)")
                    default:
                        break
                    }
                }
            }
        }
        outcome.bobLeft = bobLive
        // Let Bob's remaining requests finish before the next phase.
        try drain(1, live: bobLive)
        return outcome
    }

    /// Both keep 400 bulk requests in flight; counts whose complete among the first
    /// `completions`.
    mutating func share(completions: Int) throws -> (Int, Int) {
        var live = [0, 0], done = [0, 0]
        for producer in 0..<2 {
            while live[producer] < 400 {
                _ = try submit(producer, lane: .bulk)
                live[producer] += 1
            }
        }
        var lastPing = ContinuousClock.now
        while done[0] + done[1] < completions {
            try pingIfDue(&lastPing)
            _ = try poller.poll(timeout: .milliseconds(1))
            for producer in 0..<2 {
                while let frames = try sockets[producer].receiveFrames() {
                    guard case .result(let result, _) = try BrokerToClientMessage(frames: frames), result.terminal else { continue }
                    done[producer] += 1
                    _ = try submit(producer, lane: .bulk)
                }
            }
        }
        let counted = (done[0], done[1])
        try drain([400, 400])
        return counted
    }

    /// Reads `producer`'s results until `live` more have ended.
    mutating func drain(_ producer: Int, live: Int) throws {
        try drain(producer == 0 ? [live, 0] : [0, live])
    }

    /// Reads results until `live[i]` more of producer i's have ended.
    mutating func drain(_ live: [Int]) throws {
        var left = live
        var lastPing = ContinuousClock.now
        while left[0] > 0 || left[1] > 0 {
            try pingIfDue(&lastPing)
            _ = try poller.poll(timeout: .milliseconds(5))
            for index in 0..<2 {
                while let frames = try sockets[index].receiveFrames() {
                    guard let event = try? BrokerToClientMessage(frames: frames) else { continue }
                    switch event {
                    case .result(let result, _) where result.terminal: left[index] -= 1
                    case .failed, .rejected: left[index] -= 1
                    default: break
                    }
                }
            }
        }
    }
}

/// A worker that takes `jobTime` per job, `capacity` at a time.
private func runTimedWorker(context: Context, endpoint: String, keyPair: CurveKeyPair, serverKey: CurvePublicKey,
                            name: String, capacity: Int, jobTime: Duration, stop: StopFlag) {
    do {
        let socket = try Socket(context, .dealer)
        defer { socket.close() }
        try socket.setCurveClient(keyPair, serverKey: serverKey)
        try socket.connect(endpoint)
        var ready = Enlarger_V1_Ready()
        ready.capacity = UInt32(capacity)
        ready.workerName = name
        _ = try socket.send(WorkerToBrokerMessage<Message>.ready(ready).encoded())
        var running: [(due: ContinuousClock.Instant, job: Enlarger_V1_Job)] = []
        var lastSent = ContinuousClock.now
        var poller = Poller()
        poller.register(socket)
        let output = Message([UInt8](repeating: 0xCD, count: 100))
        while !stop.isSet {
            let now = ContinuousClock.now
            while let first = running.first, first.due <= now {
                running.removeFirst()
                var result = Enlarger_V1_JobResult()
                result.jobID = first.job.jobID
                result.attempt = first.job.attempt
                result.stage = .final
                result.terminal = true
                result.width = 16
                result.height = 16
                _ = try socket.send(WorkerToBrokerMessage.jobResult(result, image: output).encoded())
                lastSent = now
            }
            if now - lastSent > .milliseconds(300) {
                _ = try socket.send(WorkerToBrokerMessage<Message>.heartbeat.encoded())
                lastSent = now
            }
            let wait = running.first.map { max(.zero, $0.due - ContinuousClock.now) } ?? .milliseconds(50)
            _ = try poller.poll(timeout: wait)
            while let frames = try socket.receiveFrames() {
                guard case .job(let job, _) = try BrokerToWorkerMessage<Message>(frames: frames) else { continue }
                running.append((ContinuousClock.now + jobTime, job))
                _ = try socket.send(WorkerToBrokerMessage<Message>.jobStarted(.with {
                    $0.jobID = job.jobID
                    $0.attempt = job.attempt
                }).encoded())
            }
        }
    } catch {
        // The socket closes when the benchmark ends; nothing to report.
    }
}
