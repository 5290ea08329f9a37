import EnlargerProtocol
import XCTest

@testable import EnlargerBroker

/// The life of a request through the core: submit, dispatch, results, terminal event.
final class BrokerCoreTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let bob: PeerID = "client-bob"
    let w1: PeerID = "worker-1"
    let w2: PeerID = "worker-2"

    func testSubmitDispatchResultsAndTerminal() throws {
        var broker = CoreHarness()
        XCTAssertEqual(broker.ready(w1, capacity: 2), [])

        broker.submit(alice, "a")
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a"])
        let commands = broker.commands(for: w1)
        guard case .job(let job, let image)? = commands.first, commands.count == 1 else {
            return XCTFail("expected one job, got \(commands.map(\.summary))")
        }
        XCTAssertEqual(job.requestID, "a")
        XCTAssertEqual(job.attempt, 1)
        XCTAssertEqual(job.delivery, .progressive)
        XCTAssertEqual(job.spec.width, 64)
        XCTAssertEqual(image, CoreHarness.jpeg, "the payload frame is passed through untouched")

        broker.worker(w1, .jobStarted(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        broker.result(w1, job, .degraded, terminal: false)
        broker.result(w1, job, .final, terminal: true)
        let events = broker.events(for: alice)
        XCTAssertEqual(events.map(\.summary), ["started a #1", "result a degraded", "result a final terminal"])
        guard case .result(let final, let output) = events.last else { return XCTFail() }
        XCTAssertEqual(output, CoreHarness.image)
        XCTAssertEqual([final.width, final.height], [32, 24])

        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.core.totals.accepted, 1)
        XCTAssertEqual(broker.core.totals.finished, 1)
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testFinalOnlyAndDegradedOnlyDeliveries() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        broker.submit(alice, "f", delivery: .final)
        broker.submit(alice, "d", delivery: .degraded)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.map(\.delivery), [.final, .degraded])

        // (Wrong stages for the delivery: see BrokerCoreMalformedTests.)
        broker.result(w1, jobs[0], .final, terminal: true)
        broker.result(w1, jobs[1], .degraded, terminal: true)
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary),
            ["accepted f", "accepted d", "result f final terminal", "result d degraded terminal"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testProgressiveMaySkipTheDegradedResult() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "a")
        broker.finish(w1, broker.jobs(for: w1)[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a final terminal"])
    }

    func testQueuedRequestsWaitForAWorkerInOrder() {
        var broker = CoreHarness()
        for id in ["a", "b", "c"] { broker.submit(alice, id) }
        XCTAssertEqual(broker.core.status(now: broker.now).queueDepth, 3)
        XCTAssertEqual(broker.ready(w1, capacity: 2).map(\.requestID), ["a", "b"])
        broker.finish(w1, CoreHarness.job(jobID: 1, attempt: 1))
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["c"])
    }

    func testDuplicateLiveIDIsRefusedAndTheFirstIsUntouched() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "same")
        broker.submit(bob, "same")
        broker.submit(alice, "same")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["failed same duplicateID"])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted same", "failed same duplicateID"])

        let job = broker.jobs(for: w1)[0]
        broker.finish(w1, job)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result same final terminal"])
        XCTAssertEqual(broker.events(for: bob), [])
        XCTAssertEqual(broker.core.totals.duplicateIds, 2)

        // Once ended, the id can be used again.
        broker.submit(bob, "same")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted same"])
        // A duplicate that is faulty too is told it is a duplicate, not Rejected: a Rejected
        // would name the live request's id as if it had ended.
        var faulty = CoreHarness.submitMessage("same", delivery: .final)
        faulty.spec.width = 0
        faulty.spec.height = 0
        broker.client(alice, .submit(faulty, image: CoreHarness.jpeg))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["failed same duplicateID"])
        broker.client(alice, .submit(faulty, image: []))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["failed same duplicateID"])
    }

    func testOverloadIsRejectedAtOnceAndRoomReturns() {
        var broker = CoreHarness { $0.queueLimit = 2 }
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        broker.submit(alice, "c")
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary), ["accepted a", "accepted b", "rejected c overloaded"])
        broker.cancel(alice, "a")
        broker.submit(alice, "c")
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary), ["cancelled a", "cancelAck a cancelled", "accepted c"])
        XCTAssertEqual(broker.core.totals.rejected, 1)
        XCTAssertEqual(broker.core.totals.submitted, 4)
    }

    func testCreditsAreNeverExceededAndFreedCreditDispatchesAtOnce() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        broker.ready(w2, capacity: 1)
        for index in 0..<6 { broker.submit(alice, "r\(index)") }
        // Most free credit first, the earlier registered among equals: w1 (2 free), then
        // w1 and w2 tie at 1 free, so w1, then w2.
        var held1 = broker.jobs(for: w1)
        var held2 = broker.jobs(for: w2)
        XCTAssertEqual(held1.map(\.requestID), ["r0", "r1"])
        XCTAssertEqual(held2.map(\.requestID), ["r2"])
        XCTAssertEqual(broker.core.status(now: broker.now).workers.map(\.inFlight), [2, 1])

        broker.worker(w1, .jobFailed(.with { $0.jobID = held1[0].jobID; $0.attempt = 1; $0.code = .corrupt }))
        held1 = broker.jobs(for: w1)
        XCTAssertEqual(held1.map(\.requestID), ["r3"])
        broker.finish(w2, held2[0])
        held2 = broker.jobs(for: w2)
        XCTAssertEqual(held2.map(\.requestID), ["r4"])
        for worker in broker.core.status(now: broker.now).workers {
            XCTAssertLessThanOrEqual(worker.inFlight, worker.capacity)
        }
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testJobFailureForwardsTheWorkersCode() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        let jobs = broker.jobs(for: w1)
        broker.worker(w1, .jobFailed(.with { $0.jobID = jobs[0].jobID; $0.attempt = 1; $0.code = .unknownFormat; $0.message = "PNG" }))
        broker.worker(w1, .jobFailed(.with { $0.jobID = jobs[1].jobID; $0.attempt = 1 }))
        let events = broker.events(for: alice)
        XCTAssertEqual(
            events.map(\.summary), ["accepted a", "accepted b", "failed a unknownFormat", "failed b internal"])
        guard case .failed(let failed) = events[2] else { return XCTFail() }
        XCTAssertEqual(failed.message, "PNG")
        XCTAssertEqual(broker.core.totals.failed, 2)
        XCTAssertTrue(broker.core.isIdle)
    }

    func testStartedIsForwardedOncePerAttempt() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "a")
        let job = broker.jobs(for: w1)[0]
        broker.worker(w1, .jobStarted(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        broker.worker(w1, .jobStarted(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "started a #1"])
    }

    func testInvalidSpecAndOversizeInputAreRejected() {
        var broker = CoreHarness { $0.maxInputBytes = 4 }
        var noBox = CoreHarness.submitMessage("nobox")
        noBox.spec.width = 0
        broker.client(alice, .submit(noBox, image: [1]))
        var badDelivery = CoreHarness.submitMessage("delivery")
        badDelivery.delivery = .UNRECOGNIZED(7)
        broker.client(alice, .submit(badDelivery, image: [1]))
        broker.submit(alice, "big", image: [1, 2, 3, 4, 5])
        broker.submit(alice, "fits", image: [1, 2, 3, 4])
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary),
            ["rejected nobox invalidArgument", "rejected delivery invalidArgument", "rejected big tooLarge",
             "accepted fits"])
    }

    func testStatusReplyDescribesWorkersQueueAndTotals() throws {
        var broker = CoreHarness { $0.queueLimit = 10 }
        broker.ready(w1, capacity: 1, name: "box-1")
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        broker.advance(by: .milliseconds(250))
        broker.client(bob, .statusRequest)
        guard case .statusReply(let status)? = broker.events(for: bob).first else { return XCTFail() }
        XCTAssertEqual(status.workers.count, 1)
        XCTAssertEqual(status.workers[0].name, "box-1")
        XCTAssertEqual(status.workers[0].id, w1.description)
        XCTAssertEqual(status.workers[0].capacity, 1)
        XCTAssertEqual(status.workers[0].inFlight, 1)
        XCTAssertEqual(status.workers[0].lastSeenMsAgo, 250)
        XCTAssertEqual(status.queueDepth, 1)
        XCTAssertEqual(status.queueLimit, 10)
        XCTAssertEqual(status.inFlight, 1)
        XCTAssertEqual(status.clients, 1)
        XCTAssertEqual(status.uptimeMs, 250)
        XCTAssertEqual(status.totals.submitted, 2)
        XCTAssertEqual(status.totals.accepted, 2)
    }

    func testPingIsAnsweredWithTheHeartbeatInterval() {
        var broker = CoreHarness { $0.heartbeatInterval = .milliseconds(250) }
        broker.client(alice, .ping)
        guard case .pong(let pong)? = broker.events(for: alice).first else { return XCTFail() }
        XCTAssertEqual(pong.heartbeatIntervalMs, 250)
    }

    func testShutdownFailsLiveRequestsAndTurnsEveryoneAway() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.submit(alice, "running")
        broker.submit(bob, "waiting")
        _ = broker.events(for: alice)
        _ = broker.events(for: bob)
        _ = broker.jobs(for: w1)

        broker.shutdown()
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["failed running brokerShutdown"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["failed waiting brokerShutdown"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["disconnect"])

        broker.submit(alice, "late")
        broker.worker(w2, .ready(.with { $0.capacity = 1 }))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["rejected late brokerShutdown"])
        XCTAssertEqual(broker.commands(for: w2).map(\.summary), ["disconnect"])
        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.core.totals.failed, 2)
    }

    /// Besides the queue's count, the bytes of images held and each connection's share are
    /// bounded: the excess is refused at once, and room returns when requests end.
    func testImageBytesAndPerClientLiveRequestsAreBounded() {
        var broker = CoreHarness {
            $0.maxLiveImageBytes = 250
            $0.maxLiveRequestsPerClient = 3
        }
        broker.submit(alice, "a", image: Array(repeating: 1, count: 100))
        broker.submit(alice, "b", image: Array(repeating: 1, count: 100))
        broker.submit(alice, "c", image: Array(repeating: 1, count: 100))
        let events = broker.events(for: alice)
        XCTAssertEqual(events.map(\.summary), ["accepted a", "accepted b", "rejected c overloaded"])
        // It does not say how many bytes the broker holds: a principal that knows its own
        // would learn the others'.
        if case .rejected(let rejected)? = events.last {
            XCTAssertFalse(rejected.message.contains("200"), rejected.message)
        } else {
            XCTFail("\(events)")
        }
        broker.submit(alice, "d", image: [1])
        broker.submit(alice, "e", image: [1])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted d", "rejected e overloaded"])
        broker.submit(bob, "f", image: [1])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted f"], "another client is not locked out")
        // Ending a request frees its bytes and its slot.
        let jobs = broker.ready(w1)
        XCTAssertEqual(jobs.map(\.requestID), ["a"])
        guard let job = jobs.first else { return }
        broker.finish(w1, job)
        broker.submit(alice, "g", image: Array(repeating: 1, count: 100))
        XCTAssertEqual(broker.events(for: alice).map(\.summary).suffix(1), ["accepted g"])
        XCTAssertEqual(broker.inconsistencies, [])
    }
}

extension CoreHarness {
    /// A job as the worker would echo it, for tests that know the ids.
    static func job(jobID: UInt64, attempt: UInt32, delivery: Enlarger_V1_Delivery = .progressive) -> Enlarger_V1_Job {
        .with {
            $0.jobID = jobID
            $0.attempt = attempt
            $0.delivery = delivery
        }
    }
}
