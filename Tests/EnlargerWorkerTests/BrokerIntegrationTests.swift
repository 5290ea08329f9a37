import EnlargerBroker
import EnlargerProtocol
import EnlargerWorker
import Logging
import XCTest
import ZeroMQ
import TestSupport

/// The worker behind the real `BrokerService`, driven by a raw client DEALER socket.
final class BrokerIntegrationTests: XCTestCase {
    private var client: Socket!
    private var clientContext: Context!

    private func start() throws {
        let endpoints = try TemporaryEndpoints(self)
        var logger = Logger(label: "test")
        logger.logLevel = .warning
        let broker = try BrokerService(
            configuration: .init(clientsEndpoint: endpoints.ipc("clients"), workersEndpoint: endpoints.ipc("workers")),
            logger: logger)
        let brokerThread = broker.startInBackground()
        addTeardownBlock { try brokerThread.stopAndWait() }
        let worker = try WorkerService(configuration: WorkerConfiguration(
            brokerEndpoint: broker.workersEndpoint, concurrency: 2, name: "integration", logger: logger)).start()
        addTeardownBlock { try worker.stop() }

        clientContext = try Context()
        client = try Socket(clientContext, .dealer)
        try client.connect(broker.clientsEndpoint)
    }

    private func send(_ message: ClientToBrokerMessage<[UInt8]>) throws {
        let frames = message.encoded().frames
        for (index, frame) in frames.enumerated() {
            try client.send(frame, index < frames.count - 1 ? .more : [])
        }
    }

    /// The broker's next message to the client (Pongs skipped), failing after `timeout`.
    /// Pings the broker meanwhile, as a client with live requests must.
    private func receive(timeout: Duration = .seconds(20)) throws -> BrokerToClientMessage<[UInt8]> {
        var poller = Poller()
        poller.register(client)
        let deadline = ContinuousClock.now + timeout
        while case let remaining = deadline - .now, remaining > .zero {
            var frames: [Message] = []
            if try client.receive(multipart: &frames, wait: false) {
                let message = try BrokerToClientMessage(frames: frames.map(\.bytes))
                if case .pong = message { continue }
                return message
            }
            if try poller.poll(timeout: min(remaining, .milliseconds(500))) == 0 { try send(.ping) }
        }
        throw FakeBroker.Timeout(what: "a message from the broker")
    }

    private func submit(_ id: String, _ file: String, width: UInt32, delivery: Enlarger_V1_Delivery) throws {
        var submit = Enlarger_V1_Submit()
        submit.requestID = id
        submit.spec.width = width
        submit.delivery = delivery
        try send(.submit(submit, image: try Corpus.good(file)))
    }

    func testRequestFlowsThroughBrokerAndWorkerAsDegradedThenFinal() throws {
        try start()
        try submit("photo", "sharp_2569067123_aca715a2ee_o.jpg", width: 240, delivery: .progressive)
        guard case .accepted = try receive(), case .started(let started) = try receive(),
              case .result(let placeholder, let empty) = try receive(),
              case .result(let degraded, _) = try receive(), case .result(let final, let image) = try receive()
        else { return XCTFail("expected accepted, started, placeholder, degraded, final") }
        XCTAssertEqual(started.attempt, 1)
        XCTAssertEqual(placeholder.stage, .placeholder)
        XCTAssertFalse(placeholder.terminal)
        XCTAssertEqual([placeholder.width, placeholder.height], [final.width, final.height])
        XCTAssertGreaterThanOrEqual(placeholder.placeholder.count, 5)
        XCTAssertEqual(empty.count, 0)
        XCTAssertEqual(degraded.stage, .degraded)
        XCTAssertFalse(degraded.terminal)
        XCTAssertEqual(final.stage, .final)
        XCTAssertTrue(final.terminal)
        XCTAssertEqual(final.width, 240)
        XCTAssertEqual(Array(image.prefix(2)), [0xFF, 0xD8])
    }

    func testCancelThroughTheBrokerReturnsTheWorkersCredit() throws {
        try start()
        try submit("huge", "thumbor_9643x10328.jpg", width: 9000, delivery: .final)
        guard case .accepted = try receive(), case .started = try receive() else { return XCTFail("not started") }
        var cancel = Enlarger_V1_Cancel()
        cancel.requestID = "huge"
        try send(.cancel(cancel))
        guard case .cancelled(let cancelled) = try receive(), case .cancelAck(let ack) = try receive() else {
            return XCTFail("expected Cancelled then CancelAck")
        }
        XCTAssertEqual(cancelled.requestID, "huge")
        XCTAssertEqual(ack.outcome, .cancelled)
        // The worker's JobCancelled gives the credit back.
        let deadline = ContinuousClock.now + .seconds(5)
        while true {
            try send(.statusRequest)
            guard case .statusReply(let status) = try receive() else { return XCTFail("expected a StatusReply") }
            XCTAssertEqual(status.workers.map(\.name), ["integration"])
            if status.workers.first?.inFlight == 0 { break }
            guard ContinuousClock.now < deadline else { return XCTFail("the cancelled job kept its credit") }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }
}
