import EnlargerProtocol
import XCTest

@testable import EnlargerBroker

/// Bad input from any peer gets a clear answer (or a counted drop), and the broker keeps
/// serving everyone else: every case is followed by a request that must still succeed.
final class BrokerCoreMalformedTests: XCTestCase {
    let mallory: PeerID = "client-mallory"
    let alice: PeerID = "client-alice"
    let w1: PeerID = "worker-1"
    let rogue: PeerID = "worker-rogue"

    private var serial = 0

    private func harness() -> CoreHarness {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        return broker
    }

    /// A well-behaved request from start to finish.
    private func assertStillServes(_ broker: inout CoreHarness, file: StaticString = #filePath, line: UInt = #line) {
        serial += 1
        let id = "good-\(serial)"
        broker.submit(alice, id)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.map(\.requestID), [id], file: file, line: line)
        guard let job = jobs.first else { return }
        broker.result(w1, job, .degraded, terminal: false)
        broker.finish(w1, job)
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary),
            ["accepted \(id)", "result \(id) degraded", "result \(id) final terminal"], file: file, line: line)
        XCTAssertEqual(broker.inconsistencies, [], file: file, line: line)
    }

    private func assertClientGetsError(
        _ frames: [Bytes], file: StaticString = #filePath, line: UInt = #line
    ) {
        var broker = harness()
        let before = broker.core.totals.malformedDropped
        broker.clientFrames(mallory, frames)
        XCTAssertEqual(broker.events(for: mallory).map(\.summary), ["error malformed"], file: file, line: line)
        XCTAssertEqual(broker.core.totals.malformedDropped, before + 1, file: file, line: line)
        XCTAssertEqual(broker.core.totals.submitted, 0, file: file, line: line)
        assertStillServes(&broker, file: file, line: line)
    }

    private func assertWorkerGetsError(
        _ frames: [Bytes], from peer: PeerID? = nil, file: StaticString = #filePath, line: UInt = #line
    ) {
        var broker = harness()
        broker.submit(alice, "busy")
        let busy = broker.jobs(for: w1)
        _ = broker.events(for: alice)
        let sender = peer ?? w1
        broker.workerFrames(sender, frames)
        XCTAssertEqual(broker.commands(for: sender).map(\.summary), ["error malformed"], file: file, line: line)
        XCTAssertEqual(broker.core.totals.malformedDropped, 1, file: file, line: line)
        XCTAssertEqual(broker.events(for: alice), [], file: file, line: line)
        broker.finish(w1, busy[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result busy final terminal"], file: file, line: line)
        assertStillServes(&broker, file: file, line: line)
    }

    private var ping: [Bytes] { ClientToBrokerMessage<Bytes>.ping.encoded().frames }

    // MARK: Clients

    func testClientFramingErrors() {
        assertClientGetsError([])
        assertClientGetsError([ProtocolTag.client.bytes])
        assertClientGetsError([Array("HTTP/1.1".utf8), ping[1]])
        assertClientGetsError([ProtocolTag.client.bytes, [0xFF, 0xFF, 0xFF]])
        assertClientGetsError([ProtocolTag.client.bytes, []])
        assertClientGetsError(ping + [[1, 2, 3]])
        assertClientGetsError([ProtocolTag.client.bytes, [UInt8](repeating: 0, count: WireLimits.maxHeaderBytes + 1)])
    }

    func testWorkerMessagesOnTheClientSocket() {
        assertClientGetsError(WorkerToBrokerMessage<Bytes>.heartbeat.encoded().frames)
        var wrongTag = WorkerToBrokerMessage<Bytes>.ready(.with { $0.capacity = 1 }).encoded().frames
        wrongTag[0] = ProtocolTag.client.bytes
        assertClientGetsError(wrongTag)
    }

    func testInvalidRequestIDs() {
        for id in ["", String(repeating: "x", count: 65)] {
            assertClientGetsError(
                ClientToBrokerMessage.submit(CoreHarness.submitMessage(id), image: CoreHarness.jpeg).encoded().frames)
            assertClientGetsError(ClientToBrokerMessage<Bytes>.cancel(.with { $0.requestID = id }).encoded().frames)
        }
    }

    func testSubmitWithBadFramesIsRejectedByID() {
        for frames in [
            Array(ClientToBrokerMessage.submit(CoreHarness.submitMessage("x"), image: CoreHarness.jpeg).encoded().frames.prefix(2)),
            ClientToBrokerMessage.submit(CoreHarness.submitMessage("x"), image: CoreHarness.jpeg).encoded().frames + [[0]],
        ] {
            var broker = harness()
            broker.clientFrames(mallory, frames)
            XCTAssertEqual(broker.events(for: mallory).map(\.summary), ["rejected x malformed"])
            XCTAssertEqual(broker.core.totals.submitted, 1)
            XCTAssertEqual(broker.core.totals.rejected, 1)
            XCTAssertEqual(broker.core.totals.malformedDropped, 1)
            assertStillServes(&broker)
        }
    }

    func testInvalidSpecIsRejected() {
        var broker = harness()
        var submit = CoreHarness.submitMessage("x")
        submit.spec.quality = 500
        broker.client(mallory, .submit(submit, image: CoreHarness.jpeg))
        XCTAssertEqual(broker.events(for: mallory).map(\.summary), ["rejected x invalidArgument"])
        assertStillServes(&broker)
    }

    // MARK: Workers

    func testWorkerFramingErrors() {
        assertWorkerGetsError([])
        assertWorkerGetsError([ProtocolTag.worker.bytes, [0x0A, 0x7F]])
        assertWorkerGetsError([ProtocolTag.worker.bytes, []])
        assertWorkerGetsError(WorkerToBrokerMessage<Bytes>.heartbeat.encoded().frames + [[]])
        assertWorkerGetsError(
            Array(WorkerToBrokerMessage.jobResult(.with { $0.jobID = 1 }, image: Bytes()).encoded().frames.prefix(2)))
    }

    func testClientMessagesOnTheWorkerSocket() {
        assertWorkerGetsError(ClientToBrokerMessage<Bytes>.ping.encoded().frames)
        assertWorkerGetsError(ClientToBrokerMessage<Bytes>.statusRequest.encoded().frames, from: rogue)
    }

    func testInvalidReady() {
        assertWorkerGetsError(WorkerToBrokerMessage<Bytes>.ready(.with { $0.capacity = 0 }).encoded().frames, from: rogue)
        assertWorkerGetsError(WorkerToBrokerMessage<Bytes>.ready(.with { $0.capacity = 5000 }).encoded().frames, from: rogue)
        assertWorkerGetsError(
            WorkerToBrokerMessage<Bytes>.ready(.with {
                $0.capacity = 1
                $0.workerName = String(repeating: "n", count: 300)
            }).encoded().frames, from: rogue)
    }

    func testResultsForJobsNeverIssued() {
        for jobID: UInt64 in [0, 99] {
            assertWorkerGetsError(
                WorkerToBrokerMessage.jobResult(
                    .with { $0.jobID = jobID; $0.attempt = 1; $0.stage = .final; $0.terminal = true },
                    image: CoreHarness.image
                ).encoded().frames)
        }
        assertWorkerGetsError(
            WorkerToBrokerMessage<Bytes>.jobFailed(.with { $0.jobID = 1; $0.attempt = 7 }).encoded().frames)
        assertWorkerGetsError(
            WorkerToBrokerMessage<Bytes>.jobStarted(.with { $0.jobID = 1; $0.attempt = 0 }).encoded().frames)
    }

    func testResultFromAWorkerThatDoesNotHoldTheJob() {
        var broker = harness()
        broker.ready(rogue)
        broker.submit(alice, "a")
        let job = broker.jobs(for: w1)[0]
        broker.finish(rogue, job)
        XCTAssertEqual(broker.commands(for: rogue).map(\.summary), ["error malformed"])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a"])
        broker.finish(w1, job)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result a final terminal"])
        assertStillServes(&broker)
    }

    /// A result that breaks the delivery's rules about a job the worker holds: the worker may
    /// think the job done and never send a terminal frame, so the request ends at once with
    /// INTERNAL and the job is withdrawn from the worker (its credit back on the worker's ack).
    func testResultWithAnInvalidStageOrFlagEndsTheRequest() {
        let cases: [(Enlarger_V1_Stage, Bool)] = [(.unspecified, true), (.final, false), (.degraded, true)]
        for (stage, terminal) in cases {
            var broker = harness()
            broker.submit(alice, "a")
            let job = broker.jobs(for: w1)[0]
            broker.result(w1, job, stage, terminal: terminal)
            XCTAssertEqual(broker.commands(for: w1).map(\.summary),
                           ["error malformed", "cancelJob \(job.jobID) #\(job.attempt)"], "\(stage) \(terminal)")
            XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "failed a internal"], "\(stage) \(terminal)")
            // Whatever the worker sends for it afterwards is dropped; its terminal frame returns the credit.
            broker.finish(w1, job)
            XCTAssertEqual(broker.events(for: alice).map(\.summary), [])
            assertStillServes(&broker)
        }
    }

    func testUnsolicitedJobCancelledIsMalformed() {
        var broker = harness()
        broker.submit(alice, "a")
        let job = broker.jobs(for: w1)[0]
        broker.worker(w1, .jobCancelled(.with { $0.jobID = job.jobID; $0.attempt = job.attempt }))
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["error malformed"])
        broker.finish(w1, job)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a final terminal"])
        assertStillServes(&broker)
    }

    func testUnregisteredWorkerIsToldToRegister() {
        var broker = harness()
        broker.worker(rogue, .heartbeat)
        broker.worker(rogue, .jobFailed(.with { $0.jobID = 1; $0.attempt = 1 }))
        broker.worker(rogue, .disconnect)
        XCTAssertEqual(broker.commands(for: rogue).map(\.summary), ["disconnect", "disconnect"])
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 1)
        assertStillServes(&broker)
    }
}
