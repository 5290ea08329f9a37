import EnlargerProtocol
import XCTest

@testable import EnlargerBroker

/// Honest credit: a cancelled job's thread keeps its credit until it is free, and a worker
/// that says so (Occupancy) is not retired for a stage that cannot be interrupted; threads
/// still busy with abandoned jobs count as taken credits.
final class BrokerCoreOccupancyTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let w1: PeerID = "worker-1"
    let w2: PeerID = "worker-2"

    static func stopping(_ jobs: Enlarger_V1_Job...) -> WorkerToBrokerMessage<Bytes> {
        var occupancy = Enlarger_V1_Occupancy()
        occupancy.stopping = jobs.map { job in
            var attempt = Enlarger_V1_JobAttempt()
            attempt.jobID = job.jobID
            attempt.attempt = job.attempt
            return attempt
        }
        return .occupancy(occupancy)
    }

    func testAWorkerNamingItsStoppingJobKeepsItsCreditTakenAndIsNotRetired() {
        var broker = CoreHarness {
            $0.heartbeatInterval = .seconds(1)
            $0.cancelAckTimeout = .seconds(2)
        }
        broker.ready(w1, capacity: 2)
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        broker.submit(alice, "c")
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.map(\.requestID), ["a", "b"])
        broker.cancel(alice, "a")
        XCTAssertEqual(broker.events(for: alice).map(\.summary).suffix(2), ["cancelled a", "cancelAck a cancelled"],
                       "the client hears Cancelled at once")
        _ = broker.commands(for: w1)
        // An encode nobody can stop: 20 s, ten times the cancel-ack timeout, named each second.
        for _ in 0..<20 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.worker(w1, Self.stopping(jobs[0]))
            broker.advance(by: .seconds(1))
        }
        XCTAssertEqual(broker.core.totals.workersLost, 0, "an honestly running stage does not retire the worker")
        XCTAssertEqual(broker.core.totals.cancelAcksTimedOut, 0)
        XCTAssertEqual(broker.jobs(for: w1), [], "c waits: the stopping thread still holds its credit")
        XCTAssertEqual(broker.core.status(now: broker.now).workers[0].inFlight, 2)

        broker.worker(w1, .jobCancelled(.with { $0.jobID = jobs[0].jobID; $0.attempt = 1 }))
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["c"], "the credit comes back when the thread is free")
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testAWorkerThatStopsNamingItsCancelledJobIsRetired() {
        var broker = CoreHarness {
            $0.heartbeatInterval = .seconds(1)
            $0.cancelAckTimeout = .seconds(2)
        }
        broker.ready(w1, capacity: 2)
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        let jobs = broker.jobs(for: w1)
        broker.cancel(alice, "a")
        for _ in 0..<5 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.worker(w1, Self.stopping(jobs[0]))
            broker.advance(by: .seconds(1))
        }
        XCTAssertEqual(broker.core.totals.workersLost, 0)
        // Still heartbeating, but no longer accounting for the job: really stuck.
        for _ in 0..<3 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.worker(w1, .occupancy(.init()))
            broker.advance(by: .seconds(1))
        }
        XCTAssertEqual(broker.core.totals.cancelAcksTimedOut, 1)
        XCTAssertEqual(broker.core.totals.workersLost, 1)
        XCTAssertEqual(broker.ready(w2, capacity: 2).map(\.requestID), ["b"])
    }

    func testNamingAnotherAttemptDoesNotKeepATombstoneAlive() {
        var broker = CoreHarness {
            $0.heartbeatInterval = .seconds(1)
            $0.cancelAckTimeout = .seconds(2)
        }
        broker.ready(w1, capacity: 2)
        broker.submit(alice, "a")
        var job = broker.jobs(for: w1)[0]
        broker.cancel(alice, "a")
        job.attempt += 1
        for _ in 0..<4 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.worker(w1, Self.stopping(job))
            broker.advance(by: .seconds(1))
        }
        XCTAssertEqual(broker.core.totals.workersLost, 1)
    }

    func testThreadsBusyWithAbandonedJobsAreTakenCreditUntilTheWorkerSaysTheyAreFree() {
        var broker = CoreHarness()
        broker.worker(w1, .ready(.with { $0.capacity = 2; $0.busyThreads = 1; $0.workerName = "w" }))
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["a"], "one thread is still encoding an abandoned job")
        XCTAssertEqual(broker.core.status(now: broker.now).workers[0].inFlight, 2)
        broker.worker(w1, .occupancy(.with { $0.busyThreads = 0 }))
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["b"])
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testOccupancyOverTheCapacityIsMalformed() {
        var broker = CoreHarness()
        broker.worker(w1, .ready(.with { $0.capacity = 2; $0.busyThreads = 3 }))
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["error malformed"])
        XCTAssertEqual(broker.core.status(now: broker.now).workers.count, 0, "nothing registered")
        broker.ready(w1, capacity: 2)
        broker.worker(w1, .occupancy(.with { $0.busyThreads = 5 }))
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["error malformed"])
        broker.submit(alice, "a")
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["a"], "a malformed Occupancy changes nothing")
    }
}
