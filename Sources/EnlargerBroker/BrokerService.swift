import EnlargerProtocol
import Foundation
import Logging
import Locking
import Synchronization
import EnlargerTransport
import ZeroMQ

/// The broker process's I/O loop: two ROUTER sockets (clients, workers), one thread, and a
/// `BrokerCore` that makes every decision.
///
/// `run()` makes the calling thread the owner of both sockets and blocks until `stop()`;
/// it polls the sockets and a wakeup descriptor, feeds whatever arrives to the core, and
/// performs the actions it returns. Timers are the core's `tick`: the poll never waits past
/// the core's next deadline. Image frames travel from one socket to the other as the same
/// ZeroMQ messages, never copied.
///
/// Threading: `run()` blocks its thread, so call it on a thread of its own (the main thread
/// of the `broker` command, or `startInBackground()`), never on a Swift concurrency thread.
/// `stop()` is safe from any thread, e.g. one that waits for SIGINT/SIGTERM.
public final class BrokerService: @unchecked Sendable {
    // @unchecked: the sockets and the core are touched only by the thread inside `run()`
    // (or, before it starts, by `init`); `stop()` uses only the atomic flag and the
    // thread-safe wakeup; the endpoint strings are immutable.

    public struct Configuration: Sendable {
        /// Where clients connect, e.g. `ipc:///run/enlarger/clients.sock` or `tcp://*:5570`.
        /// An ipc socket file takes its mode from the umask: put it in a private directory.
        public var clientsEndpoint: String
        /// Where workers connect, e.g. `ipc:///run/enlarger/workers.sock` or `tcp://*:5571`.
        public var workersEndpoint: String
        public var broker = BrokerConfiguration()
        /// Largest frame a worker may send (an encoded result). libzmq drops the connection of
        /// a worker that sends a larger one.
        public var maxWorkerFrameBytes: Int64 = 512 << 20
        /// After `stop()`, how long the loop keeps running so the shutdown notices (Failed to
        /// clients, Disconnect to workers) leave before the sockets close.
        public var shutdownGrace: Duration = .milliseconds(100)

        public init(clientsEndpoint: String, workersEndpoint: String) {
            self.clientsEndpoint = clientsEndpoint
            self.workersEndpoint = workersEndpoint
        }

        /// Largest frame a client may send: the input limit plus room for the other frames.
        /// libzmq drops the connection of a client that sends a larger one; smaller inputs
        /// over the limit are answered `Rejected{TOO_LARGE}`.
        public var maxClientFrameBytes: Int64 { Int64(broker.maxInputBytes) + (1 << 20) }
    }

    public let configuration: Configuration
    /// The bound endpoints, with wildcards resolved (`tcp://127.0.0.1:*` → the chosen port).
    public let clientsEndpoint: String
    public let workersEndpoint: String

    private let logger: Logger
    private let clients: Socket
    private let workers: Socket
    private let wakeup: Wakeup
    private let stopRequested = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private var core: BrokerCore<Message>

    /// Creates the sockets and binds them, so connection errors surface here and peers may
    /// connect as soon as this returns (their messages wait until `run()`).
    public init(configuration: Configuration, logger: Logger) throws(ZMQError) {
        self.configuration = configuration
        self.logger = logger
        let context = try Context()  // kept alive by the sockets
        clients = try Socket(context, .router)
        workers = try Socket(context, .router)
        wakeup = try Wakeup()
        core = BrokerCore(configuration: configuration.broker, now: .now())
        // Sends never block the loop: ROUTER_MANDATORY turns a departed peer into an error we
        // can act on, and no send high-water mark means a live peer is never refused. What
        // waits toward a worker is bounded by its credits; toward a client, by what it asked
        // for and has not read yet.
        for (socket, maxFrame) in [(clients, configuration.maxClientFrameBytes), (workers, configuration.maxWorkerFrameBytes)] {
            try socket.set(.routerMandatory(true))
            try socket.set(.maxMessageSize(maxFrame))
            try socket.set(.sendHighWaterMark(0))
        }
        try clients.bind(configuration.clientsEndpoint)
        try workers.bind(configuration.workersEndpoint)
        clientsEndpoint = try clients.lastEndpoint()
        workersEndpoint = try workers.lastEndpoint()
    }

    /// Asks `run()` to shut down: live requests fail with `BROKER_SHUTDOWN`, workers are sent
    /// Disconnect, and after `shutdownGrace` the sockets close and `run()` returns.
    /// Idempotent; safe from any thread.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        wakeup.signal()
    }

    /// Serves until `stop()`, then closes the sockets. Call once.
    ///
    /// - Throws: `ZMQError` only for failures of the sockets themselves; peers that
    ///   misbehave or disappear are handled (and counted) without stopping the loop.
    public func run() throws(ZMQError) {
        precondition(!started.exchange(true, ordering: .acquiringAndReleasing), "BrokerService.run() called twice")
        defer {
            clients.close()
            workers.close()
        }
        var poller = Poller()
        let clientsIndex = poller.register(clients)
        let workersIndex = poller.register(workers)
        let wakeupIndex = poller.register(fileDescriptor: wakeup.fileDescriptor)
        var frames: [Message] = []
        var closeAt: MonotonicInstant?
        logger.info(
            "broker serving",
            metadata: ["clients": "\(clientsEndpoint)", "workers": "\(workersEndpoint)"])

        while true {
            var now = MonotonicInstant.now()
            if closeAt == nil, stopRequested.load(ordering: .acquiring) {
                logger.info("broker stopping", metadata: ["live_requests": "\(core.liveRequestCount)"])
                try perform(core.shutdown(now: now), now: now)
                closeAt = now + configuration.shutdownGrace
            }
            if let closeAt, now >= closeAt { break }
            try perform(core.tick(now: now), now: now)

            let deadline = min(core.nextDeadline, closeAt ?? core.nextDeadline)
            _ = try poller.poll(timeout: deadline.duration(since: now))
            if poller.events(at: wakeupIndex).contains(.readable) { wakeup.drain() }

            // Bounded batches per socket, so a flood on one side cannot starve the other side
            // or the timers.
            now = MonotonicInstant.now()
            if poller.events(at: clientsIndex).contains(.readable) {
                try serve(clients, role: .client, frames: &frames, now: now)
            }
            if poller.events(at: workersIndex).contains(.readable) {
                try serve(workers, role: .worker, frames: &frames, now: now)
            }
        }
        logger.info("broker stopped")
    }

    /// Runs `run()` on a new thread, for tests and tools; the returned handle stops it.
    public func startInBackground() -> BrokerThread {
        BrokerThread(self)
    }

    // MARK: - Moving bytes

    private static let batchSize = 256

    private func serve(_ socket: Socket, role: BrokerRole, frames: inout [Message], now: MonotonicInstant) throws(ZMQError) {
        for _ in 0..<Self.batchSize {
            guard try socket.receive(multipart: &frames, wait: false) else { return }
            // A ROUTER always puts the routing id first; anything else is left to the core.
            let peer = PeerID(frames[0].bytes)
            let body = frames[1...]
            let actions = switch role {
            case .client: core.clientFrames(from: peer, body, now: now)
            case .worker: core.workerFrames(from: peer, body, now: now)
            }
            try perform(actions, now: now)
        }
    }

    /// Performs the core's actions in order. A send to a peer that has gone is reported back
    /// to the core, whose follow-up actions are performed in turn.
    private func perform(_ actions: [BrokerAction<Message>], now: MonotonicInstant) throws(ZMQError) {
        var pending = actions
        var next = 0
        while next < pending.count {
            let action = pending[next]
            next += 1
            switch action {
            case .sendToClient(let peer, let message):
                if try !send(message, to: peer, on: clients) {
                    logger.debug("client unreachable", metadata: ["peer": "\(peer)"])
                    pending += core.clientUnreachable(peer, now: now)
                }
            case .sendToWorker(let peer, let message):
                if try !send(message, to: peer, on: workers) {
                    logger.debug("worker unreachable", metadata: ["peer": "\(peer)"])
                    pending += core.workerUnreachable(peer, now: now)
                }
            case .report(let report):
                log(report)
            }
        }
    }

    /// Returns `false` when the peer is not connected (or, which the unlimited high-water mark
    /// rules out, cannot take the message now).
    private func send(_ message: OutgoingMessage<Message>, to peer: PeerID, on socket: Socket) throws(ZMQError) -> Bool {
        do {
            // The routing-id frame is where ROUTER_MANDATORY refuses an unknown peer; once it
            // is accepted the rest of the message is queued as a whole.
            guard try socket.send(peer.bytes, [.more, .dontWait]) else { return false }
            try socket.send(message.tag.bytes, [.more, .dontWait])
            if let payload = message.payload {
                try socket.send(message.header, [.more, .dontWait])
                try socket.send(payload, .dontWait)
            } else {
                try socket.send(message.header, .dontWait)
            }
            return true
        } catch where error.isHostUnreachable {
            return false
        }
    }

    private func log(_ report: BrokerReport) {
        switch report {
        case .workerRegistered(let peer, let name, let capacity):
            logger.info("worker registered", metadata: ["peer": "\(peer)", "name": "\(name)", "capacity": "\(capacity)"])
        case .workerLost(let peer, let reason, let requeued, let failed):
            logger.warning(
                "worker lost",
                metadata: ["peer": "\(peer)", "reason": "\(reason)", "requeued": "\(requeued)", "failed": "\(failed)"])
        case .workerLeft(let peer, let requeued):
            logger.info("worker left", metadata: ["peer": "\(peer)", "requeued": "\(requeued)"])
        case .clientVanished(let peer, let cancelled):
            logger.notice("client vanished", metadata: ["peer": "\(peer)", "cancelled": "\(cancelled)"])
        case .cancelAckTimedOut(let peer, let jobID):
            logger.warning("worker never acknowledged a cancel", metadata: ["peer": "\(peer)", "job": "\(jobID)"])
        case .malformed(let peer, let role, let reason):
            logger.debug("malformed message", metadata: ["peer": "\(peer)", "role": "\(role)", "reason": "\(reason)"])
        }
    }
}

/// A `BrokerService` running on its own thread (see `BrokerService.startInBackground()`).
public final class BrokerThread: Sendable {
    private final class Completion: Sendable {
        let result = Lock<Result<Void, ZMQError>?>(nil)
        let done = DispatchSemaphore(value: 0)
    }

    private let service: BrokerService
    private let completion = Completion()

    fileprivate init(_ service: BrokerService) {
        self.service = service
        let thread = Thread { [service, completion] in
            let result = Result { () throws(ZMQError) in try service.run() }
            completion.result.withLock { $0 = result }
            completion.done.signal()
        }
        thread.name = "enlarger-broker"
        thread.start()
    }

    /// Stops the broker, waits for its thread to finish and rethrows what `run()` threw.
    /// Idempotent.
    public func stopAndWait() throws(ZMQError) {
        service.stop()
        completion.done.wait()
        completion.done.signal()  // leave it open, so calling again returns at once
        try completion.result.withLock { $0 }?.get()
    }
}
