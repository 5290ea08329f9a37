import Enlarger
import EnlargerProtocol
import Foundation
import Imaging
import SwiftProtobuf
import TestSupport
import XCTest
import ZeroMQ

/// A worker that breaks the contract, over real sockets: codes the client contract does not
/// allow, results whose framing names a job but breaks it, and a job thread that ignores its
/// cancel. Each time the client's request still ends exactly once with a code it must treat
/// as terminal, and the worker's credit is not lost.
final class RogueWorkerTests: XCTestCase {
    private let photo: [UInt8] = Array(repeating: 0xFF, count: 64)

    /// How one request ended, as the client saw it.
    private struct Ending: Sendable {
        var events: [String] = []
        var error: EnlargerClientError?
        var afterEnd = 0
    }

    private static func consume(_ events: RequestEvents) async -> Ending {
        var ending = Ending()
        do {
            for try await event in events {
                if ending.events.contains("final") { ending.afterEnd += 1 }
                switch event {
                case .accepted: ending.events.append("accepted")
                case .started: ending.events.append("started")
                case .placeholder: ending.events.append("placeholder")
                case .degraded: ending.events.append("degraded")
                case .final: ending.events.append("final")
                case .info: ending.events.append("info")
                case .download: ending.events.append("download")
                }
            }
        } catch {
            ending.error = error
        }
        return ending
    }

    /// A fake worker over the broker's worker socket.
    private final class FakeWorker {
        let socket: Socket
        init(context: Context, endpoint: String, capacity: UInt32) throws {
            socket = try Socket(context, .dealer)
            try socket.connect(endpoint)
            var ready = Enlarger_V1_WorkerToBroker()
            ready.ready.capacity = capacity
            ready.ready.workerName = "rogue"
            try send(ready)
        }

        func send(_ message: Enlarger_V1_WorkerToBroker, payload: [UInt8]? = nil, extra: [[UInt8]] = []) throws {
            try WorkerFrames.send(socket, message, payload: payload, extra: extra)
        }

        /// The next message from the broker other than a heartbeat, or nil after `timeout`;
        /// heartbeats every 100 ms meanwhile, as a live worker does.
        func receive(timeout: Duration = .seconds(10)) throws -> BrokerToWorkerMessage<[UInt8]>? {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                try send(WorkerFrames.heartbeat)
                var poller = Poller()
                _ = poller.register(socket)
                guard try poller.poll(timeout: min(deadline - ContinuousClock.now, .milliseconds(100))) > 0 else { continue }
                let frames = try socket.receiveMultipart()
                let message = try BrokerToWorkerMessage<[UInt8]>(frames: frames.map(\.bytes))
                if case .heartbeat = message { continue }
                return message
            }
            return nil
        }

        /// The next Job the broker sends.
        func nextJob() throws -> Enlarger_V1_Job? {
            while let message = try receive() {
                if case .job(let job, _) = message { return job }
            }
            return nil
        }

        func started(_ job: Enlarger_V1_Job) throws {
            try send(WorkerFrames.started(job))
        }
    }

    func testCodesOutsideTheClientContractArriveAsInternal() async throws {
        let cluster = try Cluster(self, heartbeat: .seconds(1))
        let client = try cluster.client()
        let context = try Context()
        let worker = try FakeWorker(context: context, endpoint: cluster.workersEndpoint, capacity: 1)
        defer { worker.socket.close() }
        try await cluster.waitForWorkers(1, client: client)

        // Codes a worker may not end a job with (DUPLICATE_ID would tell the client to wait
        // on), a code no version knows, and one it may (passed through).
        let codes: [(Enlarger_V1_ErrorCode, EnlargerClientError.Code)] = [
            (.duplicateID, .internal), (.overloaded, .internal), (.brokerShutdown, .internal),
            (.workerLost, .internal), (.UNRECOGNIZED(999), .internal), (.corrupt, .corrupt),
        ]
        for (index, (sent, expected)) in codes.enumerated() {
            let events = client.submit(ResizeRequest(id: "code-\(index)", image: photo, options: .init(width: 8), timeout: .seconds(15)))
            let consumer = Task.detached { await RogueWorkerTests.consume(events) }
            let job = try XCTUnwrap(try worker.nextJob(), "no job for code \(sent)")
            try worker.started(job)
            var failed = Enlarger_V1_WorkerToBroker()
            failed.jobFailed.jobID = job.jobID
            failed.jobFailed.attempt = job.attempt
            failed.jobFailed.code = sent
            failed.jobFailed.message = "rogue"
            try worker.send(failed)
            let ending = await consumer.value
            guard case .failed(let code, _) = ending.error else {
                XCTFail("code \(sent): the request ended with \(String(describing: ending.error)) after \(ending.events)")
                continue
            }
            XCTAssertEqual(code, expected, "worker code \(sent)")
        }
        let status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.failed, UInt64(codes.count))
        await client.close()
    }

    func testResultsThatBreakTheirJobEndItAndFreeTheCredit() async throws {
        let cluster = try Cluster(self, heartbeat: .seconds(1))
        let client = try cluster.client()
        let context = try Context()
        let worker = try FakeWorker(context: context, endpoint: cluster.workersEndpoint, capacity: 1)
        defer { worker.socket.close() }
        try await cluster.waitForWorkers(1, client: client)

        // Each breaks the job it names; the worker's only credit must come back each time,
        // or the next request would never reach it.
        let breakages: [(String, (Enlarger_V1_Job) throws -> Void)] = [
            ("a final result without its image frame", { job in
                try worker.send(WorkerFrames.result(job, .final, terminal: true, size: nil))
            }),
            ("a final result not marked terminal", { job in
                try worker.send(WorkerFrames.result(job, .final, terminal: false), payload: [1, 2, 3])
            }),
            ("a result with frames beyond its image", { job in
                try worker.send(WorkerFrames.result(job, .final, terminal: true), payload: [1, 2, 3], extra: [[4], [5]])
            }),
            ("two degraded results", { job in
                let degraded = WorkerFrames.result(job, .degraded, terminal: false)
                try worker.send(degraded, payload: [1, 2, 3])
                try worker.send(degraded, payload: [1, 2, 3])
            }),
        ]
        for (index, (name, breakJob)) in breakages.enumerated() {
            let events = client.submit(ResizeRequest(id: "broken-\(index)", image: photo, options: .init(width: 8), timeout: .seconds(15)))
            let consumer = Task.detached { await RogueWorkerTests.consume(events) }
            let job = try XCTUnwrap(try worker.nextJob(), "\(name): the worker's credit never came back")
            try worker.started(job)
            try breakJob(job)
            // The broker tells the worker to stop the broken job; acknowledging it returns the credit.
            var acknowledged = false
            while let message = try worker.receive(timeout: .seconds(5)) {
                if case .cancelJob(let cancel) = message, cancel.jobID == job.jobID {
                    try worker.send(WorkerFrames.cancelled(jobID: job.jobID, attempt: job.attempt))
                    acknowledged = true
                    break
                }
            }
            XCTAssert(acknowledged, "\(name): the broker never told the worker to stop the job")
            let ending = await consumer.value
            guard case .failed(.internal, _) = ending.error else {
                XCTFail("\(name): ended with \(String(describing: ending.error)) after \(ending.events)")
                continue
            }
            XCTAssertFalse(ending.events.contains("final"), name)
            XCTAssertEqual(ending.afterEnd, 0, name)
        }
        let status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.protocolBreaches, UInt64(breakages.count))
        XCTAssertEqual(status.workers.count, 1)
        await client.close()
    }

    func testAWorkerThatIgnoresACancelIsRetired() async throws {
        let cluster = try Cluster(self, heartbeat: .milliseconds(300)) { configuration in
            configuration.broker.cancelAckTimeout = .seconds(1)
        }
        let client = try cluster.client()
        let context = try Context()
        let worker = try FakeWorker(context: context, endpoint: cluster.workersEndpoint, capacity: 1)
        defer { worker.socket.close() }
        try await cluster.waitForWorkers(1, client: client)

        let events = client.submit(ResizeRequest(id: "stuck", image: photo, options: .init(width: 8), timeout: .seconds(15)))
        let consumer = Task.detached { await RogueWorkerTests.consume(events) }
        let job = try XCTUnwrap(try worker.nextJob())
        try worker.started(job)
        let cancelledAt = ContinuousClock.now
        _ = try await client.cancel("stuck")
        let ending = await consumer.value
        XCTAssertNil(ending.error, "a cancel through this client ends the events silently")

        // The worker hears the Cancel, keeps heartbeating, and never acknowledges it.
        var toldToStop = false
        var toldToLeave = false
        while let message = try worker.receive(timeout: .seconds(5)) {
            switch message {
            case .cancelJob(let cancel) where cancel.jobID == job.jobID: toldToStop = true
            case .disconnect: toldToLeave = true
            default: break
            }
            if toldToLeave { break }
        }
        let retiredAfter = ContinuousClock.now - cancelledAt
        XCTAssert(toldToStop)
        XCTAssert(toldToLeave, "the stuck worker was never retired")
        XCTAssertGreaterThanOrEqual(retiredAfter, .seconds(1))
        let status = try await client.status()
        XCTAssertEqual(status.workers.count, 0)
        XCTAssertEqual(status.totals.cancelAcksTimedOut, 1)
        await client.close()
    }
}
