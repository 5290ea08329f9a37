import EnlargerProtocol
import EnlargerWorker
import Imaging
import Foundation
import Logging
import XCTest
import TestSupport

/// The worker against a fake broker (a raw ROUTER socket) over ipc.
final class WorkerServiceTests: XCTestCase {
    private var endpoints: TemporaryEndpoints!

    override func setUpWithError() throws {
        endpoints = try TemporaryEndpoints(self)
    }

    /// A broker bound to a fresh endpoint and a worker connected to it, stopped at teardown.
    private func brokerAndWorker(
        concurrency: Int = 2, heartbeat: Duration = .seconds(1), name: String = "test-worker"
    ) throws -> (FakeBroker, WorkerService.Handle) {
        let endpoint = endpoints.ipc("workers")
        let broker = try FakeBroker(endpoint: endpoint)
        var logger = Logger(label: "test.worker")
        logger.logLevel = .warning
        let service = try WorkerService(configuration: WorkerConfiguration(
            brokerEndpoint: endpoint, concurrency: concurrency, heartbeatInterval: heartbeat, name: name,
            logger: logger))
        let handle = service.start()
        addTeardownBlock { try handle.stop() }
        return (broker, handle)
    }

    // MARK: Registration

    func testAnnouncesItselfWithReadyCarryingItsCapacity() throws {
        let (broker, _) = try brokerAndWorker(concurrency: 3, name: "worker-a")
        let (_, ready) = try broker.expectReady()
        XCTAssertEqual(ready.capacity, 3)
        XCTAssertEqual(ready.workerName, "worker-a")
        XCTAssertEqual(ready.pid, UInt32(ProcessInfo.processInfo.processIdentifier))
    }

    func testSendsHeartbeatsEveryInterval() throws {
        let (broker, _) = try brokerAndWorker(heartbeat: .milliseconds(50))
        _ = try broker.expectReady()
        var heartbeats = 0
        let deadline = ContinuousClock.now + .milliseconds(500)
        while case let remaining = deadline - .now, remaining > .zero, let received = try broker.receive(timeout: remaining) {
            if case .heartbeat = received.message { heartbeats += 1 }
        }
        XCTAssert((6...11).contains(heartbeats), "\(heartbeats) heartbeats in 500 ms at 50 ms intervals")
    }

    // MARK: Jobs

    /// Runs one job and returns every frame about it, up to and including the terminal one.
    private func run(_ message: BrokerToWorkerMessage<[UInt8]>, broker: FakeBroker,
                     peer: [UInt8], file: StaticString = #filePath, line: UInt = #line) throws -> [WorkerToBrokerMessage<[UInt8]>] {
        guard case .job(let job, _) = message else { preconditionFailure("not a job") }
        try broker.send(message, to: peer)
        var frames: [WorkerToBrokerMessage<[UInt8]>] = []
        let deadline = ContinuousClock.now + .seconds(30)
        while frames.last?.isTerminal != true {
            frames.append(try broker.expect("a frame about job \(job.jobID)", timeout: deadline - .now,
                                            file: file, line: line) { received in
                received.message.jobID == job.jobID ? received.message : nil
            })
        }
        // Nothing follows the terminal frame.
        XCTAssertEqual(try broker.collect(for: .milliseconds(100)).map(\.message.jobID), [], file: file, line: line)
        return frames
    }

    func testProgressiveJobSendsStartedThenDegradedThenTerminalFinal() throws {
        let (broker, _) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        for (id, file) in [(1, "sharp_2569067123_aca715a2ee_o.jpg"), (2, "bimg_test_exif_full.jpg")] as [(UInt64, String)] {
            let frames = try run(job(id, width: 320, height: 320, image: try Corpus.good(file)), broker: broker, peer: peer)
            guard frames.count == 3,
                  case .jobStarted(let started) = frames[0],
                  case .jobResult(let degraded, let preview) = frames[1],
                  case .jobResult(let final, let image) = frames[2]
            else { return XCTFail("\(file): expected started, degraded, final; got \(frames)") }
            XCTAssertEqual(started.jobID, id)
            XCTAssertEqual(started.attempt, 1)
            XCTAssertEqual(degraded.stage, .degraded)
            XCTAssertFalse(degraded.terminal)
            XCTAssertEqual(final.stage, .final)
            XCTAssertTrue(final.terminal)
            XCTAssertEqual(final.format, .jpeg)
            XCTAssertEqual(max(final.width, final.height), 320, file)
            XCTAssertEqual(Array(image.prefix(2)), [0xFF, 0xD8], "\(file): the final payload is a JPEG")
            XCTAssertEqual(Array(preview.prefix(2)), [0xFF, 0xD8], "\(file): the degraded payload is a JPEG")
        }
    }

    func testFinalAndDegradedDeliveriesSendOneTerminalResult() throws {
        let (broker, _) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        for (id, delivery, stage) in [(1, .final, .final), (2, .degraded, .degraded)]
            as [(UInt64, Enlarger_V1_Delivery, Enlarger_V1_Stage)] {
            let frames = try run(job(id, delivery: delivery, image: photo), broker: broker, peer: peer)
            guard frames.count == 2, case .jobStarted = frames[0], case .jobResult(let result, _) = frames[1] else {
                return XCTFail("\(delivery): expected started and one result, got \(frames)")
            }
            XCTAssertEqual(result.stage, stage)
            XCTAssertTrue(result.terminal)
            // A degraded result from the decoded buffer is made at half the final size.
            XCTAssertEqual(result.width, stage == .final ? 320 : 160)
        }
    }

    func testBadInputsFailWithTheDecodersCode() throws {
        let (broker, _) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        let cases: [(String, [UInt8], Enlarger_V1_ErrorCode)] = [
            ("thumbor_image_invalid.jpg", try Corpus.bad("thumbor_image_invalid.jpg"), .notJpeg),
            ("sharp_truncated.jpg", try Corpus.bad("sharp_truncated.jpg"), .truncated),
            ("sharp_giant-image.jpg", try Corpus.bad("sharp_giant-image.jpg"), .tooLarge),
            ("bimg_corrupt.jpg", try Corpus.bad("bimg_corrupt.jpg"), .corrupt),
            ("an empty payload", [], .empty),
        ]
        for (index, (name, bytes, code)) in cases.enumerated() {
            let frames = try run(job(UInt64(index + 1), image: bytes), broker: broker, peer: peer)
            guard case .jobFailed(let failed) = frames.last else { return XCTFail("\(name): \(frames)") }
            XCTAssertEqual(failed.code, code, name)
            XCTAssertFalse(failed.message.isEmpty, name)
            XCTAssertFalse(frames.contains { if case .jobResult = $0 { true } else { false } }, name)
        }
    }

    func testTheImageIsCheckedAgainstItsDigestBeforeAnythingIsMadeOfIt() throws {
        let (broker, _) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        func withDigest(_ id: UInt64, _ digest: Data) -> BrokerToWorkerMessage<[UInt8]> {
            guard case .job(var message, let image) = job(id, width: 64, delivery: .final, image: photo) else {
                preconditionFailure("not a job")
            }
            message.source.inline.sha256 = digest
            return .job(message, image: image)
        }

        let right = try run(withDigest(1, try XCTUnwrap(Digest.sha256(photo))), broker: broker, peer: peer)
        guard case .jobResult(let result, _) = right.last else { return XCTFail("\(right)") }
        XCTAssertTrue(result.digestVerified, "a result checked against its digest says so")

        var wrong = Array(try XCTUnwrap(Digest.sha256(photo)))
        wrong[0] ^= 1
        let refused = try run(withDigest(2, Data(wrong)), broker: broker, peer: peer)
        guard case .jobFailed(let failed) = refused.last else { return XCTFail("\(refused)") }
        XCTAssertEqual(failed.code, .digestMismatch)
        XCTAssertFalse(refused.contains { if case .jobResult = $0 { true } else { false } })

        let short = try run(withDigest(3, Data(repeating: 0, count: 31)), broker: broker, peer: peer)
        guard case .jobFailed(let invalid) = short.last else { return XCTFail("\(short)") }
        XCTAssertEqual(invalid.code, .invalidArgument)

        let unnamed = try run(job(4, width: 64, delivery: .final, image: photo), broker: broker, peer: peer)
        guard case .jobResult(let plain, _) = unnamed.last else { return XCTFail("\(unnamed)") }
        XCTAssertFalse(plain.digestVerified, "nothing was checked")
    }

    func testSpecTheImagingPipelineCannotHonourFailsWithInvalidArgument() throws {
        let (broker, _) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        // Within the wire's 65535 but beyond what the pipeline produces.
        let frames = try run(job(1, width: 60_000, image: photo), broker: broker, peer: peer)
        guard case .jobFailed(let failed) = frames.last else { return XCTFail("\(frames)") }
        XCTAssertEqual(failed.code, .invalidArgument)
    }

    // MARK: Cancel

    /// Cancels a 99.6 MP job at several moments (in the decode, the resampler and the encoder)
    /// and measures how long the JobCancelled takes to reach the broker. The output is an
    /// 87 MP PNG, so that the job lasts well past the last cancel however fast the build is
    /// (as a JPEG it ended in about a second once the test build resized at full speed).
    func testCancelMidJobStopsItWithJobCancelledAndNoResult() throws {
        let (broker, _) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        let huge = try Corpus.good("thumbor_9643x10328.jpg")
        var latencies: [Duration] = []
        for (id, delay) in [(1, 50), (2, 200), (3, 400), (4, 800), (5, 1200)] as [(UInt64, Int)] {
            try broker.send(job(id, width: 9000, delivery: .final, format: .png, image: huge), to: peer)
            _ = try broker.expect("JobStarted") { if case .jobStarted = $0.message { true } else { nil } }
            Thread.sleep(forTimeInterval: Double(delay) / 1000)

            let cancelledAt = ContinuousClock.now
            try broker.send(cancelJob(id), to: peer)
            let acknowledged = try broker.expect("JobCancelled", timeout: .seconds(10)) { received -> ContinuousClock.Instant? in
                if case .jobCancelled(let cancelled) = received.message, cancelled.jobID == id { return received.at }
                return nil
            }
            latencies.append(acknowledged - cancelledAt)
            XCTAssertEqual(try broker.collect(for: .milliseconds(100)).map(\.message.jobID), [],
                           "nothing follows JobCancelled")
        }
        let milliseconds = latencies.map { String(format: "%.1f", Double($0.components.attoseconds) / 1e15
                                                  + Double($0.components.seconds) * 1e3) }
        print("cancel → JobCancelled latency on a 99.6 MP job, cancelled 50/200/400/800/1200 ms in: "
              + milliseconds.joined(separator: ", ") + " ms")
        // Generous for debug builds on a loaded machine; a job that ignored the cancel would take seconds.
        XCTAssertLessThan(latencies.max()!, .seconds(1))
        // The worker still serves: a later job runs normally.
        let frames = try run(job(9, delivery: .final, image: try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")),
                             broker: broker, peer: peer)
        XCTAssertTrue(frames.last?.isTerminal == true)
    }

    func testCancelForAnUnknownOrFinishedJobIsIgnored() throws {
        let (broker, _) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        let photo = try Corpus.good("jpegdecoder_rgb.jpg")
        _ = try run(job(1, delivery: .final, image: photo), broker: broker, peer: peer)
        try broker.send(cancelJob(1), to: peer)
        try broker.send(cancelJob(99), to: peer)
        XCTAssertEqual(try broker.collect(for: .milliseconds(200)).map(\.message.jobID), [])
    }

    /// Cancels land at random moments of small jobs, several at once: each job must end with
    /// exactly one terminal frame and nothing after it, and a job cancelled before its
    /// terminal result went out must end with JobCancelled.
    func testEveryJobEndsWithExactlyOneTerminalFrameWhateverTheCancelTiming() throws {
        let seed = UInt64.random(in: 0...UInt64(UInt32.max))
        print("cancel race seed: \(seed)")
        var random = SeededGenerator(seed: seed)
        let (broker, _) = try brokerAndWorker(concurrency: 2)
        let (peer, _) = try broker.expectReady()
        let photo = try Corpus.good("exifsamples_DSCN0010.jpg")
        let jobs: UInt64 = 40
        for id in 1...jobs {
            try broker.send(job(id, width: 200, image: photo), to: peer)
            if random.next() % 4 != 0 {
                Thread.sleep(forTimeInterval: Double(random.next() % 30) / 1000)
                try broker.send(cancelJob(id), to: peer)
            }
        }
        var terminals: [UInt64: Int] = [:]
        var cancelledJobs = 0
        var afterTerminal: [UInt64] = []
        let deadline = ContinuousClock.now + .seconds(30)
        while terminals.count < Int(jobs), case let remaining = deadline - .now, remaining > .zero,
              let received = try broker.receive(timeout: remaining) {
            guard let id = received.message.jobID else { continue }
            if terminals[id] != nil { afterTerminal.append(id) }
            if received.message.isTerminal { terminals[id, default: 0] += 1 }
            if case .jobCancelled = received.message { cancelledJobs += 1 }
        }
        print("\(cancelledJobs) of \(jobs) jobs ended with JobCancelled, the rest with their final result")
        afterTerminal += try broker.collect(for: .milliseconds(200)).compactMap(\.message.jobID)
        XCTAssertEqual(terminals.count, Int(jobs), "every job ended (seed \(seed))")
        XCTAssertEqual(terminals.values.filter { $0 != 1 }.count, 0, "one terminal frame each (seed \(seed))")
        XCTAssertEqual(afterTerminal, [], "nothing after a terminal frame (seed \(seed))")
    }

    // MARK: Liveness

    func testBrokerSilenceAbandonsJobsAndRegistersAgainOnANewConnection() throws {
        let (broker, _) = try brokerAndWorker(heartbeat: .milliseconds(100))
        broker.answersHeartbeats = false
        let (firstPeer, _) = try broker.expectReady()
        try broker.send(job(1, width: 9000, delivery: .final, image: try Corpus.good("thumbor_9643x10328.jpg")),
                        to: firstPeer)
        // The fake broker says nothing more: after 3 intervals the worker gives up on it.
        var aboutTheJob: [WorkerToBrokerMessage<[UInt8]>] = []
        var second: (peer: [UInt8], ready: Enlarger_V1_Ready)?
        let deadline = ContinuousClock.now + .seconds(2)
        while second == nil, case let remaining = deadline - .now, remaining > .zero,
              let received = try broker.receive(timeout: remaining) {
            switch received.message {
            case .ready(let ready): second = (received.peer, ready)
            case .heartbeat: continue
            default: aboutTheJob.append(received.message)
            }
        }
        let (secondPeer, ready) = try XCTUnwrap(second, "a second Ready within 2 s")
        XCTAssertNotEqual(secondPeer, firstPeer, "a new connection")
        XCTAssertEqual(ready.capacity, 2)
        XCTAssertEqual(aboutTheJob.map(\.jobID), [1], "only JobStarted before the worker gave up")
        XCTAssertEqual(try broker.collect(for: .milliseconds(250)).compactMap(\.message.jobID), [],
                       "nothing about the abandoned job afterwards")
    }

    func testBrokerDisconnectMakesTheWorkerRegisterAgainAfterAnInterval() throws {
        let (broker, _) = try brokerAndWorker(heartbeat: .milliseconds(200))
        let (firstPeer, _) = try broker.expectReady()
        let sentAt = ContinuousClock.now
        try broker.send(.disconnect, to: firstPeer)
        let (secondPeer, _) = try broker.expectReady(timeout: .seconds(2))
        XCTAssertNotEqual(secondPeer, firstPeer)
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - sentAt, .milliseconds(200))
    }

    // MARK: Stopping

    func testGracefulStopSendsDisconnectAndNothingAboutRunningJobs() throws {
        let (broker, handle) = try brokerAndWorker()
        let (peer, _) = try broker.expectReady()
        try broker.send(job(1, width: 9000, delivery: .final, image: try Corpus.good("thumbor_9643x10328.jpg")),
                        to: peer)
        _ = try broker.expect("JobStarted") { if case .jobStarted = $0.message { true } else { nil } }
        let stoppedAt = ContinuousClock.now
        try handle.stop()
        print("graceful stop with a running 99.6 MP job took \(ContinuousClock.now - stoppedAt)")
        let rest = try broker.collect(for: .milliseconds(200)).map(\.message)
        guard rest.count == 1, case .disconnect = rest[0] else { return XCTFail("expected Disconnect only, got \(rest)") }
    }
}
