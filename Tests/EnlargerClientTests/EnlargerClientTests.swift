import EnlargerProtocol
import ImageModel
import XCTest
import ZeroMQ

@testable import Enlarger
import TestSupport

/// The client library against a fake broker (a raw ROUTER socket) over ipc.
final class EnlargerClientTests: XCTestCase {
    private let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3, 0xFF, 0xD9]
    private let box = ResizeOptions(width: 320)
    private var endpoints: TemporaryEndpoints!

    override func setUpWithError() throws {
        endpoints = try TemporaryEndpoints(self)
    }

    /// A fake broker on a fresh endpoint and a client connected to it; both stopped at teardown.
    private func brokerAndClient(
        heartbeat: Duration = .seconds(1), script: @escaping FakeClientBroker.Script = { _ in [] }
    ) throws -> (FakeClientBroker, EnlargerClient) {
        let endpoint = endpoints.ipc("clients")
        let broker = try FakeClientBroker(endpoint: endpoint, script: script)
        let client = try EnlargerClient(
            brokerEndpoint: endpoint, configuration: .init(heartbeatInterval: heartbeat))
        addTeardownBlock {
            await client.close()
            broker.stop()
        }
        return (broker, client)
    }

    private func collect(_ events: RequestEvents) async -> (events: [RequestEvent], error: EnlargerClientError?) {
        var collected: [RequestEvent] = []
        do {
            for try await event in events { collected.append(event) }
            return (collected, nil)
        } catch {
            return (collected, error)
        }
    }

    // MARK: Events

    func testSubmitStreamsEveryEventInOrderAndFinishesAfterTheTerminalOne() async throws {
        let (broker, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            let id = submit.requestID
            return [.accepted(id), .started(id), .result(id, .degraded, terminal: false, width: 16, height: 12, image: [1]),
                    .result(id, .final, terminal: true, width: 320, height: 240, image: [2, 3])]
        }
        let options = ResizeOptions(width: 320, height: 240, fit: .cover, quality: 90, chroma444: true)
        let (events, error) = await collect(client.submit(ResizeRequest(id: "r-1", image: jpeg, options: options)))
        XCTAssertNil(error)
        XCTAssertEqual(events, [
            .accepted, .started(attempt: 1),
            .degraded(EncodedImage(bytes: [1], width: 16, height: 12, format: .jpeg)),
            .final(EncodedImage(bytes: [2, 3], width: 320, height: 240, format: .jpeg)),
        ])
        guard case .submit(let submit, let image) = broker.requests.first else { return XCTFail("no Submit") }
        XCTAssertEqual(submit.requestID, "r-1")
        XCTAssertEqual(image, jpeg)
        XCTAssertEqual(submit.delivery, .progressive)
        XCTAssertEqual(submit.spec.width, 320)
        XCTAssertEqual(submit.spec.height, 240)
        XCTAssertEqual(submit.spec.fit, .cover)
        XCTAssertEqual(submit.spec.quality, 90)
        XCTAssertEqual(submit.spec.chroma, .yuv444)
    }

    func testResizeReturnsTheFinalImageOfAFinalOnlyRequest() async throws {
        let (broker, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            return [.accepted(submit.requestID), .result(submit.requestID, .final, terminal: true, image: [9])]
        }
        let image = try await client.resize(jpeg, options: box)
        XCTAssertEqual(image.bytes, [9])
        guard case .submit(let submit, _) = broker.requests.first else { return XCTFail("no Submit") }
        XCTAssertEqual(submit.delivery, .final)
    }

    /// A broker that neither caches nor shares says so in its Accepted: the Submits built
    /// after it carry no digest (no hashing for nothing), until an Accepted says otherwise.
    func testInlineDigestsFollowWhatTheLatestAcceptedSays() async throws {
        let (broker, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            var accepted = Enlarger_V1_Accepted()
            accepted.requestID = submit.requestID
            accepted.digestsUnused = submit.requestID.hasPrefix("unused")
            return [.accepted(accepted), .result(submit.requestID, .final, terminal: true)]
        }
        let digest = Array(Digest.sha256(jpeg)!)
        var sent: [(id: String, digest: [UInt8])] = []
        for id in ["first", "unused-1", "unused-2", "used", "after", "opted-out"] {
            var request = ResizeRequest(id: id, image: jpeg, options: box, delivery: .final)
            request.sharesResults = id != "opted-out"
            let (_, error) = await collect(client.submit(request))
            XCTAssertNil(error, id)
            guard case .submit(let submit, _) = broker.requests.last else { return XCTFail("no Submit for \(id)") }
            sent.append((submit.requestID, Array(submit.source.inline.sha256)))
        }
        XCTAssertEqual(sent.map(\.id), ["first", "unused-1", "unused-2", "used", "after", "opted-out"])
        // Hashed until the first Accepted that says digests are unused; not while they are;
        // hashed again once an Accepted says they are used; never when the request opts out.
        XCTAssertEqual(sent.map(\.digest), [digest, digest, [], [], digest, []])
    }

    func testFailedEndsTheSequenceWithATypedErrorAfterTheEarlierEvents() async throws {
        let (_, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            return [.accepted(submit.requestID), .failed(submit.requestID, .corrupt, "bad Huffman code")]
        }
        let (events, error) = await collect(client.submit(ResizeRequest(image: jpeg, options: box)))
        XCTAssertEqual(events, [.accepted])
        XCTAssertEqual(error, .failed(.corrupt, "bad Huffman code"))
    }

    func testRejectedThrowsATypedError() async throws {
        let (_, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            return [.rejected(submit.requestID, .overloaded, "queue full")]
        }
        let (events, error) = await collect(client.submit(ResizeRequest(image: jpeg, options: box)))
        XCTAssertEqual(events, [])
        XCTAssertEqual(error, .rejected(.overloaded, "queue full"))
    }

    func testDuplicateIDsAreRefusedLocallyAndByTheBroker() async throws {
        let (broker, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            if submit.requestID == "taken" { return [.failed("taken", .duplicateID, "request id taken is live")] }
            return [.accepted(submit.requestID)]
        }
        var first = client.submit(ResizeRequest(id: "dup", image: jpeg, options: box)).makeAsyncIterator()
        let accepted = try await first.next()
        XCTAssertEqual(accepted, .accepted)

        let (_, local) = await collect(client.submit(ResizeRequest(id: "dup", image: jpeg, options: box)))
        XCTAssertEqual(local, .duplicateID("request id dup is live in this client"))
        let (_, remote) = await collect(client.submit(ResizeRequest(id: "taken", image: jpeg, options: box)))
        XCTAssertEqual(remote, .duplicateID("request id taken is live"))
        XCTAssertEqual(broker.requests.compactMap(\.requestID), ["dup", "taken"], "the local duplicate was not sent")
    }

    func testInvalidRequestsFailWithoutReachingTheBroker() async throws {
        let (broker, client) = try brokerAndClient()
        let (_, emptyID) = await collect(client.submit(ResizeRequest(id: "", image: jpeg, options: box)))
        guard case .invalidRequestID = emptyID else { return XCTFail("\(String(describing: emptyID))") }
        let (_, longID) = await collect(client.submit(ResizeRequest(id: String(repeating: "x", count: 65), image: jpeg, options: box)))
        guard case .invalidRequestID = longID else { return XCTFail("\(String(describing: longID))") }
        let (_, noBox) = await collect(client.submit(ResizeRequest(image: jpeg, options: ResizeOptions())))
        guard case .rejected(.invalidArgument, _) = noBox else { return XCTFail("\(String(describing: noBox))") }
        try await Task.sleep(for: .milliseconds(50))
        XCTAssertEqual(broker.requests.count, 0)
    }

    func testStatusAndCancelAnswersComeFromTheBroker() async throws {
        let (_, client) = try brokerAndClient { message in
            switch message {
            case .statusRequest:
                var reply = Enlarger_V1_StatusReply()
                var worker = Enlarger_V1_WorkerStatus()
                worker.name = "w1"
                worker.capacity = 4
                worker.lastSeenMsAgo = 250
                reply.workers = [worker]
                reply.queueDepth = 3
                reply.queueLimit = 1024
                reply.uptimeMs = 5000
                reply.totals.submitted = 7
                return [.statusReply(reply)]
            case .cancel(let cancel):
                return [.cancelAck(cancel.requestID, .unknown)]
            case .submit, .ping, .sync:
                return []
            }
        }
        let status = try await client.status()
        XCTAssertEqual(status.workers.map(\.name), ["w1"])
        XCTAssertEqual(status.workers.first?.capacity, 4)
        XCTAssertEqual(status.workers.first?.lastSeen, .milliseconds(250))
        XCTAssertEqual(status.queueDepth, 3)
        XCTAssertEqual(status.queueLimit, 1024)
        XCTAssertEqual(status.uptime, .seconds(5))
        XCTAssertEqual(status.totals.submitted, 7)
        let outcome = try await client.cancel("nobody")
        XCTAssertEqual(outcome, .unknown)
    }

    // MARK: Strict cancel

    /// The broker's last events (the terminal one included) reach the client before the
    /// consumer cancels; the consumer must not see any of them.
    func testCancelDropsEventsAlreadyReceivedAndQueued() async throws {
        let (broker, client) = try brokerAndClient { message in
            switch message {
            case .submit(let submit, _): [.accepted(submit.requestID)]
            case .cancel(let cancel): [.cancelAck(cancel.requestID, .finished)]
            case .statusRequest, .ping, .sync: []
            }
        }
        let events = client.submit(ResizeRequest(id: "queued", image: jpeg, options: box))
        var iterator = events.makeAsyncIterator()
        let first = try await iterator.next()
        XCTAssertEqual(first, .accepted)

        broker.send([.started("queued"), .result("queued", .degraded, terminal: false),
                     .result("queued", .final, terminal: true)])
        try await waitUntil("three events queued") { events.channel.bufferedCount == 3 }

        let outcome = try await client.cancel("queued")
        XCTAssertEqual(outcome, .finished)
        let afterCancel = try await iterator.next()
        XCTAssertNil(afterCancel, "nothing is delivered after cancel, not even queued events")
        let again = try await iterator.next()
        XCTAssertNil(again)
    }

    /// After a cancel the broker's Cancelled, and any late result, are dropped; the id can be
    /// used again at once.
    func testCancelledRequestEndsSilentlyAndItsIDCanBeReused() async throws {
        let (broker, client) = try brokerAndClient { message in
            switch message {
            case .submit(let submit, _): [.accepted(submit.requestID)]
            case .cancel(let cancel):
                [.cancelled(cancel.requestID), .result(cancel.requestID, .final, terminal: true),
                 .cancelAck(cancel.requestID, .cancelled)]
            case .statusRequest, .ping, .sync: []
            }
        }
        let events = client.submit(ResizeRequest(id: "again", image: jpeg, options: box))
        var iterator = events.makeAsyncIterator()
        let accepted = try await iterator.next()
        XCTAssertEqual(accepted, .accepted)
        broker.send([.started("again"), .result("again", .degraded, terminal: false)])
        try await waitUntil("two events queued") { events.channel.bufferedCount == 2 }

        let outcome = try await client.cancel("again")
        XCTAssertEqual(outcome, .cancelled)
        let afterCancel = try await iterator.next()
        XCTAssertNil(afterCancel)

        var second = client.submit(ResizeRequest(id: "again", image: jpeg, options: box)).makeAsyncIterator()
        let reused = try await second.next()
        XCTAssertEqual(reused, .accepted, "the late result of the cancelled request did not leak into this one")
    }

    /// The broker streams events without pause while the consumer cancels after a random
    /// number of them: once `cancel` has returned, `next()` yields nothing.
    func testNothingIsDeliveredAfterCancelWhileEventsKeepArriving() async throws {
        let seed = UInt64.random(in: 0...UInt64(UInt32.max))
        print("strict cancel race seed: \(seed)")
        var random = SeededGenerator(seed: seed)
        let (broker, client) = try brokerAndClient { message in
            switch message {
            case .submit(let submit, _):
                [.accepted(submit.requestID)] + (1...200).map { .started(submit.requestID, attempt: $0) }
            case .cancel(let cancel): [.cancelled(cancel.requestID), .cancelAck(cancel.requestID, .cancelled)]
            case .statusRequest, .ping, .sync: []
            }
        }
        for round in 0..<30 {
            let id = "race-\(round)"
            var iterator = client.submit(ResizeRequest(id: id, image: jpeg, options: box)).makeAsyncIterator()
            let before = Int(random.next() % 20)
            for _ in 0..<before { _ = try await iterator.next() }
            _ = try await client.cancel(id)
            let afterCancel = try await iterator.next()
            XCTAssertNil(afterCancel, "round \(round) after \(before) events (seed \(seed))")
        }
        XCTAssertEqual(broker.requests.filter(\.isCancel).count, 30)
    }

    func testCancellingTheConsumingTaskSendsCancelAndEndsTheSequence() async throws {
        let (broker, client) = try brokerAndClient { message in
            switch message {
            case .submit(let submit, _): [.accepted(submit.requestID)]
            case .cancel(let cancel): [.cancelled(cancel.requestID), .cancelAck(cancel.requestID, .cancelled)]
            case .statusRequest, .ping, .sync: []
            }
        }
        let events = client.submit(ResizeRequest(id: "task", image: jpeg, options: box))
        let consumer = Task {
            var seen: [RequestEvent] = []
            for try await event in events { seen.append(event) }
            return seen
        }
        try await waitUntil("the Submit") { !broker.requests.isEmpty }
        try await Task.sleep(for: .milliseconds(50))
        consumer.cancel()
        let seen = try await consumer.value
        XCTAssertLessThanOrEqual(seen.count, 1, "at most the Accepted that came before the cancel")
        try await waitUntil("a Cancel frame") { broker.requests.contains { $0.isCancel && $0.requestID == "task" } }
    }

    /// A cancel after the client closed still marks the request: what was queued for it is
    /// not delivered, nor the close's failure.
    func testACancelAfterCloseStillDropsWhatWasQueued() async throws {
        let (broker, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            return [.accepted(submit.requestID)]
        }
        let events = client.submit(ResizeRequest(id: "late", image: jpeg, options: box))
        var iterator = events.makeAsyncIterator()
        let accepted = try await iterator.next()
        XCTAssertEqual(accepted, .accepted)
        broker.send([.started("late"), .result("late", .degraded, terminal: false)])
        try await waitUntil("two events queued") { events.channel.bufferedCount == 2 }
        await client.close()
        try client.cancelNow("late")
        let afterCancel = try await iterator.next()
        XCTAssertNil(afterCancel, "nothing is delivered after cancel, even once the client has closed")
    }

    /// The task consuming a request refused as a duplicate is cancelled: the live request
    /// with that id is not this consumer's, and goes on (no Cancel reaches the broker).
    func testCancellingTheConsumerOfADuplicateLeavesTheLiveRequestAlone() async throws {
        let (broker, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            return [.accepted(submit.requestID)]
        }
        var live = client.submit(ResizeRequest(id: "x", image: jpeg, options: box)).makeAsyncIterator()
        let accepted = try await live.next()
        XCTAssertEqual(accepted, .accepted)
        let duplicate = client.submit(ResizeRequest(id: "x", image: jpeg, options: box))
        let consumer = Task {
            while !Task.isCancelled { await Task.yield() }
            var seen: [RequestEvent] = []
            do { for try await event in duplicate { seen.append(event) } } catch {}
            return seen
        }
        consumer.cancel()
        _ = await consumer.value
        broker.send([.result("x", .final, terminal: true)])
        let final = try await live.next()
        guard case .final? = final else {
            return XCTFail("the live request was cancelled by another's consumer: \(String(describing: final))")
        }
        XCTAssertFalse(broker.requests.contains { $0.isCancel }, "a Cancel went to the broker")
    }

    // MARK: Keys

    /// Fail closed: a tcp endpoint without CURVE keys is refused at once, with what to do,
    /// unless insecure tcp is asked for outright; ipc needs no keys.
    func testTCPWithoutKeysIsRefusedUnlessInsecureIsAskedFor() async throws {
        let endpoint = "tcp://127.0.0.1:9"
        do {
            _ = try EnlargerClient(brokerEndpoint: endpoint)
            XCTFail("a tcp client without keys was made")
        } catch {
            guard case .insecureEndpoint(let message) = error else { return XCTFail("\(error)") }
            XCTAssert(message.contains(endpoint) && message.contains("curve") && message.contains("allowInsecureTCP"), message)
        }
        var insecure = EnlargerClient.Configuration()
        insecure.allowInsecureTCP = true
        try await EnlargerClient(brokerEndpoint: endpoint, configuration: insecure).close()
        var keyed = EnlargerClient.Configuration()
        keyed.curve = CurveClientCredentials(keyPair: try CurveKeyPair.generate(), serverKey: try CurveKeyPair.generate().publicKey)
        try await EnlargerClient(brokerEndpoint: endpoint, configuration: keyed).close()
        try await EnlargerClient(brokerEndpoint: endpoints.ipc("no-keys-needed")).close()
        // The convenience function refuses alike.
        do {
            _ = try await withEnlargerClient(brokerEndpoint: endpoint) { _ in }
            XCTFail("withEnlargerClient made a tcp client without keys")
        } catch let error as EnlargerClientError {
            guard case .insecureEndpoint = error else { return XCTFail("\(error)") }
        }
    }

    /// Every code the broker may send is shown by its contract name (`WORKER_LOST`), as the
    /// logs, the metrics and the Python client show it.
    func testCodesAreNamedAsInTheContract() {
        for code in Enlarger_V1_ErrorCode.allCases where code != .unspecified {
            XCTAssertEqual(EnlargerClientError.Code(code).contractName, code.contractName)
        }
        XCTAssertEqual(EnlargerClientError.Code.workerLost.contractName, "WORKER_LOST")
    }

    // MARK: Liveness

    func testUnreachableBrokerFailsRequestsAndCallsInBoundedTime() async throws {
        let client = try EnlargerClient(brokerEndpoint: endpoints.ipc("nobody"),
                                        configuration: .init(heartbeatInterval: .milliseconds(100)))
        let started = ContinuousClock.now
        let (_, error) = await collect(client.submit(ResizeRequest(image: jpeg, options: box)))
        let elapsed = ContinuousClock.now - started
        XCTAssertEqual(error, .brokerUnreachable)
        XCTAssertLessThan(elapsed, .seconds(1), "3 heartbeat intervals of 100 ms, and some slack")
        do {
            _ = try await client.status()
            XCTFail("status answered by nobody")
        } catch {
            XCTAssertEqual(error, .brokerUnreachable)
        }
        await client.close()
    }

    func testBrokerFallingSilentMidRequestFailsItWithBrokerLost() async throws {
        let (broker, client) = try brokerAndClient(heartbeat: .milliseconds(100)) { message in
            guard case .submit(let submit, _) = message else { return [] }
            return [.accepted(submit.requestID)]
        }
        var iterator = client.submit(ResizeRequest(image: jpeg, options: box)).makeAsyncIterator()
        let accepted = try await iterator.next()
        XCTAssertEqual(accepted, .accepted)
        // Alive while it answers pings.
        try await Task.sleep(for: .milliseconds(500))
        XCTAssertGreaterThanOrEqual(broker.received.count - broker.requests.count, 3, "pings while busy")

        broker.answersPings = false
        let silentFrom = ContinuousClock.now
        do {
            _ = try await iterator.next()
            XCTFail("the request outlived its broker")
        } catch {
            XCTAssertEqual(error, .brokerLost)
        }
        let elapsed = ContinuousClock.now - silentFrom
        XCTAssertLessThan(elapsed, .seconds(1))
        print("broker silence detected after \(elapsed)")
    }

    // MARK: Lifetime

    func testCloseFailsOutstandingRequestsAndLaterCalls() async throws {
        let (_, client) = try brokerAndClient { message in
            guard case .submit(let submit, _) = message else { return [] }
            return [.accepted(submit.requestID)]
        }
        var iterator = client.submit(ResizeRequest(image: jpeg, options: box)).makeAsyncIterator()
        let accepted = try await iterator.next()
        XCTAssertEqual(accepted, .accepted)
        await client.close()
        do {
            _ = try await iterator.next()
            XCTFail("the request outlived its client")
        } catch {
            XCTAssertEqual(error, .closed)
        }
        let (_, afterClose) = await collect(client.submit(ResizeRequest(image: jpeg, options: box)))
        XCTAssertEqual(afterClose, .closed)
        do {
            _ = try await client.cancel("any")
            XCTFail("cancel after close")
        } catch {
            XCTAssertEqual(error, .closed)
        }
        await client.close()
    }
}
