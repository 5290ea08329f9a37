import Dispatch
import EnlargerBroker
import EnlargerProtocol
import Foundation
import ImageModel
import Logging
import Synchronization
import XCTest
import ZeroMQ

@testable import Enlarger
import TestSupport

/// The client against the real `BrokerService`, with a scripted worker (a raw DEALER) behind it.
final class BrokerIntegrationTests: XCTestCase {
    private let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xD9]

    /// Returns the broker's client endpoint, with a broker and a fake worker running behind it.
    private func start() throws -> String {
        let endpoints = try TemporaryEndpoints(self)
        var logger = Logger(label: "test.broker")
        logger.logLevel = .warning
        let broker = try BrokerService(
            configuration: .init(clientsEndpoint: endpoints.ipc("clients"), workersEndpoint: endpoints.ipc("workers")),
            logger: logger)
        let brokerThread = broker.startInBackground()
        let worker = try ScriptedWorker(endpoint: broker.workersEndpoint)
        addTeardownBlock {
            worker.stop()
            try brokerThread.stopAndWait()
        }
        return broker.clientsEndpoint
    }

    func testEventsAndCancelsTravelThroughTheBroker() async throws {
        let endpoint = try start()
        try await withEnlargerClient(brokerEndpoint: endpoint) { client in
            var events: [RequestEvent] = []
            for try await event in client.submit(ResizeRequest(id: "quick", image: jpeg, options: ResizeOptions(width: 8))) {
                events.append(event)
            }
            XCTAssertEqual(events, [
                .accepted, .started(attempt: 1),
                .degraded(EncodedImage(bytes: [1], width: 4, height: 3, format: .jpeg)),
                .final(EncodedImage(bytes: [2], width: 8, height: 6, format: .jpeg)),
            ])

            // A request the worker holds until it is cancelled.
            let held = client.submit(ResizeRequest(id: "hold-own", image: jpeg, options: ResizeOptions(width: 8)))
            var iterator = held.makeAsyncIterator()
            let accepted = try await iterator.next()
            let started = try await iterator.next()
            XCTAssertEqual([accepted, started], [.accepted, .started(attempt: 1)])
            let outcome = try await client.cancel("hold-own")
            XCTAssertEqual(outcome, .cancelled)
            let afterCancel = try await iterator.next()
            XCTAssertNil(afterCancel)
            let again = try await client.cancel("hold-own")
            XCTAssertEqual(again, .finished)

            let status = try await client.status()
            XCTAssertEqual(status.workers.map(\.name), ["scripted"])
            XCTAssertEqual(status.totals.cancelled, 1)
        }
    }

    func testCancelFromAnotherConnectionEndsTheSubmittersRequestWithCancelled() async throws {
        let endpoint = try start()
        try await withEnlargerClient(brokerEndpoint: endpoint) { submitter in
            try await withEnlargerClient(brokerEndpoint: endpoint) { canceller in
                var iterator = submitter.submit(
                    ResizeRequest(id: "hold-other", image: jpeg, options: ResizeOptions(width: 8))).makeAsyncIterator()
                let accepted = try await iterator.next()
                XCTAssertEqual(accepted, .accepted)
                let outcome = try await canceller.cancel("hold-other")
                XCTAssertEqual(outcome, .cancelled)
                do {
                    while try await iterator.next() != nil {}
                    XCTFail("the submitter was not told")
                } catch {
                    XCTAssertEqual(error as? EnlargerClientError, .cancelled)
                }
            }
        }
    }
}

/// A worker that answers every job at once with a 4×3 degraded result and an 8×6 final one,
/// except jobs whose request id starts with "hold", which it holds until they are cancelled.
/// Runs on its own thread.
private final class ScriptedWorker: @unchecked Sendable {
    // @unchecked: `dealer` is created by `init` and then used only by the worker's thread.
    private let context: Context
    private let dealer: Socket
    private let wakeup: Wakeup
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    init(endpoint: String) throws {
        context = try Context()
        dealer = try Socket(context, .dealer)
        try dealer.connect(endpoint)
        wakeup = try Wakeup()
        Thread { [self] in serve() }.start()
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        wakeup.signal()
        finished.wait()
    }

    private func send(_ message: WorkerToBrokerMessage<[UInt8]>) throws {
        let frames = message.encoded().frames
        for (index, frame) in frames.enumerated() {
            try dealer.send(frame, index < frames.count - 1 ? .more : [])
        }
    }

    private func serve() {
        defer {
            dealer.close()
            finished.signal()
        }
        do {
            var ready = Enlarger_V1_Ready()
            ready.capacity = 2
            ready.workerName = "scripted"
            try send(.ready(ready))
            var poller = Poller()
            poller.register(dealer)
            poller.register(fileDescriptor: wakeup.fileDescriptor)
            while !stopping.load(ordering: .relaxed) {
                if try poller.poll(timeout: .milliseconds(200)) == 0 { try send(.heartbeat) }
                var frames: [Message] = []
                while try dealer.receive(multipart: &frames, wait: false) {
                    try handle(BrokerToWorkerMessage(frames: frames.map(\.bytes)))
                }
            }
        } catch {
            preconditionFailure("scripted worker failed: \(error)")
        }
    }

    private func handle(_ message: BrokerToWorkerMessage<[UInt8]>) throws {
        switch message {
        case .job(let job, _):
            var started = Enlarger_V1_JobStarted()
            started.jobID = job.jobID
            started.attempt = job.attempt
            try send(.jobStarted(started))
            guard !job.requestID.hasPrefix("hold") else { return }
            for (stage, size, bytes) in [(Enlarger_V1_Stage.degraded, (4, 3), [UInt8(1)]), (.final, (8, 6), [2])] {
                var result = Enlarger_V1_JobResult()
                result.jobID = job.jobID
                result.attempt = job.attempt
                result.stage = stage
                result.width = UInt32(size.0)
                result.height = UInt32(size.1)
                result.terminal = stage == .final
                try send(.jobResult(result, image: bytes))
            }
        case .cancelJob(let cancel):
            var cancelled = Enlarger_V1_JobCancelled()
            cancelled.jobID = cancel.jobID
            cancelled.attempt = cancel.attempt
            try send(.jobCancelled(cancelled))
        case .heartbeat, .disconnect, .error:
            break
        }
    }
}
