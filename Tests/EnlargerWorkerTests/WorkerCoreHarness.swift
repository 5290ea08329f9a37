import EnlargerProtocol
import ImageModel
import Imaging
import XCTest

@testable import EnlargerWorker

/// Drives a `WorkerCore<[UInt8]>` with a hand-made clock and records what it asks for.
/// Sent messages go through the protocol's own encoder and decoder, so framing is checked too.
struct WorkerCoreHarness {
    typealias Bytes = [UInt8]
    typealias Core = WorkerCore<Bytes>

    enum Event {
        case connected
        case closed
        case sent(WorkerToBrokerMessage<Bytes>)
        case started(JobToken)
        case admitted(JobToken)
        case cancelled(JobToken)
        case yielded(JobToken)
        case report(WorkerReport)
    }

    var core: Core
    var now: ContinuousClock.Instant
    private(set) var events: [Event] = []
    /// Every job the core handed to the job threads, by token.
    private(set) var jobs: [JobToken: JobStart<Bytes>] = [:]
    private var tokensByControl: [ObjectIdentifier: JobToken] = [:]

    static let image: Bytes = [0xFF, 0xD8, 0xFF, 0xD9]

    init(capacity: Int = 4, heartbeat: Duration = .seconds(1), missedHeartbeats: Int = 3,
         memoryBudget: Int = 1 << 30, start: Bool = true) {
        core = Core(configuration: .init(capacity: capacity, name: "test", pid: 42, heartbeatInterval: heartbeat,
                                         missedHeartbeats: missedHeartbeats, memoryBudget: memoryBudget))
        now = ContinuousClock.now
        if start { record(core.start(now: now)) }
    }

    var configuration: Core.Configuration { core.configuration }

    // MARK: Feeding events

    mutating func broker(_ message: BrokerToWorkerMessage<Bytes>) {
        // Through the wire format, as the loop receives it.
        let decoded = try! BrokerToWorkerMessage<Bytes>(frames: message.encoded().frames)
        record(core.received(decoded, now: now))
    }

    mutating func job(_ id: UInt64, attempt: UInt32 = 1, delivery: Enlarger_V1_Delivery = .progressive,
                      width: UInt32 = 100) {
        var job = Enlarger_V1_Job()
        job.jobID = id
        job.attempt = attempt
        job.requestID = "request-\(id)"
        job.spec.width = width
        job.delivery = delivery
        broker(.job(job, image: Self.image))
    }

    mutating func cancel(_ id: UInt64, attempt: UInt32 = 1) {
        var cancel = Enlarger_V1_CancelJob()
        cancel.jobID = id
        cancel.attempt = attempt
        broker(.cancelJob(cancel))
    }

    mutating func estimated(_ token: JobToken, bytes: Int) {
        record(core.jobEstimated(token, Self.estimate(bytes)))
    }

    mutating func result(_ token: JobToken, _ stage: ImageModel.Stage, terminal: Bool) {
        record(core.jobResult(token, StageOutput(stage: stage, isTerminal: terminal, width: 10, height: 10,
                                                 format: .jpeg, image: Self.image)))
    }

    /// The job thread returned; with `freed`, the buffers it released are gone too.
    mutating func ended(_ token: JobToken, _ outcome: JobOutcome = .completed, freed: Bool = true) {
        record(core.jobEnded(token, outcome))
        if freed { memoryFreed(token) }
    }

    mutating func memoryFreed(_ token: JobToken) {
        record(core.jobMemoryFreed(token))
    }

    /// Advances the clock and ticks.
    mutating func advance(by duration: Duration) {
        now = now + duration
        record(core.tick(now: now))
    }

    mutating func stop() {
        record(core.stop())
    }

    static func estimate(_ bytes: Int) -> MemoryEstimate {
        var estimate = MemoryEstimate.zero
        estimate.bytes = bytes
        return estimate
    }

    // MARK: Reading what happened

    mutating func record(_ actions: [WorkerAction<Bytes>]) {
        for action in actions {
            switch action {
            case .connect:
                events.append(.connected)
            case .closeConnection:
                events.append(.closed)
            case .send(let message):
                events.append(.sent(try! WorkerToBrokerMessage<Bytes>(frames: message.encoded().frames)))
            case .startJob(let start):
                jobs[start.token] = start
                tokensByControl[ObjectIdentifier(start.control)] = start.token
                events.append(.started(start.token))
            case .admit(let control):
                control.admit()
                events.append(.admitted(token(of: control)))
            case .cancel(let control):
                control.cancel()
                events.append(.cancelled(token(of: control)))
            case .yieldSource(let control):
                control.yieldSource()
                events.append(.yielded(token(of: control)))
            case .report(let report):
                events.append(.report(report))
            }
        }
    }

    func token(of control: JobControl) -> JobToken {
        tokensByControl[ObjectIdentifier(control)]!
    }

    /// The token of the latest job with this id.
    func token(_ id: UInt64, attempt: UInt32 = 1) -> JobToken {
        jobs.values.filter { $0.key == JobKey(jobID: id, attempt: attempt) }.map(\.token).max()!
    }

    /// Forgets the events so far.
    mutating func clear() { events.removeAll() }

    /// The messages sent since the last `clear`, heartbeats included.
    var sent: [WorkerToBrokerMessage<Bytes>] {
        events.compactMap { if case .sent(let message) = $0 { message } else { nil } }
    }

    /// A compact description of what was sent, for assertions: "started 1", "degraded 1",
    /// "final 1", "failed 1 TOO_LARGE", "cancelled 1", "ready", "heartbeat", "disconnect".
    var sentSummary: [String] {
        sent.map(Self.summary)
    }

    static func summary(_ message: WorkerToBrokerMessage<Bytes>) -> String {
        switch message {
        case .ready: "ready"
        case .heartbeat: "heartbeat"
        case .disconnect: "disconnect"
        case .jobStarted(let m): "started \(m.jobID)"
        case .jobResult(let m, _): "\(m.stage == .final ? "final" : "degraded")\(m.terminal ? "" : "…") \(m.jobID)"
        case .jobFailed(let m): "failed \(m.jobID) \(m.code)"
        case .jobCancelled(let m): "cancelled \(m.jobID)"
        case .jobSourceOpened(let m): "opened \(m.jobID)"
        case .jobDownload(let m): "download \(m.jobID) \(m.phase)"
        case .occupancy(let m): "occupancy \(m.busyThreads) [\(m.stopping.map { "\($0.jobID)" }.joined(separator: " "))]"
        }
    }

    var admitted: [JobToken] { events.compactMap { if case .admitted(let t) = $0 { t } else { nil } } }
    var cancelled: [JobToken] { events.compactMap { if case .cancelled(let t) = $0 { t } else { nil } } }
    var yielded: [JobToken] { events.compactMap { if case .yielded(let t) = $0 { t } else { nil } } }
    var connections: Int { events.filter { if case .connected = $0 { true } else { false } }.count }
}

extension MemoryEstimate {
    static var zero: MemoryEstimate {
        MemoryEstimate(bytes: 0, coefficientBytes: 0, decodedBytes: 0)
    }
}
