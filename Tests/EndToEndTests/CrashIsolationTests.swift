import Enlarger
import EnlargerProtocol
import Foundation
import Imaging
import SwiftProtobuf
import TestSupport
import XCTest
import ZeroMQ

/// A request that crashes every worker it runs on, among ordinary requests on workers that
/// run two jobs at once, over real sockets. The pool is simulated: each worker dies without a
/// word (its socket closed, no Disconnect) as soon as it receives the poison, and a fresh one
/// registers shortly after, as `serve` restarts a dead worker process. The poison must fail
/// WORKER_LOST on its own; every ordinary request must finish, whichever worker it shared.
final class CrashIsolationTests: XCTestCase {
    private static let poison: [UInt8] = Array("poison".utf8)

    func testAPoisonRequestFailsAloneAndCostsNoOtherRequest() async throws {
        let cluster = try Cluster(self, heartbeat: .milliseconds(100)) { configuration in
            configuration.broker.maxRetries = 2
            configuration.broker.quarantineReservationDelay = .milliseconds(200)
        }
        let client = try cluster.client()
        let pool = CrashingPool(endpoint: cluster.workersEndpoint, workers: 2)
        let poolThread = Thread { pool.run() }
        poolThread.start()
        defer { pool.stop() }
        try await cluster.waitForWorkers(2, client: client)

        let seed = ProcessInfo.processInfo.environment["ENLARGER_SEED"].flatMap(UInt64.init)
            ?? UInt64.random(in: 0...UInt64(UInt32.max))
        print("crash isolation: seed \(seed) (replay the submission timing with ENLARGER_SEED=\(seed))")
        var random = SeededGenerator(seed: seed)
        let innocentCount = 40
        // Three ordinary requests go first at once, so the poison's first run shares a worker.
        let poisonAt = 3
        var tasks: [(name: String, task: Task<Result<Void, EnlargerClientError>, Never>)] = []
        for index in 0..<innocentCount {
            if index == poisonAt {
                let events = client.submit(ResizeRequest(id: "poison", image: Self.poison, options: .init(width: 8),
                                                         delivery: .final, timeout: .seconds(60)))
                tasks.append(("poison", Task.detached { await CrashIsolationTests.ending(of: events) }))
            }
            let events = client.submit(ResizeRequest(id: "photo-\(index)", image: Array("photo \(index)".utf8),
                                                     options: .init(width: 8), delivery: .final, timeout: .seconds(60)))
            tasks.append(("photo-\(index)", Task.detached { await CrashIsolationTests.ending(of: events) }))
            if index >= poisonAt { try await Task.sleep(for: .milliseconds(Int.random(in: 0...40, using: &random))) }
        }
        var finished = 0
        for (name, task) in tasks {
            let result = await task.value
            if name == "poison" {
                guard case .failure(.failed(.workerLost, _)) = result else {
                    XCTFail("the poison ended with \(result)")
                    continue
                }
            } else {
                guard case .success = result else {
                    XCTFail("\(name), an ordinary request, ended with \(result)")
                    continue
                }
                finished += 1
            }
        }
        XCTAssertEqual(finished, innocentCount)
        let status = try await cluster.waitUntilIdle(client: client)
        let deaths = pool.deaths
        print("crash isolation: \(deaths) worker deaths; "
              + "\(status.totals.jobsQuarantined) jobs quarantined")
        // The poison killed a worker beside other jobs first (they were quarantined, not
        // blamed), then maxRetries + 1 = 3 workers it ran on alone.
        XCTAssertGreaterThanOrEqual(deaths, 4)
        XCTAssertGreaterThanOrEqual(status.totals.jobsQuarantined, 1)
        XCTAssertEqual(status.totals.workersLost, UInt64(deaths))
        await client.close()
    }

    private static func ending(of events: RequestEvents) async -> Result<Void, EnlargerClientError> {
        do {
            for try await _ in events {}
            return .success(())
        } catch {
            return .failure(error)
        }
    }
}

/// Fake workers of capacity 2 on one thread: each finishes an ordinary job 30–80 ms after it
/// arrives, and dies silently on receiving the poison, replaced 50 ms later by a new one.
private final class CrashingPool: @unchecked Sendable {
    // @unchecked: the sockets are used only by the thread running `run()`; the counters and
    // the stop flag are behind the lock.
    private let endpoint: String
    private let size: Int
    private let state = NSLock()
    private var stopped = false
    private var deathCount = 0

    init(endpoint: String, workers: Int) {
        self.endpoint = endpoint
        size = workers
    }

    var deaths: Int { state.withLock { deathCount } }

    func stop() { state.withLock { stopped = true } }

    private final class Worker {
        let socket: Socket
        var due: [(job: Enlarger_V1_Job, at: ContinuousClock.Instant)] = []
        var lastHeartbeat = ContinuousClock.now
        init(socket: Socket) { self.socket = socket }
    }

    func run() {
        do {
            let context = try Context()
            var workers: [Worker] = []
            var births: [ContinuousClock.Instant] = Array(repeating: .now, count: size)
            var random = SystemRandomNumberGenerator()
            while !state.withLock({ stopped }) {
                let now = ContinuousClock.now
                for birth in births where birth <= now { workers.append(try register(context)) }
                births.removeAll { $0 <= now }
                var poller = Poller()
                for worker in workers { _ = poller.register(worker.socket) }
                _ = try poller.poll(timeout: .milliseconds(10))
                var survivors: [Worker] = []
                for worker in workers {
                    if try serve(worker, random: &random) {
                        survivors.append(worker)
                    } else {
                        worker.socket.close()
                        births.append(.now + .milliseconds(50))
                    }
                }
                workers = survivors
            }
            for worker in workers { worker.socket.close() }
        } catch {
            XCTFail("fake worker pool: \(error)")
        }
    }

    private func register(_ context: Context) throws -> Worker {
        let socket = try Socket(context, .dealer)
        try socket.connect(endpoint)
        var ready = Enlarger_V1_WorkerToBroker()
        ready.ready.capacity = 2
        ready.ready.workerName = "crashing"
        try WorkerFrames.send(socket, ready)
        return Worker(socket: socket)
    }

    /// Reads what the broker sent, finishes what is due and heartbeats; false when the
    /// worker has just died.
    private func serve(_ worker: Worker, random: inout SystemRandomNumberGenerator) throws -> Bool {
        var frames: [ZeroMQ.Message] = []
        while try worker.socket.receive(multipart: &frames, wait: false) {
            switch try BrokerToWorkerMessage<[UInt8]>(frames: frames.map(\.bytes)) {
            case .job(let job, let image):
                try WorkerFrames.send(worker.socket, WorkerFrames.started(job))
                if image == Array("poison".utf8) {
                    state.withLock { deathCount += 1 }
                    return false
                }
                worker.due.append((job, .now + .milliseconds(Int.random(in: 30...80, using: &random))))
            case .cancelJob(let cancel):
                worker.due.removeAll { $0.job.jobID == cancel.jobID }
                try WorkerFrames.send(worker.socket, WorkerFrames.cancelled(jobID: cancel.jobID, attempt: cancel.attempt))
            case .heartbeat, .disconnect, .error:
                break
            }
        }
        let now = ContinuousClock.now
        for (job, at) in worker.due where at <= now {
            try WorkerFrames.send(worker.socket, WorkerFrames.result(job, .final, terminal: true),
                                  payload: [0xFF, 0xD8, 0xFF, 0xD9])
        }
        worker.due.removeAll { $0.at <= now }
        if now - worker.lastHeartbeat >= .milliseconds(50) {
            try WorkerFrames.send(worker.socket, WorkerFrames.heartbeat)
            worker.lastHeartbeat = now
        }
        return true
    }
}
