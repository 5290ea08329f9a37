import EnlargerProtocol
import XCTest
import ZeroMQ

/// A raw ROUTER standing in for the broker's worker endpoint. Used from the test's thread only.
///
/// Like the real broker it answers each heartbeat with one (while the test is receiving),
/// so a worker does not give up on it; a test of broker silence turns that off.
final class FakeBroker {
    struct Received {
        let peer: [UInt8]
        let message: WorkerToBrokerMessage<[UInt8]>
        let at: ContinuousClock.Instant
    }

    private let context: Context
    private let router: Socket
    private var poller = Poller()
    var answersHeartbeats = true

    /// `receiveHighWaterMark` lowers the ROUTER's inbound queue, so that a broker that stops
    /// receiving soon pushes back on the worker.
    init(endpoint: String, receiveHighWaterMark: Int32? = nil) throws {
        context = try Context()
        router = try Socket(context, .router)
        try router.set(.routerMandatory(true))
        if let receiveHighWaterMark { try router.set(.receiveHighWaterMark(receiveHighWaterMark)) }
        try router.bind(endpoint)
        poller.register(router)
    }

    /// The next message from any worker, heartbeats included, or `nil` after `timeout`.
    func receive(timeout: Duration) throws -> Received? {
        let deadline = ContinuousClock.now + timeout
        while true {
            var frames: [Message] = []
            if try router.receive(multipart: &frames, wait: false) {
                let message = try WorkerToBrokerMessage<[UInt8]>(frames: frames.dropFirst().map(\.bytes))
                if case .heartbeat = message, answersHeartbeats { try send(.heartbeat, to: frames[0].bytes) }
                return Received(peer: frames[0].bytes, message: message, at: .now)
            }
            let remaining = deadline - .now
            guard remaining > .zero else { return nil }
            _ = try poller.poll(timeout: remaining)
        }
    }

    /// Receives until `match` accepts a message (heartbeats and Occupancy, which a worker
    /// sends on its own schedule while a cancelled attempt is still stopping, are skipped);
    /// fails the test and throws if none does within `timeout`.
    func expect<T>(_ what: String, timeout: Duration = .seconds(20), file: StaticString = #filePath,
                   line: UInt = #line, _ match: (Received) -> T?) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while case let remaining = deadline - .now, remaining > .zero,
              let received = try receive(timeout: remaining) {
            if let value = match(received) { return value }
            switch received.message {
            case .heartbeat, .occupancy: continue
            default: break
            }
            XCTFail("while waiting for \(what), got \(received.message)", file: file, line: line)
        }
        XCTFail("no \(what) within \(timeout)", file: file, line: line)
        throw Timeout(what: what)
    }

    struct Timeout: Error {
        let what: String
    }

    /// Every message other than heartbeats that arrives within `duration`.
    func collect(for duration: Duration) throws -> [Received] {
        let deadline = ContinuousClock.now + duration
        var all: [Received] = []
        while case let remaining = deadline - .now, remaining > .zero,
              let received = try receive(timeout: remaining) {
            if case .heartbeat = received.message { continue }
            all.append(received)
        }
        return all
    }

    func send(_ message: BrokerToWorkerMessage<[UInt8]>, to peer: [UInt8]) throws {
        try router.send(peer, .more)
        let frames = message.encoded().frames
        for (index, frame) in frames.enumerated() {
            try router.send(frame, index < frames.count - 1 ? .more : [])
        }
    }
}

extension FakeBroker {
    /// Waits for a worker's `Ready`; returns its routing id and the message.
    func expectReady(timeout: Duration = .seconds(20), file: StaticString = #filePath,
                     line: UInt = #line) throws -> (peer: [UInt8], ready: Enlarger_V1_Ready) {
        try expect("Ready", timeout: timeout, file: file, line: line) { received in
            if case .ready(let ready) = received.message { return (received.peer, ready) }
            return nil
        }
    }
}

/// A `Job` message.
func job(_ id: UInt64, attempt: UInt32 = 1, width: UInt32 = 320, height: UInt32 = 0,
         delivery: Enlarger_V1_Delivery = .progressive, format: Enlarger_V1_ImageFormat = .jpeg,
         image: [UInt8]) -> BrokerToWorkerMessage<[UInt8]> {
    var job = Enlarger_V1_Job()
    job.jobID = id
    job.attempt = attempt
    job.requestID = "request-\(id)"
    job.spec.width = width
    job.spec.height = height
    job.spec.format = format
    job.delivery = delivery
    return .job(job, image: image)
}

func cancelJob(_ id: UInt64, attempt: UInt32 = 1) -> BrokerToWorkerMessage<[UInt8]> {
    var cancel = Enlarger_V1_CancelJob()
    cancel.jobID = id
    cancel.attempt = attempt
    return .cancelJob(cancel)
}

extension WorkerToBrokerMessage {
    /// The job a message is about, if any.
    var jobID: UInt64? {
        switch self {
        case .jobStarted(let started): started.jobID
        case .jobResult(let result, _): result.jobID
        case .jobFailed(let failed): failed.jobID
        case .jobCancelled(let cancelled): cancelled.jobID
        case .jobSourceOpened(let opened): opened.jobID
        case .jobDownload(let download): download.jobID
        case .ready, .heartbeat, .disconnect, .occupancy: nil
        }
    }

    /// Whether the message ends its job's attempt.
    var isTerminal: Bool {
        switch self {
        case .jobResult(let result, _): result.terminal
        case .jobFailed, .jobCancelled: true
        case .ready, .heartbeat, .jobStarted, .disconnect, .jobSourceOpened, .jobDownload, .occupancy: false
        }
    }
}
