import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker

/// Ordered, all-or-nothing batches: one BatchEnded per batch after its items' ends; a failed
/// or cancelled item takes the live ones with it; late items are refused.
final class BrokerCoreBatchTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let bob: PeerID = "client-bob"
    let w1: PeerID = "worker-1"

    private func item(
        _ broker: inout CoreHarness, _ id: String, from peer: PeerID = "client-alice", batch: String = "B", index: UInt32,
        size: UInt32 = 3, width: UInt32 = 64, digest: Data? = nil, deadlineMs: UInt32 = 0, image: Bytes = CoreHarness.jpeg
    ) {
        broker.client(peer, .submit(.with {
            $0.requestID = id
            $0.spec.width = width
            $0.delivery = .final
            $0.deadlineMs = deadlineMs
            $0.batch = .with {
                $0.batchID = batch
                $0.index = index
                $0.size = size
            }
            if let digest { $0.source.inline.sha256 = digest }
        }, image: image))
    }

    private func fail(_ broker: inout CoreHarness, _ job: Enlarger_V1_Job, _ code: Enlarger_V1_ErrorCode = .corrupt) {
        broker.worker(w1, .jobFailed(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.code = code
            $0.message = "broken"
        }))
    }

    func testABatchCompletesAfterItsLastItemsResult() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 3)
        item(&broker, "a", index: 0)
        item(&broker, "b", index: 1)
        item(&broker, "c", index: 2)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.count, 3)
        broker.finish(w1, jobs[2])
        broker.finish(w1, jobs[0])
        XCTAssertFalse(broker.events(for: alice).contains { if case .batchEnded = $0 { true } else { false } })
        broker.finish(w1, jobs[1])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result b final terminal", "batchEnded B completed"])
        XCTAssertEqual(broker.core.totals.batchesCompleted, 1)
        XCTAssertTrue(broker.core.isIdle)
    }

    func testAFailingItemEndsTheBatchAndCancelsTheLiveOnesAndLateItemsAreRefused() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        item(&broker, "a", index: 0)
        item(&broker, "b", index: 1)
        let jobs = broker.jobs(for: w1)
        _ = broker.events(for: alice)
        fail(&broker, jobs[1])
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["failed b corrupt", "cancelled a", "batchEnded B failed 1 corrupt"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(jobs[0].jobID) #1"])
        broker.finish(w1, jobs[0])
        XCTAssertEqual(broker.events(for: alice), [], "nothing after the batch ended")

        item(&broker, "c", index: 2)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["rejected c batchEnded"])
        XCTAssertEqual(broker.core.totals.batchesFailed, 1)
        XCTAssertTrue(broker.core.isIdle)
    }

    func testCancellingAnyItemCancelsTheBatch() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 1)
        item(&broker, "a", index: 0)
        item(&broker, "b", index: 1)
        item(&broker, "c", index: 2)
        _ = broker.events(for: alice)
        broker.cancel(bob, "b")  // any connection of the principal may cancel
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["cancelled b", "cancelled a", "cancelled c", "batchEnded B cancelled 1 unspecified"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["cancelAck b cancelled"])
        XCTAssertEqual(broker.core.totals.batchesCancelled, 1)
    }

    /// DUPLICATE_ID never ends the request holding the id: not even when the holder is an
    /// item of the same batch (failing the batch would cancel it). A duplicate of a request
    /// outside the batch fails the batch and leaves that request alone.
    func testADuplicateIDNeverEndsItsHolderInABatchOrOutside() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 3)
        item(&broker, "a", index: 0, size: 2)
        item(&broker, "a", index: 1, size: 2)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "failed a duplicateID"])
        XCTAssertEqual(broker.core.liveRequestCount, 1, "the holder goes on")
        item(&broker, "b", index: 1, size: 2)
        let jobs = broker.jobs(for: w1)
        for job in jobs { broker.finish(w1, job) }
        XCTAssertEqual(broker.events(for: alice).map(\.summary).last, "batchEnded B completed")

        broker.submit(bob, "solo")
        _ = broker.events(for: bob)
        item(&broker, "solo", from: bob, batch: "C", index: 0, size: 2)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["failed solo duplicateID", "batchEnded C failed 0 duplicateID"])
        XCTAssertEqual(broker.core.liveRequestCount, 1, "the request outside the batch goes on")
    }

    /// A Submit sent again for its own place (a retry) is a duplicate: refused, and the batch
    /// goes on.
    func testAnItemSentAgainForItsOwnPlaceLeavesTheBatchAlone() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 3)
        item(&broker, "a", index: 0, size: 2)
        item(&broker, "a", index: 0, size: 2)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "failed a duplicateID"])
        item(&broker, "b", index: 1, size: 2)
        for job in broker.jobs(for: w1) { broker.finish(w1, job) }
        XCTAssertEqual(broker.events(for: alice).map(\.summary).last, "batchEnded B completed")
        XCTAssertEqual(broker.core.totals.batchesCompleted, 1)
        XCTAssertTrue(broker.core.isIdle)
    }

    /// The connection of the latest item leaves for good: the BatchEnded goes to the latest
    /// connection still there, whether the departure ends the batch or the batch ends later.
    func testABatchEndedGoesToAConnectionStillThere() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 3)
        item(&broker, "a", index: 0)
        item(&broker, "b", from: bob, index: 1)
        item(&broker, "c", from: bob, index: 2)
        var jobs = broker.jobs(for: w1)
        broker.finish(w1, jobs[1])
        broker.finish(w1, jobs[2])
        broker.record(broker.core.clientDeparted(bob, now: broker.now))
        broker.finish(w1, jobs[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a final terminal", "batchEnded B completed"])

        XCTAssertFalse(broker.core.tracksClient(bob), "no batch names it any more")

        // A connection whose items all ended is still followed while its batch lives, so that
        // the I/O loop reports its end; its routing id taken by another principal counts as an end.
        item(&broker, "f", batch: "D", index: 0, size: 2)
        item(&broker, "g", from: bob, batch: "D", index: 1, size: 2)
        jobs = broker.jobs(for: w1)
        broker.finish(w1, jobs[1])
        XCTAssertTrue(broker.core.tracksClient(bob))
        broker.client(bob, as: Principal("curve:someone-else"), .ping)
        XCTAssertFalse(broker.core.tracksClient(bob))
        _ = broker.events(for: alice)
        broker.finish(w1, jobs[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result f final terminal", "batchEnded D completed"])
        XCTAssertTrue(broker.core.isIdle)

        // Leaving with an item live fails the batch; the other connection hears of it.
        item(&broker, "d", batch: "C", index: 0, size: 2)
        item(&broker, "e", from: bob, batch: "C", index: 1, size: 2)
        jobs = broker.jobs(for: w1)
        _ = broker.events(for: alice)
        broker.record(broker.core.clientDeparted(bob, now: broker.now))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["cancelled d", "batchEnded C failed 1 clientSilent"])
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testAnItemThatDoesNotFitFailsTheBatch() {
        for (index, size, reason) in [(UInt32(1), UInt32(4), "size differs"), (0, 3, "place taken"), (3, 3, "index out of range")] {
            var broker = CoreHarness()
            item(&broker, "a", index: 0)
            item(&broker, "x", index: index, size: size)
            XCTAssertEqual(broker.events(for: alice).map(\.summary),
                           ["accepted a", "rejected x invalidArgument", "cancelled a",
                            "batchEnded B failed \(index) invalidArgument"], reason)
            XCTAssertTrue(broker.core.isIdle, reason)
        }
        var broker = CoreHarness()
        item(&broker, "a", batch: String(repeating: "b", count: 65), index: 0)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["rejected a invalidArgument"], "no batch to fail")
    }

    func testARefusedFirstItemLeavesAnEndedBatch() {
        var broker = CoreHarness()
        item(&broker, "a", index: 0, width: 0)  // an invalid spec
        item(&broker, "b", index: 1)
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["rejected a invalidArgument", "batchEnded B failed 0 invalidArgument", "rejected b batchEnded"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testABatchWhoseItemsDoNotAllArriveFailsAtItsDeadline() {
        var broker = CoreHarness()
        broker.ready(w1)
        item(&broker, "a", index: 0, deadlineMs: 2000)
        broker.finish(w1, broker.jobs(for: w1)[0])
        item(&broker, "c", index: 2)
        let c = broker.jobs(for: w1)[0]
        _ = broker.events(for: alice)
        broker.advance(by: .milliseconds(2100))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["cancelled c", "batchEnded B failed 1 deadlineExceeded"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(c.jobID) #1"])
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testItemsSharingAJobThatFailsNameTheLowestIndex() {
        var broker = CoreHarness()
        broker.ready(w1)
        let digest = Data(repeating: 3, count: 32)
        item(&broker, "b", index: 1, size: 2, digest: digest)
        item(&broker, "a", index: 0, size: 2, digest: digest)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.count, 1, "identical items share one job")
        _ = broker.events(for: alice)
        fail(&broker, jobs[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["failed b corrupt", "failed a corrupt", "batchEnded B failed 0 corrupt"])
    }

    func testAnItemAnsweredFromTheCacheCountsAsDone() {
        var broker = CoreHarness()
        broker.ready(w1)
        let digest = Data(repeating: 4, count: 32)
        broker.client(alice, .submit(.with {
            $0.requestID = "warm"
            $0.spec.width = 64
            $0.delivery = .final
            $0.source.inline.sha256 = digest
        }, image: CoreHarness.jpeg))
        broker.worker(w1, .jobResult(.with {
            $0.jobID = broker.jobs(for: w1)[0].jobID
            $0.attempt = 1
            $0.stage = .final
            $0.terminal = true
            $0.digestVerified = true
        }, image: [1]))
        _ = broker.events(for: alice)
        item(&broker, "a", index: 0, size: 1, digest: digest)
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["accepted a", "result a final terminal cached", "batchEnded B completed"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testAVanishedClientsBatchFailsAndShutdownFailsTheRest() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        item(&broker, "a", index: 0)
        item(&broker, "x", from: bob, batch: "C", index: 0, size: 2)
        broker.clientUnreachable(alice)
        XCTAssertEqual(broker.events(for: alice).suffix(2).map(\.summary),
                       ["failed a clientSilent", "batchEnded B failed 0 clientSilent"])
        broker.shutdown()
        XCTAssertEqual(broker.events(for: bob).suffix(2).map(\.summary),
                       ["failed x brokerShutdown", "batchEnded C failed 0 brokerShutdown"])
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testTheSameBatchIDUnderAnotherPrincipalIsAnotherBatch() {
        var broker = CoreHarness()
        broker.client(alice, as: Principal("curve:alice"), .submit(.with {
            $0.requestID = "a"; $0.spec.width = 64; $0.batch = .with { $0.batchID = "B"; $0.index = 0; $0.size = 1 }
        }, image: CoreHarness.jpeg))
        broker.client(bob, as: Principal("curve:bob"), .submit(.with {
            $0.requestID = "a"; $0.spec.width = 64; $0.batch = .with { $0.batchID = "B"; $0.index = 0; $0.size = 1 }
        }, image: CoreHarness.jpeg))
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted a"])
    }

    /// A principal may hold only its share of the live batches: one whose batches stay live at
    /// no cost (each a first item, the rest never sent) is refused its next one, and another
    /// principal still starts batches.
    func testAPrincipalHoldsOnlyItsShareOfTheLiveBatches() {
        var broker = CoreHarness {
            $0.maxLiveBatches = 8
            $0.maxLiveBatchesPerPrincipal = 3
        }
        let carol = Principal("curve:carol"), dave = Principal("curve:dave")
        func first(_ peer: PeerID, _ principal: Principal, _ batch: String) {
            broker.client(peer, as: principal, .submit(.with {
                $0.requestID = batch
                $0.spec.width = 64
                $0.batch = .with { $0.batchID = batch; $0.index = 0; $0.size = 2 }
            }, image: CoreHarness.jpeg))
        }
        for batch in ["c1", "c2", "c3", "c4"] { first(alice, carol, batch) }
        XCTAssertEqual(broker.events(for: alice).map(\.summary).filter { !$0.hasPrefix("batchEnded") },
                       ["accepted c1", "accepted c2", "accepted c3", "rejected c4 overloaded"])
        first(bob, dave, "d1")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted d1"])
        XCTAssertEqual(broker.inconsistencies, [])
    }
}
