import EnlargerProtocol
import ImageModel
import Imaging
import XCTest

@testable import EnlargerWorker

/// The worker's decisions, without sockets, threads or a real clock.
final class WorkerCoreTests: XCTestCase {
    // MARK: Registration and liveness

    func testStartsByConnectingAndSendingReadyWithItsCapacity() {
        let harness = WorkerCoreHarness(capacity: 3)
        guard case .connected = harness.events.first else { return XCTFail("\(harness.events)") }
        guard case .ready(let ready) = harness.sent.first else { return XCTFail("\(harness.sent)") }
        XCTAssertEqual(ready.capacity, 3)
        XCTAssertEqual(ready.workerName, "test")
        XCTAssertEqual(ready.pid, 42)
    }

    func testHeartbeatEveryIntervalWhileTheBrokerTalks() {
        var harness = WorkerCoreHarness(heartbeat: .milliseconds(100))
        harness.clear()
        for _ in 0..<10 {
            harness.advance(by: .milliseconds(50))
            harness.broker(.heartbeat)
        }
        XCTAssertEqual(harness.sentSummary, Array(repeating: "heartbeat", count: 5))
        XCTAssertEqual(harness.connections, 0)
        XCTAssertEqual(harness.core.nextDeadline, harness.core.connection!.nextHeartbeat)
    }

    func testBrokerSilenceAbandonsJobsAndRegistersAgainAtOnce() {
        var harness = WorkerCoreHarness(heartbeat: .milliseconds(100), missedHeartbeats: 3)
        harness.job(1)
        let token = harness.token(1)
        harness.estimated(token, bytes: 10)
        harness.clear()
        harness.advance(by: .milliseconds(299))
        XCTAssertEqual(harness.connections, 0, "not yet silent for 3 intervals")
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.connections, 1)
        XCTAssertEqual(harness.cancelled, [token], "the job's thread is told to stop")
        XCTAssertEqual(harness.sentSummary.filter { $0 != "heartbeat" }, ["ready"], "nothing about the job")
        // Whatever its thread posts later is dropped; its memory is held until it returns.
        harness.clear()
        harness.result(token, .final, terminal: true)
        XCTAssertEqual(harness.core.memoryInUse, 10)
        harness.ended(token, .failed(ImagingError(.cancelled, "cancelled")))
        XCTAssertEqual(harness.sentSummary, ["occupancy 0 []"], "nothing about the job; only that its thread is free")
        XCTAssertEqual(harness.core.memoryInUse, 0)
    }

    func testDisconnectClosesAndRegistersAgainAfterOneInterval() {
        var harness = WorkerCoreHarness(heartbeat: .milliseconds(200))
        harness.job(1)
        harness.clear()
        harness.broker(.disconnect)
        guard case .closed? = harness.events.last else { return XCTFail("\(harness.events)") }
        XCTAssertEqual(harness.cancelled, [harness.token(1)])
        harness.clear()
        harness.advance(by: .milliseconds(199))
        XCTAssertEqual(harness.events.count, 0, "nothing before one interval, not even heartbeats")
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.connections, 1)
        XCTAssertEqual(harness.sentSummary, ["ready"])
    }

    func testStopSendsDisconnectAndStopsEveryJobSilently() {
        var harness = WorkerCoreHarness()
        harness.job(1)
        harness.job(2)
        harness.clear()
        harness.stop()
        XCTAssertEqual(harness.sentSummary, ["disconnect"])
        XCTAssertEqual(Set(harness.cancelled), [harness.token(1), harness.token(2)])
        harness.clear()
        harness.ended(harness.token(1), .completed)
        harness.advance(by: .seconds(10))
        // Nothing is done after stop; the job's end is only reported (for the log), as abandoned.
        guard harness.events.count == 1, case .report(.jobEnded(let end)) = harness.events[0] else {
            return XCTFail("something after stop: \(harness.events)")
        }
        XCTAssertEqual(end.outcome, .abandoned)
        XCTAssertNil(harness.core.nextDeadline)
    }

    func testMalformedMessagesCountAsSignsOfLife() {
        var harness = WorkerCoreHarness(heartbeat: .milliseconds(100))
        harness.advance(by: .milliseconds(250))
        harness.record(harness.core.receivedMalformed("garbage", now: harness.now))
        harness.clear()
        harness.advance(by: .milliseconds(250))
        XCTAssertEqual(harness.connections, 0)
    }

    // MARK: Frames per job

    func testResultsPassUntilTheTerminalOneAndTheEndSendsNothingMore() {
        var harness = WorkerCoreHarness()
        harness.job(1)
        let token = harness.token(1)
        harness.estimated(token, bytes: 1000)
        XCTAssertEqual(harness.admitted, [token])
        harness.result(token, .degraded, terminal: false)
        harness.result(token, .final, terminal: true)
        harness.result(token, .final, terminal: true)
        harness.cancel(1)
        harness.ended(token)
        XCTAssertEqual(harness.sentSummary.dropFirst(), ["started 1", "degraded… 1", "final 1"])
        XCTAssertEqual(harness.cancelled, [], "a cancel after the terminal result is ignored")
        XCTAssertEqual(harness.core.jobs.count, 0)
        XCTAssertEqual(harness.core.memoryInUse, 0)
    }

    func testCancelSetsTheFlagDropsLaterResultsAndEndsWithJobCancelled() {
        var harness = WorkerCoreHarness()
        harness.job(1)
        let token = harness.token(1)
        harness.estimated(token, bytes: 1000)
        harness.result(token, .degraded, terminal: false)
        harness.cancel(1)
        harness.cancel(1)
        XCTAssertEqual(harness.cancelled, [token], "a second cancel changes nothing")
        XCTAssertTrue(harness.jobs[token]!.control.isCancelled)
        harness.result(token, .final, terminal: true)
        harness.ended(token, .completed)
        XCTAssertEqual(harness.sentSummary.dropFirst(), ["started 1", "degraded… 1", "cancelled 1"])
    }

    func testCancelledJobThatFailedStillEndsWithJobCancelled() {
        var harness = WorkerCoreHarness()
        harness.job(1)
        harness.cancel(1)
        harness.ended(harness.token(1), .failed(ImagingError(.cancelled, "cancelled")))
        XCTAssertEqual(harness.sentSummary.dropFirst(), ["started 1", "cancelled 1"])
    }

    func testFailureMapsTheImagingCode() {
        var harness = WorkerCoreHarness()
        harness.job(1)
        harness.ended(harness.token(1), .failed(ImagingError(.truncated, "short")))
        guard case .jobFailed(let failed) = harness.sent.last else { return XCTFail("\(harness.sent)") }
        XCTAssertEqual(failed.code, .truncated)
        XCTAssertEqual(failed.message, "short")
    }

    func testPipelineEndingWithoutATerminalResultFailsInternal() {
        var harness = WorkerCoreHarness()
        harness.job(1)
        harness.estimated(harness.token(1), bytes: 1)
        harness.ended(harness.token(1), .completed)
        XCTAssertEqual(harness.sentSummary.last, "failed 1 internal")
    }

    func testTheSameJobTwiceIsIgnoredButAnotherAttemptIsAJob() {
        var harness = WorkerCoreHarness()
        harness.job(1)
        harness.job(1)
        harness.job(1, attempt: 2)
        XCTAssertEqual(harness.jobs.count, 2)
        XCTAssertEqual(harness.sentSummary.dropFirst(), ["started 1", "started 1"])
        XCTAssert(harness.events.contains { if case .report(.duplicateJob(JobKey(jobID: 1, attempt: 1))) = $0 { true } else { false } })
    }

    func testSpecTheImagingPipelineCannotHonourFailsAtOnce() {
        var harness = WorkerCoreHarness()
        var job = Enlarger_V1_Job()
        job.jobID = 7
        job.attempt = 1
        job.requestID = "r7"
        job.spec.width = 10
        job.spec.fit = .UNRECOGNIZED(9)
        harness.broker(.job(job, image: WorkerCoreHarness.image))
        XCTAssertEqual(harness.sentSummary.dropFirst(), ["started 7", "failed 7 invalidArgument"])
        XCTAssertEqual(harness.jobs.count, 0, "no thread started")
    }

    func testAbandonedJobIdsCanBeReusedByTheNextConnection() {
        var harness = WorkerCoreHarness(heartbeat: .milliseconds(100))
        harness.job(1)
        let first = harness.token(1)
        harness.advance(by: .milliseconds(300))
        harness.job(1)
        let second = harness.token(1)
        XCTAssertNotEqual(first, second)
        harness.clear()
        harness.ended(first, .completed)
        harness.estimated(second, bytes: 1)
        harness.result(second, .final, terminal: true)
        XCTAssertEqual(harness.sentSummary, ["occupancy 0 []", "final 1"],
                       "the old job's end says only that its thread is free; the new one runs")
    }

    // MARK: Memory

    func testJobsWaitForMemoryInArrivalOrderAndRunAsItIsFreed() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        for id in 1...4 { harness.job(UInt64(id)) }
        let t = (1...4).map { harness.token(UInt64($0)) }
        // Estimates arrive out of order from the job threads.
        harness.estimated(t[1], bytes: 30)
        harness.estimated(t[0], bytes: 60)
        XCTAssertEqual(harness.admitted, [t[1], t[0]])
        harness.estimated(t[2], bytes: 50)
        harness.estimated(t[3], bytes: 10)
        XCTAssertEqual(harness.admitted.count, 2, "job 3 must wait, and job 4 behind it though it would fit")
        XCTAssertEqual(harness.core.memoryInUse, 90)
        XCTAssertEqual(harness.core.jobsWaitingForMemory, 2)
        harness.clear()
        harness.result(t[1], .final, terminal: true)
        harness.ended(t[1])
        XCTAssertEqual(harness.admitted, [], "60 + 50 does not fit yet")
        harness.result(t[0], .final, terminal: true)
        harness.ended(t[0])
        XCTAssertEqual(harness.admitted, [t[2], t[3]])
        XCTAssertEqual(harness.core.memoryInUse, 60)
    }

    func testAJobWaitingForMemoryIsCancellableAndLetsTheNextOneIn() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        for id in 1...3 { harness.job(UInt64(id)) }
        let t = (1...3).map { harness.token(UInt64($0)) }
        harness.estimated(t[0], bytes: 60)
        harness.estimated(t[1], bytes: 80)
        harness.estimated(t[2], bytes: 40)
        XCTAssertEqual(harness.admitted, [t[0]])
        harness.clear()
        harness.cancel(2)
        XCTAssertEqual(harness.cancelled, [t[1]])
        XCTAssertTrue(harness.jobs[t[1]]!.control.isCancelled, "its thread stops waiting")
        XCTAssertEqual(harness.admitted, [t[2]], "the job behind it fits now")
        harness.ended(t[1], .failed(ImagingError(.cancelled, "cancelled before it was admitted")))
        XCTAssertEqual(harness.sentSummary, ["cancelled 2"])
        XCTAssertEqual(harness.core.memoryInUse, 100)
    }

    func testAnEstimateOverTheWholeBudgetFailsAtOnceWithTooLarge() {
        var harness = WorkerCoreHarness(memoryBudget: 100 << 20)
        harness.job(1)
        harness.job(2)
        let (huge, small) = (harness.token(1), harness.token(2))
        harness.estimated(small, bytes: 90 << 20)
        harness.clear()
        harness.record(harness.core.jobEstimated(huge, MemoryEstimate(
            bytes: 1_300 << 20, coefficientBytes: 300 << 20, decodedBytes: 200 << 20)))
        guard case .jobFailed(let failed) = harness.sent.first else { return XCTFail("\(harness.sent)") }
        XCTAssertEqual(failed.code, .tooLarge)
        XCTAssert(failed.message.contains("1.3 GiB"), failed.message)
        XCTAssert(failed.message.contains("memory budget of 100.0 MiB"), failed.message)
        XCTAssert(failed.message.contains("can never run"), failed.message)
        XCTAssertEqual(harness.cancelled, [huge], "its thread is released")
        XCTAssertEqual(harness.core.memoryInUse, 90 << 20, "it took nothing")
        harness.clear()
        harness.cancel(1)
        harness.ended(huge, .failed(ImagingError(.cancelled, "cancelled")))
        XCTAssertEqual(harness.sent.count, 0, "one terminal frame only")
    }

    func testMemoryIsFreeOnlyOnceTheBuffersAFinishedJobReleasedAreGone() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        harness.job(2)
        let (first, second) = (harness.token(1), harness.token(2))
        harness.estimated(first, bytes: 80)
        harness.estimated(second, bytes: 80)
        harness.result(first, .final, terminal: true)
        harness.clear()
        harness.ended(first, .completed, freed: false)
        XCTAssertEqual(harness.admitted, [], "the first job's buffers are still being freed")
        XCTAssertEqual(harness.core.memoryInUse, 80)
        XCTAssertEqual(harness.core.jobs.count, 1, "but the job itself is forgotten")
        harness.memoryFreed(first)
        XCTAssertEqual(harness.admitted, [second])
        harness.memoryFreed(first)
        XCTAssertEqual(harness.core.memoryInUse, 80, "a second notice changes nothing")
    }

    /// A finished job's results still waiting in the outbox for a slow broker are no longer
    /// in its reservation: they count against the budget until they are sent.
    func testResultsWaitingToBeSentCountAgainstTheBudget() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        harness.job(2)
        let (first, second) = (harness.token(1), harness.token(2))
        harness.estimated(first, bytes: 80)
        harness.result(first, .final, terminal: true)
        harness.ended(first)
        harness.record(harness.core.outboxHolds(50))
        harness.clear()
        harness.estimated(second, bytes: 60)
        XCTAssertEqual(harness.admitted, [], "60 more does not fit beside the 50 waiting to be sent")
        harness.record(harness.core.outboxHolds(40))
        XCTAssertEqual(harness.admitted, [second])
        XCTAssertEqual(harness.core.memoryInUse, 60)
    }

    /// The outbox keeps count of the bytes it holds, and forgets them with its messages.
    func testTheOutboxCountsItsBytes() {
        var outbox = Outbox<String>(optionalLimit: 4)
        var open = false
        outbox.send("a", .required, bytes: 10) { _ in open }
        outbox.send("b", .optional, bytes: 5) { _ in open }
        outbox.send("c", .droppable, bytes: 7) { _ in open }
        XCTAssertEqual(outbox.bytes, 15)
        var sent = 0
        outbox.flush { _ in sent += 1; return sent <= 1 }
        XCTAssertEqual(outbox.bytes, 5)
        outbox.clear()
        XCTAssertEqual(outbox.bytes, 0)
        open = true
        outbox.send("d", .required, bytes: 9) { _ in open }
        XCTAssertEqual(outbox.bytes, 0, "sent at once")
    }

    func testAbandonedJobsKeepTheirMemoryUntilTheirThreadsReturn() {
        var harness = WorkerCoreHarness(heartbeat: .milliseconds(100), memoryBudget: 100)
        harness.job(1)
        harness.job(2)
        harness.estimated(harness.token(1), bytes: 70)
        harness.estimated(harness.token(2), bytes: 70)
        let (old, waiting) = (harness.token(1), harness.token(2))
        harness.advance(by: .milliseconds(300))  // silence: both abandoned
        XCTAssertEqual(harness.core.jobsWaitingForMemory, 0)
        harness.job(1)
        let fresh = harness.token(1)
        harness.clear()
        harness.estimated(fresh, bytes: 70)
        XCTAssertEqual(harness.admitted, [], "the abandoned job's thread still holds 70")
        harness.ended(waiting, .failed(ImagingError(.cancelled, "cancelled")))
        XCTAssertEqual(harness.admitted, [])
        harness.ended(old, .failed(ImagingError(.cancelled, "cancelled")))
        XCTAssertEqual(harness.admitted, [fresh])
        XCTAssertEqual(harness.sentSummary, ["occupancy 1 []", "occupancy 0 []"],
                       "nothing about the abandoned jobs but that their threads are free")
    }
}
