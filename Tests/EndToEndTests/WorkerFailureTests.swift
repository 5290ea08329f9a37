import Enlarger
import EnlargerProtocol
import Foundation
import ImageModel
import Imaging
import SwiftProtobuf
import XCTest
import ZeroMQ
import TestSupport

/// Workers as real `enlarger worker` processes, killed or frozen mid-job: every request
/// still ends exactly once, with a final from another worker or WORKER_LOST.
final class WorkerFailureTests: XCTestCase {
    /// Long enough per job (a 24 MP decode and a large resample) to be caught mid-job.
    private let options = ResizeOptions(width: 1200)

    private struct Ending: Equatable, Sendable {
        var finals = 0
        var failures: [String] = []
        var attempts: [Int] = []
        var afterTerminal = 0
    }

    private static func consume(_ events: RequestEvents) async -> Ending {
        var ending = Ending()
        do {
            for try await event in events {
                if ending.finals > 0 { ending.afterTerminal += 1 }
                switch event {
                case .started(let attempt): ending.attempts.append(attempt)
                case .final: ending.finals += 1
                default: break
                }
            }
        } catch {
            if ending.finals > 0 { ending.afterTerminal += 1 }
            ending.failures.append("\(error)")
        }
        return ending
    }

    /// Submits `count` slow requests, waits until each process worker has one running, then
    /// does `disrupt` to the first worker; returns how each request ended.
    private func run(count: Int, disrupt: (Cluster, pid_t) async throws -> Void) async throws -> ([Ending], BrokerStatus) {
        let cluster = try Cluster(self, heartbeat: .milliseconds(200))
        try cluster.startProcessWorkers(2, concurrency: 1)
        let client = try cluster.client()
        try await cluster.waitForWorkers(2, client: client)
        let photo = try Corpus.good("bimg_vertical.jpg")
        var tasks: [Task<Ending, Never>] = []
        for index in 0..<count {
            // Each its own job (no digest), so that both workers get one.
            let events = client.submit(ResizeRequest(id: "slow-\(index)", image: photo, options: options, delivery: .final,
                                                     sharesResults: false))
            tasks.append(Task.detached { await WorkerFailureTests.consume(events) })
        }
        // Both workers busy: the disruption lands mid-job.
        let deadline = ContinuousClock.now + .seconds(30)
        while try await client.status().workers.filter({ $0.inFlight > 0 }).count < 2 {
            guard ContinuousClock.now < deadline else { throw ClusterError("workers never got busy") }
            try await Task.sleep(for: .milliseconds(10))
        }
        try await disrupt(cluster, cluster.processWorkers[0].processIdentifier)
        var endings: [Ending] = []
        for task in tasks { endings.append(await task.value) }
        let status = try await cluster.waitUntilIdle(client: client, timeout: .seconds(60))
        await client.close()
        return (endings, status)
    }

    private func assertEachEndedOnce(_ endings: [Ending], file: StaticString = #filePath, line: UInt = #line) {
        for (index, ending) in endings.enumerated() {
            XCTAssertEqual(ending.afterTerminal, 0, "request \(index): something after its terminal event", file: file, line: line)
            let terminals = ending.finals + ending.failures.count
            XCTAssertEqual(terminals, 1, "request \(index) ended \(terminals) times: \(ending)", file: file, line: line)
            for failure in ending.failures {
                XCTAssertTrue(failure.contains("workerLost"), "request \(index): unexpected \(failure)", file: file, line: line)
            }
        }
    }

    func testKilledWorkerJobsEndOnceElsewhere() async throws {
        let (endings, status) = try await run(count: 4) { _, pid in
            kill(pid, SIGKILL)
        }
        assertEachEndedOnce(endings)
        XCTAssertEqual(endings.filter { $0.finals == 1 }.count, 4, "the surviving worker finishes every request")
        XCTAssertTrue(endings.contains { $0.attempts.contains(2) }, "the killed worker's job was re-dispatched")
        XCTAssertGreaterThanOrEqual(status.totals.workersLost, 1)
        XCTAssertGreaterThanOrEqual(status.totals.jobsRequeued, 1)
        XCTAssertEqual(status.workers.count, 1)
    }

    func testFrozenWorkerIsReplacedAndRejoins() async throws {
        var rejoined = false
        let (endings, status) = try await run(count: 4) { cluster, pid in
            kill(pid, SIGSTOP)
            // Well past 3 missed heartbeats: the broker re-dispatches the frozen worker's job.
            try await Task.sleep(for: cluster.heartbeat * 8)
            kill(pid, SIGCONT)
            // Back from the freeze it is a stranger to the broker: told to disconnect, it drops
            // its stale job and registers afresh.
            let client = try cluster.client()
            defer { Task { await client.close() } }
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                let workers = try await client.status().workers
                if workers.count == 2 && workers.allSatisfy({ $0.pid != 0 }) {
                    rejoined = true
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        assertEachEndedOnce(endings)
        XCTAssertEqual(endings.filter { $0.finals == 1 }.count, 4)
        XCTAssertTrue(endings.contains { $0.attempts.contains(2) }, "the frozen worker's job was re-dispatched")
        XCTAssertGreaterThanOrEqual(status.totals.workersLost, 1)
        XCTAssertTrue(rejoined, "the frozen worker registered again after SIGCONT")
    }

    /// A worker that falls silent past its liveness and then sends the results of its old
    /// attempt (what a paused process does when it wakes up): the broker drops and counts
    /// them, the request is finished by another worker, and the client sees one final.
    func testLateResultsOfALostAttemptAreDropped() async throws {
        let cluster = try Cluster(self, heartbeat: .milliseconds(100))
        let client = try cluster.client()
        let context = try Context()
        let paused = try Socket(context, .dealer)
        defer { paused.close() }
        try paused.connect(cluster.workersEndpoint)
        var ready = Enlarger_V1_WorkerToBroker()
        ready.ready.capacity = 1
        ready.ready.workerName = "paused"
        try sendFrames(paused, [ProtocolTag.worker.bytes, try ready.serializedBytes()])
        try await cluster.waitForWorkers(1, client: client)

        let photo = try Corpus.good("sharp_flowers.jpeg")
        let events = client.submit(ResizeRequest(id: "late-1", image: photo, options: .init(width: 64), delivery: .final))
        let consumer = Task.detached { await WorkerFailureTests.consume(events) }
        // The fake worker takes the job, then says nothing for 3+ heartbeat intervals.
        guard let jobFrames = try receive(paused, timeout: .seconds(10)),
              case .job(let job, _) = try BrokerToWorkerMessage<[UInt8]>(frames: jobFrames.map(\.bytes)) else {
            return XCTFail("the fake worker got no job")
        }
        try await Task.sleep(for: cluster.heartbeat * 6)
        // A real worker joins and finishes the re-dispatched attempt.
        try cluster.startThreadWorkers(1, concurrency: 1)
        let ending = await consumer.value
        XCTAssertEqual(ending.finals, 1)
        XCTAssertEqual(ending.failures, [])
        XCTAssertEqual(ending.attempts.last, 2, "the request was re-dispatched as attempt 2")

        // Now the paused worker "wakes up" and sends its old attempt's results.
        var started = Enlarger_V1_WorkerToBroker()
        started.jobStarted.jobID = job.jobID
        started.jobStarted.attempt = job.attempt
        try sendFrames(paused, [ProtocolTag.worker.bytes, try started.serializedBytes()])
        var result = Enlarger_V1_WorkerToBroker()
        result.jobResult.jobID = job.jobID
        result.jobResult.attempt = job.attempt
        result.jobResult.stage = .final
        result.jobResult.terminal = true
        result.jobResult.width = 64
        result.jobResult.height = 36
        try sendFrames(paused, [ProtocolTag.worker.bytes, try result.serializedBytes(), Array(repeating: 0xAB, count: 100)])
        // It is told to disconnect (it is no longer a registered worker).
        var toldToLeave = false
        while let frames = try receive(paused, timeout: .seconds(5)) {
            if case .disconnect = try BrokerToWorkerMessage<[UInt8]>(frames: frames.map(\.bytes)) {
                toldToLeave = true
                break
            }
        }
        XCTAssertTrue(toldToLeave)
        // Each late message is answered with a Disconnect of its own: the one seen above may be
        // JobStarted's while JobResult is still on its way, and a status request can overtake it.
        var status = try await cluster.waitUntilIdle(client: client)
        let deadline = ContinuousClock.now + .seconds(5)
        while status.totals.lateResultsDropped < 2 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
            status = try await client.status()
        }
        XCTAssertEqual(status.totals.lateResultsDropped, 2, "JobStarted and JobResult of the lost attempt")
        XCTAssertEqual(status.totals.finished, 1, "the late result did not finish the request a second time")
        await client.close()
    }

    private func sendFrames(_ socket: Socket, _ frames: [[UInt8]]) throws {
        for (index, frame) in frames.enumerated() {
            _ = try socket.send(frame, index < frames.count - 1 ? .more : [])
        }
    }

    private func receive(_ socket: Socket, timeout: Duration) throws -> [ZeroMQ.Message]? {
        var poller = Poller()
        _ = poller.register(socket)
        guard try poller.poll(timeout: timeout) > 0 else { return nil }
        return try socket.receiveMultipart()
    }
}
