import EnlargerProtocol
import XCTest

@testable import EnlargerBroker

/// Heartbeats, dead and departing workers, retries, vanished clients.
final class BrokerCoreLivenessTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let w1: PeerID = "worker-1"
    let w2: PeerID = "worker-2"
    let w3: PeerID = "worker-3"

    private func harness() -> CoreHarness {
        CoreHarness {
            $0.heartbeatInterval = .milliseconds(100)
            $0.heartbeatLiveness = 3
        }
    }

    /// Advances one heartbeat interval at a time; `alive` peers send a heartbeat (or ping)
    /// at every step, the others stay silent.
    private func pass(
        _ intervals: Int, _ broker: inout CoreHarness, alive workers: [PeerID] = [], clients: [PeerID] = []
    ) {
        for _ in 0..<intervals {
            for worker in workers { broker.worker(worker, .heartbeat) }
            for client in clients { broker.client(client, .ping) }
            broker.advance(by: .milliseconds(100))
        }
        broker.discardPongs()
    }

    func testBrokerHeartbeatsRegisteredWorkers() {
        var broker = harness()
        broker.ready(w1)
        broker.advance(by: .milliseconds(100))
        XCTAssertEqual(broker.toWorkers.map(\.command.summary), ["heartbeat"])
        XCTAssertEqual(broker.core.nextDeadline, broker.now + .milliseconds(100))
    }

    func testSilentWorkerIsLostAndItsJobRetriedWithANewAttempt() {
        var broker = harness()
        broker.ready(w1)
        broker.submit(alice, "a")
        let first = broker.jobs(for: w1)[0]
        broker.ready(w2)

        pass(4, &broker, alive: [w2], clients: [alice])
        XCTAssertEqual(broker.core.totals.workersLost, 1)
        let retry = broker.jobs(for: w2)
        XCTAssertEqual(retry.map(\.jobID), [first.jobID])
        XCTAssertEqual(retry.map(\.attempt), [2])

        // The lost worker wakes up: it is a stranger now, told to re-register.
        broker.finish(w1, first)
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["disconnect"])
        // A frame naming the old attempt, even from the current holder, is late.
        broker.result(w2, retry[0], .final, terminal: true, attempt: 1)
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 2)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a"])

        broker.finish(w2, retry[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result a final terminal"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testThreeLostAttemptsFailWithWorkerLost() {
        var broker = harness()
        broker.submit(alice, "poison")
        var attempts: [UInt32] = []
        for worker in [w1, w2, w3] {
            let jobs = broker.ready(worker)
            attempts += jobs.map(\.attempt)
            pass(4, &broker, clients: [alice])
        }
        XCTAssertEqual(attempts, [1, 2, 3])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted poison", "failed poison workerLost"])
        XCTAssertEqual(broker.core.totals.workersLost, 3)
        XCTAssertEqual(broker.core.totals.jobsRequeued, 2)
        XCTAssertTrue(broker.core.isIdle)
    }

    func testGracefulDisconnectHandsJobsBackWithoutUsingRetries() {
        var broker = harness()
        broker.submit(alice, "a")
        broker.submit(alice, "b")
        for round in 1...5 {
            let worker = PeerID(Array("drainer-\(round)".utf8))
            let jobs = broker.ready(worker, capacity: 2)
            XCTAssertEqual(jobs.map(\.requestID), ["a", "b"], "handed-back jobs keep their order")
            XCTAssertEqual(jobs.map(\.attempt), [UInt32(round), UInt32(round)])
            broker.worker(worker, .disconnect)
        }
        XCTAssertEqual(broker.core.totals.workersDisconnected, 5)
        XCTAssertEqual(broker.core.totals.workersLost, 0)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "accepted b"])
        XCTAssertEqual(broker.core.status(now: broker.now).queueDepth, 2)
    }

    func testRetryAfterADegradedResultAsksForTheFinalOnly() {
        var broker = harness()
        broker.ready(w1)
        broker.submit(alice, "a")
        let first = broker.jobs(for: w1)[0]
        broker.result(w1, first, .degraded, terminal: false)
        broker.worker(w1, .disconnect)
        let retry = broker.ready(w2)
        XCTAssertEqual(retry.map(\.delivery), [.final])
        broker.finish(w2, retry[0])
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary), ["accepted a", "result a degraded", "result a final terminal"])
    }

    func testReadyFromAKnownWorkerResetsIt() {
        var broker = harness()
        broker.ready(w1)
        broker.submit(alice, "a")
        let first = broker.jobs(for: w1)[0]
        let again = broker.ready(w1, capacity: 1)
        XCTAssertEqual(again.map(\.attempt), [2], "the job it held was dispatched afresh")
        // It started over (after a broker pause, say): no worker was lost, no job is blamed.
        XCTAssertEqual(broker.core.totals.workersLost, 0)
        XCTAssertEqual(broker.core.totals.workersDisconnected, 1)
        XCTAssertEqual(broker.core.jobs.values.map(\.losses), [0])
        broker.finish(w1, first)
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 1)
        broker.finish(w1, again[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a final terminal"])
    }

    func testUnreachableWorkerIsLostAtOnce() {
        var broker = harness()
        broker.ready(w1)
        broker.ready(w2)
        broker.submit(alice, "a")
        XCTAssertEqual(broker.jobs(for: w1).count, 1)
        broker.workerUnreachable(w1)
        XCTAssertEqual(broker.jobs(for: w2).map(\.attempt), [2])
        XCTAssertEqual(broker.core.totals.unroutable, 1)
    }

    /// Alice with a request running on w1 and one waiting, her Accepted frames taken: the
    /// broker and the running job.
    private func aliceRunningAndWaiting() -> (CoreHarness, job: UInt64) {
        var broker = harness()
        broker.ready(w1)
        broker.submit(alice, "running")
        broker.submit(alice, "waiting")
        let job = broker.jobs(for: w1)[0].jobID
        _ = broker.events(for: alice)
        return (broker, job)
    }

    /// Alice's work was stopped: her running job cancelled on w1, both requests failed, she
    /// counted as vanished; once w1 acknowledges, nothing is left.
    private func assertAlicesWorkStopped(_ broker: inout CoreHarness, job: UInt64,
                                         file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(job) #1"], file: file, line: line)
        XCTAssertEqual(broker.core.totals.failed, 2, file: file, line: line)
        XCTAssertEqual(broker.core.totals.clientsVanished, 1, file: file, line: line)
        broker.worker(w1, .jobCancelled(.with { $0.jobID = job; $0.attempt = 1 }))
        XCTAssertTrue(broker.core.isIdle, file: file, line: line)
    }

    func testSilentClientVanishesAndItsWorkIsStopped() {
        var (broker, job) = aliceRunningAndWaiting()
        pass(4, &broker, alive: [w1])
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary),
            ["failed running clientSilent", "failed waiting clientSilent"],
            "each request ends with a code, in case the client is still listening")
        XCTAssertTrue(broker.takeReports().contains(.clientVanished(alice, cancelled: 2)))
        assertAlicesWorkStopped(&broker, job: job)
    }

    func testPingingClientStaysAliveWhileItsRequestWaits() {
        var broker = harness()
        broker.submit(alice, "a")
        pass(10, &broker, clients: [alice])
        XCTAssertEqual(broker.core.liveRequestCount, 1)
        XCTAssertEqual(broker.core.totals.clientsVanished, 0)
    }

    /// A client whose connection (and with it its libzmq-made id) ended is gone at once: its
    /// work is stopped without waiting for the silence limit, and nothing is sent to it.
    func testADepartedClientsWorkIsStoppedAtOnceAndItIsToldNothing() {
        var (broker, job) = aliceRunningAndWaiting()
        broker.record(broker.core.clientDeparted(alice, now: broker.now))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), [], "nobody is there to tell")
        XCTAssertEqual(broker.core.totals.unroutable, 0)
        assertAlicesWorkStopped(&broker, job: job)
    }

    func testUnreachableClientIsTreatedAsVanished() {
        var broker = harness()
        broker.submit(alice, "a")
        broker.clientUnreachable(alice)
        XCTAssertEqual(broker.core.totals.failed, 1)
        XCTAssertEqual(broker.core.totals.unroutable, 1)
        XCTAssertTrue(broker.core.isIdle)
    }
}
