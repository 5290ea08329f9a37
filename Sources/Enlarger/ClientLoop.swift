import EnlargerProtocol
import EnlargerTransport
import ZeroMQ

/// The client's I/O thread: the only code that touches its DEALER socket.
///
/// Poll and perform: it polls the mailbox and the socket, feeds callers' commands, the
/// broker's messages and the time to the `ClientCore`, hands the core's outbox to the socket
/// as far as the socket takes it, and performs the actions the core returns. What it adds is
/// I/O: the socket, and the map from the core's tokens to the `RequestChannel`s and
/// continuations they stand for.
final class ClientLoop: @unchecked Sendable {
    // @unchecked: created on the caller's thread, then used only by the I/O thread it is
    // handed to (starting a thread is a full memory barrier, as libzmq asks).
    private let endpoint: String
    private let curve: CurveClientCredentials?
    private let registry: RequestRegistry
    private let context: Context
    private let clock = ContinuousClock()
    private var socket: Socket
    private var running = true
    /// While closing: the callers of `close()`, and when the loop stops waiting for the
    /// broker to answer outstanding cancels.
    private var closers: [CheckedContinuation<Void, Never>] = []
    private var closeBy: ContinuousClock.Instant?
    static let closeWait = Duration.seconds(1)

    private var core: ClientCore<Message>
    private var lastToken: UInt64 = 0
    private var requests: [RequestToken: RequestChannel] = [:]
    private var cancelWaiters: [CallToken: CancelWaiter] = [:]
    private var statusWaiters: [CallToken: StatusWaiter] = [:]

    // Messages handled per readiness of the socket before the mailbox gets a turn.
    private static let receiveBudget = 256

    init(endpoint: String, configuration: EnlargerClient.Configuration, registry: RequestRegistry) throws(ZMQError) {
        self.endpoint = endpoint
        curve = configuration.curve
        self.registry = registry
        context = try Context()
        socket = try Self.connect(context, endpoint, configuration.curve)
        core = ClientCore(configuration: .init(
            heartbeatInterval: configuration.heartbeatInterval, missedHeartbeats: configuration.missedHeartbeats,
            syncInterval: configuration.syncInterval, resubmitAfterBrokerRestart: configuration.resubmitAfterBrokerRestart,
            maxInputBytes: configuration.maxInputBytes), now: clock.now)
    }

    /// A DEALER with a fresh random routing id, kept for the socket's life: libzmq
    /// reconnects a reset connection under the same id, and the broker hands the id (and
    /// what waited for it) over to the new connection.
    private static func connect(
        _ context: Context, _ endpoint: String, _ curve: CurveClientCredentials?
    ) throws(ZMQError) -> Socket {
        let socket = try Socket(context, .dealer)
        try socket.set(.immediate(true))
        try curve?.apply(to: socket)
        var identity = (0..<16).map { _ in UInt8.random(in: 0...255) }
        identity[0] = max(identity[0], 1)  // a leading zero byte is reserved by libzmq
        try socket.set(.routingID(identity))
        try socket.connect(endpoint)
        return socket
    }

    // MARK: Main loop

    /// Serves until `close`; a ZeroMQ failure closes the client with `.transport`.
    func run() {
        do {
            while running { try turn() }
        } catch {
            shutDown(.transport(error), then: closers)
        }
    }

    private func turn() throws(ZMQError) {
        var poller = Poller()
        poller.register(fileDescriptor: registry.mailbox.fileDescriptor)
        let socketIndex = poller.register(socket, for: core.nextMessage == nil ? .readable : [.readable, .writable])
        let wakeup = [core.nextWakeup, closeBy].compactMap { $0 }.min()
        _ = try poller.poll(timeout: wakeup.map { max(.zero, $0 - clock.now) })

        for mail in registry.mailbox.takeAll() { try handle(mail) }
        guard running else { return }
        if poller.events(at: socketIndex).contains(.readable) { try receive() }
        try perform(core.tick(now: clock.now))
        try flush()
        if let closeBy, !core.cancelsOutstanding || clock.now >= closeBy {
            shutDown(.closed, then: closers)
        }
    }

    private func handle(_ mail: ClientMail) throws(ZMQError) {
        switch mail {
        case .submit(let channel, let submit, let payload):
            let token = RequestToken(value: nextToken())
            requests[token] = channel
            try perform(core.submit(token, submit, image: payload.frame, now: clock.now))
        case .cancel(let id, let waiter):
            let token = waiter.map { waiter in
                let token = CallToken(value: nextToken())
                cancelWaiters[token] = waiter
                return token
            }
            try perform(core.cancel(id, waiter: token, now: clock.now))
        case .status(let waiter):
            let token = CallToken(value: nextToken())
            statusWaiters[token] = waiter
            try perform(core.status(token, now: clock.now))
        case .close(let continuation):
            // Cancels still on their way (a caller that cancelled and closed at once, a task
            // cancelled just before its client closed) are sent and answered first: the broker
            // would otherwise run those requests to their end. Bounded by `closeWait`.
            closers.append(continuation)
            if closeBy == nil { closeBy = clock.now + Self.closeWait }
        }
    }

    private func nextToken() -> UInt64 {
        lastToken += 1
        return lastToken
    }

    /// Hands the core's outbox to the socket until it takes no more (no broker connected,
    /// or its queue toward the broker is full).
    private func flush() throws(ZMQError) {
        while let message = core.nextMessage, try socket.send(message.encoded()) {
            core.messageSent(now: clock.now)
            if case .ping = message { registry.prune() }
        }
    }

    private func receive() throws(ZMQError) {
        for _ in 0..<Self.receiveBudget {
            guard let frames = try socket.receiveFrames() else { return }
            // A message that does not decode cannot be attributed to anything.
            guard let message = try? BrokerToClientMessage(frames: frames) else {
                core.receivedMalformed(now: clock.now)
                continue
            }
            try perform(core.received(message, now: clock.now))
        }
    }

    // MARK: Actions

    private func perform(_ actions: [ClientAction]) throws(ZMQError) {
        for action in actions {
            if case .reconnect = action {
                socket.close()
                socket = try Self.connect(context, endpoint, curve)
            } else {
                settle(action)
            }
        }
    }

    /// Performs an action that is not about the socket: hands an event or an answer over.
    private func settle(_ action: ClientAction) {
        switch action {
        case .deliver(let token, let event, let terminal):
            // The channel, not this loop, decides whether the consumer gets it (strict cancel).
            requests[token]?.deliver(event, terminal: terminal)
            if terminal { requests[token] = nil }
        case .fail(let token, let error):
            requests.removeValue(forKey: token)?.fail(error)
        case .answerCancel(let token, let result):
            cancelWaiters.removeValue(forKey: token)?.resume(returning: result)
        case .answerStatus(let token, let result):
            statusWaiters.removeValue(forKey: token)?.resume(returning: result)
        case .digestsUnused(let unused):
            registry.digestsUnused = unused
        case .reconnect:
            preconditionFailure("reconnect is performed by perform(_:)")
        }
    }

    // MARK: Closing

    /// Refuses further commands, fails everything outstanding and closes the socket; then
    /// resumes the `close()` calls waiting for it.
    private func shutDown(_ error: EnlargerClientError, then closers: [CheckedContinuation<Void, Never>]) {
        var closers = closers
        for mail in registry.markClosed() {
            switch mail {
            case .submit(let channel, _, _): channel.fail(error)
            case .cancel(_, let waiter): waiter?.resume(returning: .failure(error))
            case .status(let waiter): waiter.resume(returning: .failure(error))
            case .close(let continuation): closers.append(continuation)
            }
        }
        // Closing connects nothing: every action hands something over.
        for action in core.close(failing: error) { settle(action) }
        socket.close()
        running = false
        for closer in closers { closer.resume() }
    }
}
