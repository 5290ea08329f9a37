import EnlargerProtocol
import ImageModel
import Imaging
import XCTest

@testable import EnlargerWorker

/// Honest occupancy: what the broker hears about threads busy beyond its live jobs.
final class WorkerCoreOccupancyTests: XCTestCase {
    func testACancelledJobIsNamedWithEveryHeartbeatUntilItsThreadReturns() {
        var harness = WorkerCoreHarness(capacity: 2, heartbeat: .milliseconds(100))
        harness.job(1)
        harness.job(2)
        harness.estimated(harness.token(1), bytes: 10)
        harness.estimated(harness.token(2), bytes: 10)
        harness.clear()
        harness.cancel(1)
        XCTAssertEqual(harness.sentSummary, [], "JobCancelled waits for the thread")
        // The thread is in a stage that cannot be interrupted: it does not return for 5 intervals.
        for _ in 0..<5 {
            harness.advance(by: .milliseconds(100))
            harness.broker(.heartbeat)
        }
        XCTAssertEqual(harness.sentSummary, Array(repeating: ["heartbeat", "occupancy 0 [1]"], count: 5).flatMap { $0 })
        harness.clear()
        harness.ended(harness.token(1), .failed(ImagingError(.cancelled, "cancelled")))
        XCTAssertEqual(harness.sentSummary, ["cancelled 1"])
        harness.clear()
        harness.advance(by: .milliseconds(100))
        XCTAssertEqual(harness.sentSummary, ["heartbeat"], "nothing busy beyond the live job: no Occupancy")
    }

    func testThreadsStillBusyWithAbandonedJobsAreInReadyAndFreedAtOnce() {
        var harness = WorkerCoreHarness(capacity: 2, heartbeat: .milliseconds(100))
        harness.job(1)
        harness.job(2)
        let tokens = [harness.token(1), harness.token(2)]
        harness.clear()
        harness.broker(.disconnect)
        harness.advance(by: .milliseconds(100))
        guard case .ready(let ready) = harness.sent.last else { return XCTFail("\(harness.sentSummary)") }
        XCTAssertEqual(ready.capacity, 2)
        XCTAssertEqual(ready.busyThreads, 2, "both threads still run abandoned jobs")
        harness.clear()
        harness.advance(by: .milliseconds(100))
        XCTAssertEqual(harness.sentSummary, ["heartbeat", "occupancy 2 []"])
        harness.clear()
        harness.ended(tokens[0], .failed(ImagingError(.cancelled, "cancelled")))
        XCTAssertEqual(harness.sentSummary, ["occupancy 1 []"], "said at once, not at the next heartbeat")
        harness.clear()
        harness.ended(tokens[1], .completed)
        XCTAssertEqual(harness.sentSummary, ["occupancy 0 []"])
        harness.clear()
        harness.advance(by: .milliseconds(100))
        XCTAssertEqual(harness.sentSummary, ["heartbeat"])
    }

    func testAfterSilenceTheNewReadyCountsTheAbandonedThreads() {
        var harness = WorkerCoreHarness(capacity: 4, heartbeat: .milliseconds(100), missedHeartbeats: 3)
        harness.job(1)
        harness.job(2)
        harness.ended(harness.token(2), .failed(ImagingError(.corrupt, "bad")))
        harness.clear()
        harness.advance(by: .milliseconds(300))
        guard case .ready(let ready) = harness.sent.last else { return XCTFail("\(harness.sentSummary)") }
        XCTAssertEqual(ready.busyThreads, 1)
    }
}
