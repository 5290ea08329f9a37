import EnlargerProtocol
import EnlargerTransport
import Foundation
import Imaging
import Locking
import Logging
import Telemetry
import Synchronization
import ZeroMQ

/// The worker's I/O thread: the only code that touches the DEALER socket.
///
/// Poll and perform: it polls the mailbox and the current connection, feeds what arrives and
/// the time to the `WorkerCore`, and performs the actions the core returns. What it adds is
/// I/O: creating and closing sockets, handing jobs to the job threads, and an `Outbox` that
/// keeps the messages the socket cannot take yet. One instance serves one
/// `WorkerService.run()`.
final class WorkerLoop {
    private let configuration: WorkerConfiguration
    private var logger: Logger { configuration.logger }
    private let mailbox: Mailbox<WorkerMail>
    private let gauges: WorkerGauges
    private let telemetry: WorkerService.Instruments?
    private let metrics: WorkerMetrics?
    private let context: Context
    private let jobThreads: JobThreads
    private let clock = ContinuousClock()

    private var core: WorkerCore<Message>
    private var socket: Socket?
    private var outbox: Outbox<OutgoingMessage<Message>>
    /// The outbox's bytes as the core last heard them.
    private var reportedOutboxBytes = 0
    private var stopping = false

    /// Polls the mailbox (index 0) and the current socket (index 1), if any.
    private var poller = Poller()
    private var pollsWritable = false

    // LINGER is 0 on every socket, so closing discards frames libzmq has not written yet;
    // this much time between sending `Disconnect` and closing lets it reach the broker.
    private static let disconnectFlushTime = Duration.milliseconds(50)
    // Messages handled per readiness of the socket before the mailbox gets a turn.
    private static let receiveBudget = 256

    init(configuration: WorkerConfiguration, mailbox: Mailbox<WorkerMail>, gauges: WorkerGauges,
         sources: SourceAccess, telemetry: WorkerService.Instruments? = nil) throws(ZMQError) {
        self.configuration = configuration
        self.mailbox = mailbox
        self.gauges = gauges
        self.telemetry = telemetry
        metrics = telemetry.map { WorkerMetrics(registry: $0.registry) }
        context = try Context()
        core = WorkerCore(configuration: .init(
            capacity: configuration.concurrency, name: configuration.name,
            pid: UInt32(ProcessInfo.processInfo.processIdentifier), heartbeatInterval: configuration.heartbeatInterval,
            missedHeartbeats: configuration.missedHeartbeats, memoryBudget: configuration.memoryBudget))
        outbox = Outbox(optionalLimit: configuration.concurrency)
        jobThreads = JobThreads(
            count: configuration.concurrency, pipeline: ImagePipeline(limits: configuration.limits), sources: sources,
            mailbox: mailbox)
        rebuildPoller()
    }

    // MARK: Main loop

    /// Runs until `WorkerMail.stop` arrives, then leaves gracefully. A ZeroMQ failure ends the
    /// loop with the error after the job threads have been stopped.
    func run() throws(ZMQError) {
        do {
            try perform(core.start(now: clock.now))
            while !stopping {
                try turn()
            }
        } catch {
            for case .cancel(let control) in core.stop() { control.cancel() }
            jobThreads.closeAndJoin()
            closeSocket()
            throw error
        }
        try leave()
    }

    /// One poll, then whatever it found and whatever became due.
    private func turn() throws(ZMQError) {
        let wantsWritable = socket != nil && !outbox.isEmpty
        if wantsWritable != pollsWritable { rebuildPoller() }
        let timeout = core.nextDeadline.map { max(.zero, $0 - clock.now) }
        _ = try poller.poll(timeout: timeout)

        if poller.events(at: 0).contains(.readable) {
            for mail in mailbox.takeAll() { try handle(mail) }
        }
        if let current = socket, poller.events(at: 1).contains(.writable) {
            try outbox.flush { (message) throws(ZMQError) in try current.send(message) }
        }
        if let current = socket, poller.events(at: 1).contains(.readable) {
            try receive(from: current)
        }
        try reportOutbox()
        try perform(core.tick(now: clock.now))
        try reportOutbox()
        gauges.update(core)
        telemetry?.probe.answer { publish() }
    }

    /// On a probe: the state a scrape or a readiness check reads.
    private func publish() {
        guard let telemetry else { return }
        metrics?.publish(core)
        let reason: String? =
            if stopping { "the worker is stopping" }
            else if !core.isRegistered { "not registered with the broker at \(configuration.brokerEndpoint)" }
            else { nil }
        telemetry.unreadiness.withLock { $0 = reason }
    }

    private func handle(_ mail: WorkerMail) throws(ZMQError) {
        switch mail {
        case .sourceOpened(let token, let identity): try perform(core.jobSourceOpened(token, identity: identity))
        case .sourceRead(let token, let verified): try perform(core.jobSourceRead(token, verified: verified))
        case .download(let token, let progress): try perform(core.jobDownload(token, progress))
        case .sourceWanted(let token, let bytes): try perform(core.jobSourceWanted(token, bytes: bytes))
        case .sourceExpected(let token, let bytes): try perform(core.jobSourceExpected(token, bytes: bytes))
        case .estimated(let token, let estimate): try perform(core.jobEstimated(token, estimate))
        case .result(let token, let frame): try perform(core.jobResult(token, frame.output))
        case .ended(let token, let outcome, let figures): try perform(core.jobEnded(token, outcome, figures: figures))
        case .memoryFreed(let token): try perform(core.jobMemoryFreed(token))
        case .probe: break  // answered at the end of this turn
        case .stop: stopping = true
        }
    }

    private func receive(from current: Socket) throws(ZMQError) {
        for _ in 0..<Self.receiveBudget {
            guard let frames = try current.receiveFrames() else { return }
            switch Result(catching: { () throws(FrameError) in try BrokerToWorkerMessage<Message>(frames: frames) }) {
            case .success(let message): try perform(core.received(message, now: clock.now))
            case .failure(let error): try perform(core.receivedMalformed("\(error)", now: clock.now))
            }
            // A Disconnect closed the socket this loop was reading.
            guard socket === current else { return }
        }
    }

    // MARK: Actions

    private func perform(_ actions: [WorkerAction<Message>]) throws(ZMQError) {
        for action in actions {
            switch action {
            case .connect:
                try connect()
            case .closeConnection:
                closeSocket()
            case .send(let message):
                guard let current = socket else { continue }
                let encoded = message.encoded()
                try outbox.send(encoded, Outbox.Importance(of: message), bytes: encoded.byteCount) { (outgoing) throws(ZMQError) in
                    try current.send(outgoing)
                }
            case .startJob(let start):
                jobThreads.submit(start)
            case .admit(let control):
                control.admit()
            case .cancel(let control):
                control.cancel()
            case .yieldSource(let control):
                control.yieldSource()
            case .report(let report):
                metrics?.record(report)
                log(report)
            }
        }
    }

    /// Tells the core what waits in the outbox (it counts against the memory budget), once
    /// that changed: what it admits then may send more.
    private func reportOutbox() throws(ZMQError) {
        while outbox.bytes != reportedOutboxBytes {
            reportedOutboxBytes = outbox.bytes
            try perform(core.outboxHolds(reportedOutboxBytes))
        }
    }

    /// Replaces the DEALER with a new one (the core sends `Ready` next).
    private func connect() throws(ZMQError) {
        closeSocket()
        let fresh = try Socket(context, .dealer)
        try fresh.set(.maxMessageSize(configuration.maxInboundFrameBytes))
        if let mark = configuration.sendHighWaterMark { try fresh.set(.sendHighWaterMark(mark)) }
        try configuration.curve?.apply(to: fresh)
        try fresh.connect(configuration.brokerEndpoint)
        socket = fresh
        rebuildPoller()
    }

    /// Closes the current DEALER, if any, with whatever it had not sent yet.
    private func closeSocket() {
        socket?.close()
        socket = nil
        if !outbox.isEmpty {
            logger.debug("discarding unsent messages with the connection", metadata: ["count": .stringConvertible(outbox.count)])
        }
        outbox.clear()
        rebuildPoller()
    }

    private func rebuildPoller() {
        poller = Poller()
        poller.register(fileDescriptor: mailbox.fileDescriptor)
        pollsWritable = socket != nil && !outbox.isEmpty
        if let socket { poller.register(socket, for: pollsWritable ? [.readable, .writable] : .readable) }
    }

    /// Sends `Disconnect`, stops every job and closes the socket.
    private func leave() throws(ZMQError) {
        let sentAt = clock.now
        let hadConnection = socket != nil
        try perform(core.stop())
        jobThreads.closeAndJoin()
        if let current = socket {
            try outbox.flush { (message) throws(ZMQError) in try current.send(message) }
        }
        let unflushed = sentAt + Self.disconnectFlushTime - clock.now
        if hadConnection, unflushed > .zero {
            let (seconds, attoseconds) = unflushed.components
            Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) * 1e-18)
        }
        closeSocket()
        gauges.update(core)
        logger.info("stopped")
    }

    private func log(_ report: WorkerReport) {
        switch report {
        case .jobEnded(let end):
            let figures = end.figures
            logger.info("job ended", metadata: [
                "request_id": "\(end.requestID)", "job_id": .stringConvertible(end.key.jobID), "attempt": .stringConvertible(end.key.attempt),
                "stage": "ended", "outcome": "\(end.outcome.name)", "code": "\(end.outcome.code)",
                "duration_ms": .stringConvertible(LogField.milliseconds(figures.run)), "decode_ms": .stringConvertible(LogField.milliseconds(figures.decode)),
                "resize_ms": .stringConvertible(LogField.milliseconds(figures.resize)), "encode_ms": .stringConvertible(LogField.milliseconds(figures.encode)),
                "bytes_in": .stringConvertible(figures.bytesIn), "bytes_out": .stringConvertible(figures.bytesOut),
            ])
        case .registering(let capacity, let budget):
            logger.info("ready", metadata: ["broker": "\(configuration.brokerEndpoint)", "capacity": .stringConvertible(capacity),
                                            "memory_budget_bytes": .stringConvertible(budget)])
        case .brokerSilent(let silence, let abandoned):
            logger.warning("broker silent, reconnecting", metadata: [
                "silence_s": .stringConvertible(LogField.seconds(silence)), "abandoned": .stringConvertible(abandoned)])
        case .brokerDisconnected(let abandoned):
            logger.warning("the broker disconnected this worker; registering again shortly",
                           metadata: ["abandoned": .stringConvertible(abandoned)])
        case .brokerError(let code, let message):
            logger.warning("the broker reported an error", metadata: ["code": "\(code)", "message": "\(message)"])
        case .malformed(let reason):
            logger.warning("malformed message from the broker", metadata: ["error": "\(reason)"])
        case .duplicateJob(let key):
            logger.warning("ignoring a job that is already running", metadata: ["job": "\(key)"])
        case .cancelling(let key):
            logger.debug("cancelling", metadata: ["job": "\(key)"])
        case .tooLargeForBudget(let key, let bytes):
            logger.info("refused a job larger than the memory budget",
                        metadata: ["job": "\(key)", "estimate_bytes": .stringConvertible(bytes)])
        case .yieldingSource(let key, let bytes):
            logger.debug("job drops its source bytes for an older one to grow; it reads them again later",
                         metadata: ["job": "\(key)", "bytes": .stringConvertible(bytes)])
        case .waitingForMemory(let key, let bytes, let inUse):
            logger.debug("job waits for memory", metadata: ["job": "\(key)", "estimate_bytes": .stringConvertible(bytes),
                                                            "in_use_bytes": .stringConvertible(inUse)])
        }
    }
}

/// Counters the worker publishes from its I/O thread for any thread to read.
final class WorkerGauges: Sendable {
    private let inUse = Atomic<Int>(0)
    private let waiting = Atomic<Int>(0)
    private let jobs = Atomic<Int>(0)

    func update<Payload>(_ core: WorkerCore<Payload>) {
        inUse.store(core.memoryInUse, ordering: .relaxed)
        waiting.store(core.jobsWaitingForMemory, ordering: .relaxed)
        jobs.store(core.jobs.count, ordering: .relaxed)
    }

    var memoryInUse: Int { inUse.load(ordering: .relaxed) }
    var jobsWaitingForMemory: Int { waiting.load(ordering: .relaxed) }
    var jobCount: Int { jobs.load(ordering: .relaxed) }
}
