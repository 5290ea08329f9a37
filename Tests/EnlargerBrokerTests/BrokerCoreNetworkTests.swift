import EnlargerProtocol
import XCTest

@testable import EnlargerBroker

/// The promises that must hold across a real network: every accepted request ends with a
/// code the client can act on, nothing grows without bound, and principals stay apart.
final class BrokerCoreNetworkTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let bob: PeerID = "client-bob"
    let w1: PeerID = "worker-1"
    let w2: PeerID = "worker-2"
    let w3: PeerID = "worker-3"

    private func harness(_ configure: (inout BrokerConfiguration) -> Void = { _ in }) -> CoreHarness {
        CoreHarness {
            $0.heartbeatInterval = .milliseconds(100)
            $0.heartbeatLiveness = 3
            configure(&$0)
        }
    }

    private func submit(_ broker: inout CoreHarness, _ peer: PeerID, _ id: String, deadlineMs: UInt32 = 0,
                        as principal: Principal = .local) {
        var submit = CoreHarness.submitMessage(id, delivery: .final)
        submit.deadlineMs = deadlineMs
        broker.client(peer, as: principal, .submit(submit, image: CoreHarness.jpeg))
    }

    // MARK: Liveness parameters reach the client before they matter

    func testAcceptedCarriesTheHeartbeatIntervalAndDeadlineAndPongTheInputLimit() {
        var broker = harness { $0.defaultDeadline = .seconds(7); $0.maxInputBytes = 1234 }
        submit(&broker, alice, "a")
        submit(&broker, alice, "b", deadlineMs: 1500)
        broker.client(alice, .ping)
        let events = broker.events(for: alice)
        guard case .accepted(let a) = events[0], case .accepted(let b) = events[1], case .pong(let pong) = events[2] else {
            return XCTFail("\(events.map(\.summary))")
        }
        XCTAssertEqual(a.heartbeatIntervalMs, 100)
        XCTAssertEqual(a.deadlineMs, 7000, "the broker's default applies")
        XCTAssertEqual(b.deadlineMs, 1500)
        XCTAssertEqual(pong.maxInputBytes, 1234)
        XCTAssertEqual(pong.heartbeatIntervalMs, 100)
    }

    // MARK: Deadlines

    func testRequestsEndAtTheirDeadlineAndTheirWorkIsStopped() {
        var broker = harness { $0.maxDeadline = .seconds(2) }
        let jobs = broker.ready(w1)
        XCTAssertTrue(jobs.isEmpty)
        submit(&broker, alice, "running", deadlineMs: 300)
        submit(&broker, alice, "queued", deadlineMs: 250)
        submit(&broker, alice, "capped", deadlineMs: 60_000)
        let job = broker.jobs(for: w1)[0]
        _ = broker.events(for: alice)
        XCTAssertEqual(broker.core.nextDeadline, broker.now + .milliseconds(100))
        for _ in 0..<2 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.advance(by: .milliseconds(100))
        }
        broker.discardPongs()
        XCTAssertEqual(broker.events(for: alice).map(\.summary), [])
        // The earliest deadline wakes the loop even between heartbeat rounds.
        XCTAssertEqual(broker.core.nextDeadline, broker.now + .milliseconds(50))
        broker.advance(by: .milliseconds(50))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["failed queued deadlineExceeded"])
        broker.advance(by: .milliseconds(50))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["failed running deadlineExceeded"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(job.jobID) #1"])
        broker.worker(w1, .jobCancelled(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        // The freed credit goes to the next request; the capped one still ends at 2 s.
        let next = broker.jobs(for: w1)
        XCTAssertEqual(next.map(\.requestID), ["capped"])
        for _ in 0..<20 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.advance(by: .milliseconds(100))
        }
        broker.discardPongs()
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["failed capped deadlineExceeded"])
        XCTAssertEqual(broker.core.totals.deadlinesExceeded, 3)
        broker.worker(w1, .jobCancelled(.with { $0.jobID = next[0].jobID; $0.attempt = 1 }))
        XCTAssertTrue(broker.core.isIdle)
    }

    // MARK: Worker codes and broken frames

    func testWorkerCodesOutsideTheContractReachTheClientAsInternal() {
        var broker = harness()
        broker.ready(w1, capacity: 4)
        for id in ["dup", "busy", "bye", "bad"] { submit(&broker, alice, id) }
        let jobs = Dictionary(uniqueKeysWithValues: broker.jobs(for: w1).map { ($0.requestID, $0) })
        _ = broker.events(for: alice)
        let codes: [(String, Enlarger_V1_ErrorCode)] = [
            ("dup", .duplicateID), ("busy", .overloaded), ("bye", .brokerShutdown), ("bad", .corrupt),
        ]
        for (id, code) in codes {
            broker.worker(w1, .jobFailed(.with { $0.jobID = jobs[id]!.jobID; $0.attempt = 1; $0.code = code }))
        }
        XCTAssertEqual(
            broker.events(for: alice).map(\.summary),
            ["failed dup internal", "failed busy internal", "failed bye internal", "failed bad corrupt"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testAJobFrameWithBrokenFramingEndsItsRequestAndFreesTheCredit() {
        var broker = harness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        submit(&broker, alice, "b")
        let job = broker.jobs(for: w1)[0]
        _ = broker.events(for: alice)
        // A JobResult without its payload frame.
        let frames = WorkerToBrokerMessage<Bytes>.jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = 1
            $0.stage = .final
            $0.terminal = true
        }, image: []).encoded().frames
        broker.workerFrames(w1, Array(frames.prefix(2)))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["failed a internal"])
        let commands = broker.commands(for: w1).map(\.summary)
        XCTAssertEqual(commands, ["error malformed", "cancelJob \(job.jobID) #1"])
        XCTAssertEqual(broker.core.totals.protocolBreaches, 1)
        broker.worker(w1, .jobCancelled(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["b"], "the credit came back")
    }

    // MARK: A paused broker does not blame its peers

    func testAStalledBrokerJudgesLivenessOnlyAfterReadingWhatWaited() {
        var broker = harness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        let job = broker.jobs(for: w1)[0]
        _ = broker.events(for: alice)
        // The broker process is stopped for 5 s; meanwhile both peers kept talking, and their
        // messages wait on the sockets. The loop reads them before it ticks.
        broker.now = broker.now + .seconds(5)
        broker.client(alice, .ping)
        broker.worker(w1, .heartbeat)
        broker.advance(by: .zero)
        broker.discardPongs()
        XCTAssertEqual(broker.core.totals.clientsVanished, 0)
        XCTAssertEqual(broker.core.totals.workersLost, 0)
        broker.finish(w1, job)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result a final terminal"])
    }

    func testAStallForgivesSilenceThatTheBrokerCouldNotHaveHeard() {
        var broker = harness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        _ = broker.jobs(for: w1)
        _ = broker.events(for: alice)
        // Paused for 5 s, then the first thing the broker does is its timer: the peers'
        // messages are not judged missing for time the broker was not listening.
        broker.advance(by: .seconds(5))
        XCTAssertEqual(broker.core.totals.clientsVanished, 0)
        XCTAssertEqual(broker.core.totals.workersLost, 0)
        // Real silence after that is still noticed.
        for _ in 0..<4 { broker.advance(by: .milliseconds(100)) }
        XCTAssertEqual(broker.core.totals.clientsVanished, 1)
        XCTAssertEqual(broker.core.totals.workersLost, 1)
    }

    // MARK: Slow consumers get backpressure

    func testWorkOfAClientThatIsNotReadingIsHeldBack() {
        var broker = harness()
        broker.ready(w1, capacity: 2)
        submit(&broker, alice, "a1")
        submit(&broker, alice, "a2")
        let first = broker.jobs(for: w1)
        XCTAssertEqual(first.map(\.requestID), ["a1", "a2"])
        submit(&broker, alice, "a3")
        submit(&broker, bob, "b1")
        broker.backlog(alice, bytes: 5_000_000)
        broker.finish(w1, first[0])
        // Alice is not reading: her next job waits; Bob's goes ahead of it.
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["b1"])
        XCTAssertEqual(broker.core.status(now: broker.now).clientBytesWaiting, 5_000_000)
        XCTAssertEqual(broker.core.status(now: broker.now).queueDepth, 1)
        XCTAssertEqual(broker.core.totals.clientSendsDeferred, 1)
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
        broker.finish(w1, first[1])
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), [], "still held back")
        // She catches up: her job is dispatched at once.
        broker.backlog(alice, bytes: 0)
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["a3"])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    func testAHeldBackRequestCanStillBeCancelledAndExpire() {
        var broker = harness()
        broker.ready(w1)
        submit(&broker, alice, "running")
        let running = broker.jobs(for: w1)[0]
        submit(&broker, alice, "held", deadlineMs: 250)
        submit(&broker, alice, "cancelled")
        broker.backlog(alice, bytes: 10)
        broker.finish(w1, running)
        XCTAssertTrue(broker.jobs(for: w1).isEmpty)
        broker.cancel(alice, "cancelled")
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
        for _ in 0..<3 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.advance(by: .milliseconds(100))
        }
        broker.discardPongs()
        let summaries = broker.events(for: alice).map(\.summary)
        XCTAssertTrue(summaries.contains("cancelled cancelled"), "\(summaries)")
        XCTAssertTrue(summaries.contains("failed held deadlineExceeded"), "\(summaries)")
        broker.backlog(alice, bytes: 0)
        XCTAssertTrue(broker.core.isIdle)
    }

    // MARK: Quarantine: a crash is blamed only on the job that ran alone

    func testJobsOfALostWorkerRunAloneAndOnlyThePoisonFails() {
        var broker = harness()
        broker.ready(w1, capacity: 3)
        for id in ["poison", "innocent1", "innocent2"] { submit(&broker, alice, id) }
        XCTAssertEqual(broker.jobs(for: w1).count, 3)
        _ = broker.events(for: alice)

        broker.workerUnreachable(w1)  // the poison image crashed it
        XCTAssertEqual(broker.core.totals.jobsQuarantined, 3)
        // Each quarantined job runs alone on an idle worker, which gets nothing else.
        let onW2 = broker.ready(w2, capacity: 3)
        XCTAssertEqual(onW2.map(\.requestID), ["poison"])
        submit(&broker, alice, "fresh")
        XCTAssertTrue(broker.jobs(for: w2).isEmpty, "an exclusive worker takes no other job")
        // Fresh work goes first: a new worker takes it, and the quarantined jobs wait for
        // an idle worker.
        let onW3 = broker.ready(w3, capacity: 3)
        XCTAssertEqual(onW3.map(\.requestID), ["fresh"])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
        broker.finish(w3, onW3[0])
        // The innocent jobs complete, one at a time, on the idle worker.
        let first = broker.jobs(for: w3)
        XCTAssertEqual(first.map(\.requestID), ["innocent1"])
        broker.finish(w3, first[0])
        let second = broker.jobs(for: w3)
        XCTAssertEqual(second.map(\.requestID), ["innocent2"])
        broker.finish(w3, second[0])
        XCTAssertEqual(broker.jobs(for: w3).map(\.requestID), [])
        broker.worker(w3, .disconnect)

        // The poison kills every worker it runs on alone: three such deaths fail it.
        var holder = w2
        for round in 1...3 {
            broker.workerUnreachable(holder)
            let peer = PeerID(Array("worker-respawn-\(round)".utf8))
            let next = broker.ready(peer, capacity: 3)
            if round < 3 {
                guard let first = next.first else { return XCTFail("round \(round): nothing dispatched") }
                XCTAssertEqual(first.requestID, "poison", "round \(round)")
                holder = peer
            } else {
                XCTAssertTrue(next.isEmpty)
            }
        }
        let events = broker.events(for: alice).map(\.summary)
        XCTAssertTrue(events.contains("failed poison workerLost"), "\(events)")
        XCTAssertFalse(events.contains { $0.hasPrefix("failed innocent") }, "\(events)")
        XCTAssertTrue(events.contains("result innocent1 final terminal"), "\(events)")
        XCTAssertTrue(events.contains("result innocent2 final terminal"), "\(events)")
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    func testARestartedWorkerTakesFreshWorkBeforeQuarantinedJobs() {
        var broker = harness { $0.quarantineReservationDelay = .seconds(60) }
        broker.ready(w1, capacity: 2)
        for id in ["poison1", "poison2"] { submit(&broker, alice, id) }
        XCTAssertEqual(broker.jobs(for: w1).count, 2)
        broker.workerUnreachable(w1)  // both quarantined
        for id in ["fresh1", "fresh2", "fresh3"] { submit(&broker, bob, id) }
        // The worker that comes back is idle, yet the ordinary work waiting is its first.
        let onW2 = broker.ready(w2, capacity: 2)
        XCTAssertEqual(onW2.map(\.requestID), ["fresh1", "fresh2"])
        broker.finish(w2, onW2[0])
        let third = broker.jobs(for: w2)
        XCTAssertEqual(third.map(\.requestID), ["fresh3"])
        broker.finish(w2, onW2[1])
        XCTAssertEqual(broker.jobs(for: w2).map(\.requestID), [], "not idle yet")
        broker.finish(w2, third[0])
        // Only once nothing ordinary waits does a quarantined job get the idle worker, alone.
        XCTAssertEqual(broker.jobs(for: w2).map(\.requestID), ["poison1"])
        submit(&broker, bob, "fresh4")
        XCTAssertEqual(broker.jobs(for: w2).map(\.requestID), [], "it runs alone")
        let onW3 = broker.ready(w3, capacity: 2)
        XCTAssertEqual(onW3.map(\.requestID), ["fresh4"])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    func testAWorkerKeptForAQuarantinedJobThatRanElsewhereTakesOrdinaryWorkAgain() {
        // Found by the model checker: the reservation outlived the job it was for, and the
        // worker never took another job.
        var broker = harness { $0.quarantineReservationDelay = .milliseconds(500) }
        broker.ready(w1, capacity: 1)
        submit(&broker, alice, "a")
        submit(&broker, alice, "b")
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["a"])
        broker.workerUnreachable(w1)  // a is quarantined
        let onW1 = broker.ready(w1, capacity: 1)
        XCTAssertEqual(onW1.map(\.requestID), ["b"], "fresh work first")
        for _ in 0..<2 {
            broker.client(alice, .ping)
            broker.worker(w1, .heartbeat)
            broker.advance(by: .milliseconds(400))
        }
        XCTAssertTrue(broker.core.workers[0].reserved, "w1 is kept for the quarantined job")
        XCTAssertEqual(broker.ready(w2, capacity: 1).map(\.requestID), ["a"], "an idle worker takes it first")
        XCTAssertFalse(broker.core.workers[0].reserved, "the reservation went with the job")
        broker.finish(w1, onW1[0])
        submit(&broker, alice, "c")
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["c"])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    func testAQuarantinedJobReservesABusyWorkerAfterAWhile() {
        var broker = harness { $0.quarantineReservationDelay = .milliseconds(200) }
        broker.ready(w1, capacity: 2)
        broker.ready(w2, capacity: 2)
        for id in ["x", "y", "z", "q"] { submit(&broker, alice, id) }
        _ = broker.jobs(for: w1)
        let onW2 = broker.jobs(for: w2)
        broker.workerUnreachable(w1)  // x and z (or y) are quarantined; no worker is idle
        for index in 0..<8 { submit(&broker, alice, "more\(index)") }
        for _ in 0..<3 {
            broker.client(alice, .ping)
            broker.worker(w2, .heartbeat)
            broker.advance(by: .milliseconds(100))
        }
        // w2 is reserved now: finishing its jobs frees it for the quarantined job, not for
        // the ordinary queue.
        for job in onW2 { broker.finish(w2, job) }
        let next = broker.jobs(for: w2)
        XCTAssertEqual(next.count, 1)
        XCTAssertTrue(broker.core.jobs.values.contains { $0.quarantined && $0.worker == w2 })
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    // MARK: Principals

    func testRequestIDsAndCancelsAreScopedToThePrincipal() {
        var broker = harness()
        let carol = Principal("curve:carol"), mallory = Principal("curve:mallory")
        let admin = Principal("curve:admin")
        var configured = harness { $0.admins = [admin] }
        broker = configured
        submit(&broker, alice, "same", as: carol)
        submit(&broker, bob, "same", as: mallory)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted same"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted same"], "no duplicate across principals")
        // Mallory cannot cancel Carol's request, nor learn it exists.
        let mallorysOther: PeerID = "client-mallory-2"
        broker.client(mallorysOther, as: mallory, .cancel(.with { $0.requestID = "same" }))
        XCTAssertEqual(broker.events(for: mallorysOther).map(\.summary), ["cancelAck same cancelled"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["cancelled same"], "only her own")
        XCTAssertEqual(broker.events(for: alice).map(\.summary), [])
        broker.client(mallorysOther, as: mallory, .cancel(.with { $0.requestID = "same" }))
        XCTAssertEqual(broker.events(for: mallorysOther).map(\.summary), ["cancelAck same finished"])
        submit(&broker, bob, "carols-only", as: mallory)
        _ = broker.events(for: bob)
        broker.client(mallorysOther, as: mallory, .cancel(.with { $0.requestID = "nope" }))
        XCTAssertEqual(broker.events(for: mallorysOther).map(\.summary), ["cancelAck nope unknown"])
        // An admin reaches everyone's.
        let root: PeerID = "client-admin"
        broker.client(root, as: admin, .cancel(.with { $0.requestID = "same" }))
        XCTAssertEqual(broker.events(for: root).map(\.summary), ["cancelAck same cancelled"])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["cancelled same"])
        configured = broker
        XCTAssertEqual(configured.core.liveRequestCount, 1)
    }

    /// A non-admin's Status shows its own requests and counts only: no workers, no totals or
    /// cache occupancy of others (which would show another principal asking again for a
    /// cached image). Admins and the ipc owner see everything.
    func testStatusShowsANonAdminOnlyItsOwn() {
        var broker = harness { $0.admins = [Principal("curve:admin")] }
        broker.ready(w1, name: "host-a")
        let someone = Principal("curve:someone"), other = Principal("curve:other")
        let carol: PeerID = "client-carol"
        broker.client(alice, as: someone, .submit(CoreHarness.submitMessage("mine"), image: CoreHarness.jpeg))
        for id in ["theirs-1", "theirs-2", "theirs-3"] {
            broker.client(carol, as: other, .submit(CoreHarness.submitMessage(id), image: CoreHarness.jpeg))
        }
        broker.client(carol, as: other, .submit(CoreHarness.submitMessage("theirs-1"), image: CoreHarness.jpeg))
        _ = broker.events(for: alice)
        broker.client(alice, as: someone, .statusRequest)
        broker.client(bob, as: Principal("curve:admin"), .statusRequest)
        broker.client("client-ipc", .statusRequest)
        guard case .statusReply(let plain) = broker.events(for: alice).first,
              case .statusReply(let full) = broker.events(for: bob).first,
              case .statusReply(let local) = broker.events(for: "client-ipc").first
        else { return XCTFail("no status replies") }
        XCTAssertEqual(plain.workers, [], "workers are for admins")
        XCTAssertEqual(plain.totals.submitted, 1, "its own submits only")
        XCTAssertEqual(plain.totals.accepted, 1)
        XCTAssertEqual(plain.totals.duplicateIds, 0, "another principal's duplicate is not counted")
        XCTAssertEqual(plain.inFlight + plain.queueDepth, 1, "its own live request")
        XCTAssertEqual(plain.clients, 1)
        XCTAssertEqual(plain.cache, Enlarger_V1_CacheStatus(), "no cache occupancy")
        XCTAssertEqual(full.workers.map(\.name), ["host-a"])
        XCTAssertEqual(full.totals.submitted, 5)
        XCTAssertEqual(full.totals.duplicateIds, 1)
        XCTAssertEqual(full.inFlight + full.queueDepth, 4)
        XCTAssertEqual(local.workers.map(\.pid), [7], "ipc peers are the socket owner")
    }

    /// A worker is its key as well as its routing id: a connection of another key under a
    /// registered worker's routing id (a rogue that reconnected as a dropped worker) gets no
    /// say over its jobs. Its forged final reaches nobody; the job runs again elsewhere,
    /// charged to no request.
    func testAWorkerRoutingIDTakenOverByAnotherKeyCannotAnswerItsJobs() {
        var broker = harness()
        let honest = Principal("curve:worker-a"), rogue = Principal("curve:worker-b")
        broker.worker(w1, as: honest, .ready(.with { $0.capacity = 1; $0.workerName = "a"; $0.pid = 1 }))
        broker.client(alice, .submit(CoreHarness.submitMessage("photo", delivery: .final), image: CoreHarness.jpeg))
        let job = broker.jobs(for: w1)[0]
        _ = broker.events(for: alice)
        broker.worker(w1, as: rogue, .jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = .final
            $0.width = 1
            $0.height = 1
            $0.terminal = true
            $0.contentType = "image/jpeg"
        }, image: [0xBA, 0xD0]))
        XCTAssertFalse(broker.events(for: alice).contains { $0.summary.hasPrefix("result") }, "the forged final reached the client")
        XCTAssertEqual(broker.core.totals.workersLost, 1)
        // The honest key's new worker takes the job again, as its first attempt that counts.
        let w2: PeerID = "worker-2"
        broker.worker(w2, as: honest, .ready(.with { $0.capacity = 1; $0.workerName = "a2"; $0.pid = 2 }))
        let again = broker.jobs(for: w2)
        XCTAssertEqual(again.map(\.jobID), [job.jobID])
        XCTAssertEqual(broker.core.liveRequestCount, 1)
    }

    /// A Submit whose header does not decode (a file path that is not UTF-8) but whose id can
    /// be read still gets a terminal answer for that id: Rejected{MALFORMED}, not a bare Error.
    func testAnUndecodableSubmitThatNamesItsIDIsRejectedUnderThatID() throws {
        var broker = harness()
        let submit = Enlarger_V1_ClientToBroker.with {
            $0.submit = .with {
                $0.requestID = "bad-path"
                $0.spec.width = 10
                $0.source.file.path = "photo-XX.jpg"
            }
        }
        var header: [UInt8] = try submit.serializedBytes()
        let marker = Array("XX".utf8)
        let at = try XCTUnwrap((0...(header.count - 2)).first { Array(header[$0..<$0 + 2]) == marker })
        header.replaceSubrange(at..<at + 2, with: [0xFF, 0xFE])  // not UTF-8
        broker.clientFrames(alice, [ProtocolTag.client.bytes, header, []])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["rejected bad-path malformed"])
        XCTAssertEqual(broker.core.totals.submitted, 1)
        XCTAssertEqual(broker.core.totals.rejected, 1)
    }

    func testARoutingIDTakenOverByAnotherPrincipalGetsNothingOfTheOld() {
        var broker = harness()
        broker.ready(w1)
        submit(&broker, alice, "mine", as: Principal("curve:alice"))
        _ = broker.jobs(for: w1)
        _ = broker.events(for: alice)
        broker.client(alice, as: Principal("curve:eve"), .ping)
        let events = broker.events(for: alice).map(\.summary)
        XCTAssertEqual(events, ["pong"], "nothing about the old principal's requests")
        XCTAssertEqual(broker.core.liveRequestCount, 0)
    }

    // MARK: Sync

    func testSyncNamesForgottenRequestsAndMovesHeldOnesToTheAskingConnection() {
        var broker = harness()
        broker.ready(w1)
        submit(&broker, alice, "held")
        let job = broker.jobs(for: w1)[0]
        _ = broker.events(for: alice)
        // The client reconnected under a new routing id and asks about its requests.
        let again: PeerID = "client-alice-again"
        broker.client(again, .sync(.with { $0.requestIds = ["held", "gone"]; $0.nonce = 9 }))
        guard case .syncReply(let reply) = broker.events(for: again).first else { return XCTFail("no reply") }
        XCTAssertEqual(reply.unknownRequestIds, ["gone"])
        XCTAssertEqual(reply.nonce, 9)
        XCTAssertEqual(reply.brokerInstance, broker.configuration.instance)
        broker.finish(w1, job)
        XCTAssertEqual(broker.events(for: again).map(\.summary), ["result held final terminal"])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), [])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testSyncSeesOnlyItsOwnPrincipal() {
        var broker = harness()
        submit(&broker, alice, "secret", as: Principal("curve:alice"))
        broker.client(bob, as: Principal("curve:bob"), .sync(.with { $0.requestIds = ["secret"] }))
        guard case .syncReply(let reply) = broker.events(for: bob).first else { return XCTFail("no reply") }
        XCTAssertEqual(reply.unknownRequestIds, ["secret"])
        XCTAssertEqual(broker.core.requests.values.first?.client, alice, "not moved across principals")
    }
}
