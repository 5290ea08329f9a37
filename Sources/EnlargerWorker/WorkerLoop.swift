import EnlargerProtocol
import Foundation
import Imaging
import Logging
import EnlargerTransport
import ZeroMQ

/// The worker's I/O thread: the only code that touches the DEALER socket.
///
/// It polls the socket and the mailbox, dispatches jobs to the job threads, forwards what
/// they post (as `JobTable` allows), sends heartbeats, and replaces the connection when the
/// broker falls silent or sends `Disconnect`. One instance serves one `WorkerService.run()`.
final class WorkerLoop {
    private let configuration: WorkerConfiguration
    private var logger: Logger { configuration.logger }
    private let mailbox: Mailbox<WorkerMail>
    private let context: Context
    private let jobThreads: JobThreads
    private let clock = ContinuousClock()

    private var table = JobTable()
    private var connection: Connection?
    /// When the next connection is due after a broker `Disconnect` (the protocol asks for one
    /// heartbeat interval of patience before the next `Ready`).
    private var reconnectAt: ContinuousClock.Instant?
    private var stopping = false

    /// Polls the mailbox (index 0) and the current connection's socket, if any.
    private var poller: Poller

    /// The DEALER of the current connection and its timers.
    private struct Connection {
        let socket: Socket
        let pollIndex: Int
        var lastHeard: ContinuousClock.Instant
        var nextHeartbeat: ContinuousClock.Instant
    }

    // LINGER is 0 on every socket, so closing discards frames libzmq has not written yet;
    // this much time between sending `Disconnect` and closing lets it reach the broker.
    private static let disconnectFlushTime = Duration.milliseconds(50)
    // Messages handled per readiness of the socket before the mailbox gets a turn.
    private static let receiveBudget = 256

    init(configuration: WorkerConfiguration, mailbox: Mailbox<WorkerMail>) throws(ZMQError) {
        self.configuration = configuration
        self.mailbox = mailbox
        context = try Context()
        poller = Self.mailboxPoller(mailbox)
        jobThreads = JobThreads(
            count: configuration.concurrency, pipeline: ImagePipeline(limits: configuration.limits), mailbox: mailbox)
    }

    // MARK: Main loop

    /// Runs until `WorkerMail.stop` arrives, then leaves gracefully. A ZeroMQ failure ends the
    /// loop with the error after the job threads have been stopped.
    func run() throws(ZMQError) {
        do {
            try connect()
            while !stopping {
                try turn()
            }
        } catch {
            table.abandonAll()
            jobThreads.closeAndJoin()
            disconnect()
            throw error
        }
        try leave()
    }

    /// One poll and whatever became due.
    private func turn() throws(ZMQError) {
        let now = clock.now
        let wake = [connection?.nextHeartbeat, connection.map { $0.lastHeard + configuration.brokerSilenceLimit },
                    reconnectAt].compactMap { $0 }.min()
        _ = try poller.poll(timeout: wake.map { max(.zero, $0 - now) })

        if poller.events(at: 0).contains(.readable) {
            for mail in mailbox.takeAll() { try handle(mail) }
        }
        if let connection, poller.events(at: connection.pollIndex).contains(.readable) {
            try receive(from: connection.socket)
        }
        try checkTimers()
    }

    private func checkTimers() throws(ZMQError) {
        let now = clock.now
        if let due = reconnectAt, now >= due {
            reconnectAt = nil
            try connect()
        }
        guard let current = connection else { return }
        if now - current.lastHeard >= configuration.brokerSilenceLimit {
            logger.warning("broker silent, reconnecting", metadata: ["silence": "\(now - current.lastHeard)"])
            table.abandonAll()
            try connect()
        } else if now >= current.nextHeartbeat {
            try send(.heartbeat)
            connection?.nextHeartbeat = now + configuration.heartbeatInterval
        }
    }

    // MARK: Connection

    /// Replaces the DEALER with a new one and announces this worker with `Ready`.
    private func connect() throws(ZMQError) {
        disconnect()
        let socket = try Socket(context, .dealer)
        try socket.set(.maxMessageSize(configuration.maxInboundFrameBytes))
        try configuration.curve?.apply(to: socket)
        try socket.connect(configuration.brokerEndpoint)
        let pollIndex = poller.register(socket)
        let now = clock.now
        connection = Connection(socket: socket, pollIndex: pollIndex, lastHeard: now,
                                nextHeartbeat: now + configuration.heartbeatInterval)
        var ready = Enlarger_V1_Ready()
        ready.capacity = UInt32(configuration.concurrency)
        ready.workerName = configuration.name
        ready.pid = UInt32(ProcessInfo.processInfo.processIdentifier)
        try send(.ready(ready))
        logger.info("ready", metadata: ["broker": "\(configuration.brokerEndpoint)",
                                        "capacity": "\(configuration.concurrency)"])
    }

    /// Closes the current DEALER, if any, leaving only the mailbox to poll.
    private func disconnect() {
        connection?.socket.close()
        connection = nil
        poller = Self.mailboxPoller(mailbox)
    }

    private static func mailboxPoller(_ mailbox: Mailbox<WorkerMail>) -> Poller {
        var poller = Poller()
        poller.register(fileDescriptor: mailbox.fileDescriptor)
        return poller
    }

    /// Sends `Disconnect`, stops every job and closes the socket.
    private func leave() throws(ZMQError) {
        let sentAt = clock.now
        if connection != nil { try send(.disconnect) }
        table.abandonAll()
        jobThreads.closeAndJoin()
        let unflushed = sentAt + Self.disconnectFlushTime - clock.now
        if connection != nil, unflushed > .zero {
            let (seconds, attoseconds) = unflushed.components
            Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) * 1e-18)
        }
        disconnect()
        logger.info("stopped")
    }

    /// Sends a message to the broker; a message that cannot be queued now is dropped (the
    /// broker is unreachable, and its liveness check will replace the connection).
    private func send(_ message: WorkerToBrokerMessage<Message>) throws(ZMQError) {
        guard let socket = connection?.socket else { return }
        if try !socket.send(message.encoded()) {
            logger.debug("dropped a message the broker connection could not take")
        }
    }

    // MARK: Broker messages

    private func receive(from socket: Socket) throws(ZMQError) {
        for _ in 0..<Self.receiveBudget {
            guard let frames = try socket.receiveFrames() else { return }
            connection?.lastHeard = clock.now
            let message: BrokerToWorkerMessage<Message>
            do {
                message = try BrokerToWorkerMessage(frames: frames)
            } catch {
                logger.warning("malformed message from the broker", metadata: ["error": "\(error)"])
                continue
            }
            try handle(message)
            // A Disconnect closed the socket this loop was reading.
            guard connection?.socket === socket else { return }
        }
    }

    private func handle(_ message: BrokerToWorkerMessage<Message>) throws(ZMQError) {
        switch message {
        case .job(let job, let image):
            try start(job, image: image)
        case .cancelJob(let cancel):
            let key = JobTable.Key(jobID: cancel.jobID, attempt: cancel.attempt)
            if table.cancel(key) { logger.debug("cancelling", metadata: ["job": "\(key)"]) }
        case .heartbeat:
            break
        case .disconnect:
            logger.warning("the broker disconnected this worker; registering again shortly")
            table.abandonAll()
            disconnect()
            reconnectAt = clock.now + configuration.heartbeatInterval
        case .error(let error):
            logger.warning("the broker reported an error", metadata: ["code": "\(error.code)", "message": "\(error.message)"])
        }
    }

    private func start(_ job: Enlarger_V1_Job, image: Message) throws(ZMQError) {
        let key = JobTable.Key(jobID: job.jobID, attempt: job.attempt)
        guard let (token, flag) = table.start(key) else {
            logger.warning("ignoring a job that is already running", metadata: ["job": "\(key)"])
            return
        }
        var started = Enlarger_V1_JobStarted()
        started.jobID = key.jobID
        started.attempt = key.attempt
        try send(.jobStarted(started))
        do throws(ImagingError) {
            let ticket = JobTicket(token: token, payload: image, options: try ResizeOptions(job.spec),
                                   delivery: try Imaging.Delivery(job.delivery), cancel: flag)
            jobThreads.submit(ticket)
        } catch {
            try finish(table.end(token, .failed(error)))
        }
    }

    // MARK: Mail from job threads

    private func handle(_ mail: WorkerMail) throws(ZMQError) {
        switch mail {
        case .result(let token, let frame):
            guard let key = table.admitResult(token, terminal: frame.isTerminal) else { return }
            var result = Enlarger_V1_JobResult()
            result.jobID = key.jobID
            result.attempt = key.attempt
            result.stage = Enlarger_V1_Stage(frame.stage)
            result.width = UInt32(frame.width)
            result.height = UInt32(frame.height)
            result.format = Enlarger_V1_ImageFormat(frame.format)
            result.terminal = frame.isTerminal
            try send(.jobResult(result, image: frame.image))
        case .ended(let token, let outcome):
            try finish(table.end(token, outcome))
        case .stop:
            stopping = true
        }
    }

    private func finish(_ ending: JobTable.Ending?) throws(ZMQError) {
        switch ending {
        case .cancelled(let key)?:
            var cancelled = Enlarger_V1_JobCancelled()
            cancelled.jobID = key.jobID
            cancelled.attempt = key.attempt
            try send(.jobCancelled(cancelled))
        case .failed(let key, let code, let message)?:
            var failed = Enlarger_V1_JobFailed()
            failed.jobID = key.jobID
            failed.attempt = key.attempt
            failed.code = code
            failed.message = message
            try send(.jobFailed(failed))
        case nil:
            break
        }
    }
}
