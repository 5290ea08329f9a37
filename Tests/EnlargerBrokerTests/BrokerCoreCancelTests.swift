import EnlargerProtocol
import XCTest

@testable import EnlargerBroker

/// Strict cancel: from any connection, at any stage, with every later frame dropped.
final class BrokerCoreCancelTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let w2: PeerID = "worker-2"
    let bob: PeerID = "client-bob"
    let w1: PeerID = "worker-1"

    func testCancelWhileQueued() {
        var broker = CoreHarness()
        broker.submit(alice, "a")
        broker.cancel(alice, "a")
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary), ["accepted a", "cancelled a", "cancelAck a cancelled"])
        XCTAssertEqual(broker.ready(w1), [], "a cancelled request is never dispatched")
        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.core.totals.cancelled, 1)
    }

    func testCancelWhileDispatchedHoldsTheCreditUntilTheWorkerAcknowledges() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        let job = broker.jobs(for: w1)[0]

        broker.cancel(alice, "a")
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary),
            ["accepted a", "accepted b", "cancelled a", "cancelAck a cancelled"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(job.jobID) #1"])
        XCTAssertEqual(broker.core.status(now: broker.now).workers[0].inFlight, 1, "credit held by the tombstone")

        // Whatever the worker still sends about the job is dropped and counted.
        broker.worker(w1, .jobStarted(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        broker.result(w1, job, .degraded, terminal: false)
        XCTAssertEqual(broker.events(for: alice), [])
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 2)
        XCTAssertEqual(broker.commands(for: w1), [], "b waits: the credit is still held")

        broker.worker(w1, .jobCancelled(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["b"])
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 2, "the ack itself is not a late result")
    }

    func testTerminalResultAfterCancelReturnsTheCreditAndIsDropped() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        let job = broker.jobs(for: w1)[0]
        broker.cancel(alice, "a")
        _ = broker.events(for: alice)
        _ = broker.commands(for: w1)

        broker.finish(w1, job)
        XCTAssertEqual(broker.events(for: alice), [])
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 1)
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["b"])
        // A late ack after the job's terminal frame is just late.
        broker.worker(w1, .jobCancelled(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 2)
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testCancelFromAnotherClient() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "a")
        _ = broker.events(for: alice)
        broker.cancel(bob, "a")
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["cancelled a"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["cancelAck a cancelled"])
    }

    func testCancelAfterTheEndIsFinishedThenForgotten() {
        var broker = CoreHarness {
            $0.endedRequestMemoryDuration = .seconds(5)
            $0.heartbeatInterval = .seconds(1)
        }
        broker.ready(w1)
        broker.submit(alice, "a")
        broker.finish(w1, broker.jobs(for: w1)[0])
        _ = broker.events(for: alice)

        broker.cancel(bob, "a")
        broker.cancel(bob, "a")
        broker.cancel(bob, "never")
        XCTAssertEqual(
            broker.events(for: bob).map(\.summary),
            ["cancelAck a finished", "cancelAck a finished", "cancelAck never unknown"])
        XCTAssertEqual(broker.events(for: alice), [], "nothing after the terminal event")

        for _ in 0..<6 {
            broker.worker(w1, .heartbeat)
            broker.advance(by: .seconds(1))
        }
        broker.cancel(bob, "a")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["cancelAck a unknown"])
    }

    func testSecondCancelIsFinished() {
        var broker = CoreHarness()
        broker.submit(alice, "a")
        broker.cancel(alice, "a")
        broker.cancel(bob, "a")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["cancelAck a finished"])
        XCTAssertEqual(broker.events(for: alice).filter { $0.summary == "cancelled a" }.count, 1)
    }

    func testEndedMemoryIsBoundedInCount() {
        var broker = CoreHarness { $0.endedRequestMemoryLimit = 2 }
        for id in ["a", "b", "c"] {
            broker.submit(alice, id)
            broker.cancel(alice, id)
        }
        for id in ["a", "b", "c"] { broker.cancel(bob, id) }
        XCTAssertEqual(
            broker.events(for: bob).map(\.summary),
            ["cancelAck a unknown", "cancelAck b finished", "cancelAck c finished"])
    }

    func testDegradedAfterFinalIsDropped() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "a")
        let job = broker.jobs(for: w1)[0]
        broker.finish(w1, job)
        broker.result(w1, job, .degraded, terminal: false)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a final terminal"])
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 1)
        XCTAssertEqual(broker.commands(for: w1), [], "a late frame is not an error")
    }

    func testSecondDegradedInOneAttemptEndsTheRequest() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "a")
        let job = broker.jobs(for: w1)[0]
        broker.result(w1, job, .degraded, terminal: false)
        broker.result(w1, job, .degraded, terminal: false)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a degraded", "failed a internal"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["error malformed", "cancelJob \(job.jobID) #\(job.attempt)"])
    }

    /// A worker that never stops a cancelled job is retired (its credit is not handed back,
    /// which would overbook a stuck thread); its other job goes to a healthy worker.
    func testCancelAckTimeoutRetiresTheWorker() {
        var broker = CoreHarness {
            $0.heartbeatInterval = .seconds(1)
            $0.cancelAckTimeout = .seconds(2)
        }
        broker.ready(w1, capacity: 2)
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.map(\.requestID), ["a", "b"])
        broker.cancel(alice, "a")
        _ = broker.commands(for: w1)
        for _ in 0..<3 {
            broker.worker(w1, .heartbeat)
            broker.advance(by: .seconds(1))
        }
        XCTAssertEqual(broker.core.totals.cancelAcksTimedOut, 1)
        XCTAssertEqual(broker.core.totals.workersLost, 1)
        XCTAssertTrue(broker.takeReports().contains(.cancelAckTimedOut(w1, jobID: jobs[0].jobID)))
        XCTAssertTrue(broker.commands(for: w1).map(\.summary).contains("disconnect"))
        XCTAssertEqual(broker.ready(w2).map(\.requestID), ["b"])
    }
}
