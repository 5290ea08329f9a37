import EnlargerProtocol
import EnlargerTransport
import Imaging
import ZeroMQ

/// The client's I/O thread: the only code that touches its DEALER socket.
///
/// It sends what callers post (queueing it while no broker connection is up), routes the
/// broker's messages to requests and waiting calls, pings while anything is outstanding,
/// and fails everything outstanding when the broker stays silent too long.
final class ClientLoop: @unchecked Sendable {
    // @unchecked: created on the caller's thread, then used only by the I/O thread it is
    // handed to (starting a thread is a full memory barrier, as libzmq asks).
    private let endpoint: String
    private let configuration: EnlargerClient.Configuration
    private let registry: RequestRegistry
    private let context: Context
    private let clock = ContinuousClock()
    private var socket: Socket
    private var running = true

    /// Each id's requests in the order their Submits were sent. The broker answers a
    /// connection's messages in order, so a frame about an id belongs to the oldest one.
    private var routes: [String: [RequestChannel]] = [:]
    /// Messages not yet accepted by the socket: with `ZMQ_IMMEDIATE`, nothing is queued
    /// toward a broker that is not connected.
    private var outbox: [OutgoingMessage<Message>] = []
    /// Cancels sent and not yet acknowledged, per id in sending order.
    private var cancelWaiters: [String: [CancelWaiter?]] = [:]
    private var statusWaiters: [StatusWaiter] = []

    // Liveness: while anything is outstanding the broker must be heard from at least once
    // per `silenceLimit`, counting from the last message or from when the wait began.
    private var heardOnThisSocket = false
    private var lastHeard: ContinuousClock.Instant
    private var busySince: ContinuousClock.Instant?
    private var lastSent: ContinuousClock.Instant
    /// The broker's heartbeat interval from its last Pong: the client must not be quieter.
    private var brokerInterval: Duration?
    /// The broker process this client has been talking to (from Pong and Accepted).
    private var brokerInstance: UInt64?

    // Messages handled per readiness of the socket before the mailbox gets a turn.
    private static let receiveBudget = 256

    init(endpoint: String, configuration: EnlargerClient.Configuration, registry: RequestRegistry) throws(ZMQError) {
        self.endpoint = endpoint
        self.configuration = configuration
        self.registry = registry
        context = try Context()
        socket = try Self.connect(context, endpoint)
        lastHeard = clock.now
        lastSent = clock.now
    }

    private static func connect(_ context: Context, _ endpoint: String) throws(ZMQError) -> Socket {
        let socket = try Socket(context, .dealer)
        try socket.set(.immediate(true))
        try socket.connect(endpoint)
        return socket
    }

    private var silenceLimit: Duration { configuration.heartbeatInterval * configuration.missedHeartbeats }

    private var pingInterval: Duration {
        min(configuration.heartbeatInterval, brokerInterval ?? configuration.heartbeatInterval)
    }

    private var isBusy: Bool {
        !routes.isEmpty || !outbox.isEmpty || !cancelWaiters.isEmpty || !statusWaiters.isEmpty
    }

    // MARK: Main loop

    /// Serves until `close`; a ZeroMQ failure closes the client with `.transport`.
    func run() {
        do {
            while running { try turn() }
        } catch {
            shutDown(.transport(error), then: [])
        }
    }

    private func turn() throws(ZMQError) {
        let now = clock.now
        if isBusy { busySince = busySince ?? now } else { busySince = nil }
        var poller = Poller()
        poller.register(fileDescriptor: registry.mailbox.fileDescriptor)
        let socketIndex = poller.register(socket, for: outbox.isEmpty ? .readable : [.readable, .writable])
        // While messages wait in the outbox, socket writability is what matters, not pings.
        let nextPing = outbox.isEmpty ? lastSent + pingInterval : nil
        let wake = busySince.map { [silenceDeadline(since: $0), nextPing].compactMap { $0 }.min()! }
        _ = try poller.poll(timeout: wake.map { max(.zero, $0 - now) })

        for mail in registry.mailbox.takeAll() { try handle(mail) }
        guard running else { return }
        if poller.events(at: socketIndex).contains(.readable) { try receive() }
        try flush()
        try checkLiveness()
    }

    private func silenceDeadline(since busySince: ContinuousClock.Instant) -> ContinuousClock.Instant {
        max(busySince, lastHeard) + silenceLimit
    }

    private func checkLiveness() throws(ZMQError) {
        guard let busySince else { return }
        let now = clock.now
        if now >= silenceDeadline(since: busySince) {
            try startOver(failing: heardOnThisSocket ? .brokerLost : .brokerUnreachable)
        } else if outbox.isEmpty, now - lastSent >= pingInterval {
            // A Ping the socket cannot take now (no broker connected) is simply skipped.
            try socket.send(ClientToBrokerMessage<Message>.ping.encoded())
            lastSent = now
            registry.prune()
        }
    }

    // MARK: Sending

    private func flush() throws(ZMQError) {
        while let next = outbox.first, try socket.send(next) {
            outbox.removeFirst()
            lastSent = clock.now
        }
    }

    private func handle(_ mail: ClientMail) throws(ZMQError) {
        switch mail {
        case .submit(let channel, let submit, let payload):
            routes[channel.id, default: []].append(channel)
            outbox.append(ClientToBrokerMessage.submit(submit, image: payload.frame).encoded())
        case .cancel(let id, let waiter):
            var cancel = Enlarger_V1_Cancel()
            cancel.requestID = id
            cancelWaiters[id, default: []].append(waiter)
            outbox.append(ClientToBrokerMessage.cancel(cancel).encoded())
        case .status(let waiter):
            statusWaiters.append(waiter)
            outbox.append(ClientToBrokerMessage<Message>.statusRequest.encoded())
        case .close(let continuation):
            shutDown(.closed, then: [continuation])
        }
    }

    // MARK: Receiving

    private func receive() throws(ZMQError) {
        for _ in 0..<Self.receiveBudget {
            guard let frames = try socket.receiveFrames() else { return }
            heardOnThisSocket = true
            lastHeard = clock.now
            // A message that does not decode cannot be attributed to anything: dropped.
            guard let message = try? BrokerToClientMessage(frames: frames) else { continue }
            try handle(message)
        }
    }

    private func handle(_ message: BrokerToClientMessage<Message>) throws(ZMQError) {
        switch message {
        case .accepted(let accepted):
            try noteBrokerInstance(accepted.brokerInstance)
            routes[accepted.requestID]?.first?.deliver(.accepted, terminal: false)
        case .started(let started):
            routes[started.requestID]?.first?.deliver(.started(attempt: Int(started.attempt)), terminal: false)
        case .result(let result, let image):
            guard let channel = routes[result.requestID]?.first else { return }
            switch RequestEvent.reading(result, image: image) {
            case .success(let event):
                channel.deliver(event, terminal: result.terminal)
                if result.terminal { finishRoute(result.requestID) }
            case .failure(let violation):
                channel.fail(violation)
                finishRoute(result.requestID)
            }
        case .failed(let failed):
            let error: EnlargerClientError = failed.code == .duplicateID
                ? .duplicateID(failed.message) : .failed(.init(failed.code), failed.message)
            end(failed.requestID, error)
        case .cancelled(let cancelled):
            end(cancelled.requestID, .cancelled)
        case .rejected(let rejected):
            end(rejected.requestID, .rejected(.init(rejected.code), rejected.message))
        case .cancelAck(let ack):
            guard var waiters = cancelWaiters[ack.requestID], !waiters.isEmpty else { return }
            let waiter = waiters.removeFirst()
            cancelWaiters[ack.requestID] = waiters.isEmpty ? nil : waiters
            waiter?.resume(returning: .success(CancelResult(ack.outcome)))
        case .statusReply(let reply):
            guard !statusWaiters.isEmpty else { return }
            statusWaiters.removeFirst().resume(returning: .success(BrokerStatus(reply)))
        case .pong(let pong):
            if pong.heartbeatIntervalMs > 0 { brokerInterval = .milliseconds(pong.heartbeatIntervalMs) }
            try noteBrokerInstance(pong.brokerInstance)
        case .error:
            // A sign of life only: an Error names no request, so there is nobody to tell.
            break
        }
    }

    /// A broker that restarted on the same endpoint answers Pings like the old one but has
    /// forgotten every request: when its instance number changes, whatever is outstanding
    /// fails with `.brokerLost` instead of waiting forever.
    private func noteBrokerInstance(_ instance: UInt64) throws(ZMQError) {
        guard instance != 0 else { return }  // a broker that does not say
        if let known = brokerInstance, known != instance { try startOver(failing: .brokerLost) }
        brokerInstance = instance
    }

    /// Fails everything outstanding and connects afresh, so that nothing from the old
    /// conversation reaches later requests.
    private func startOver(failing error: EnlargerClientError) throws(ZMQError) {
        failOutstanding(error)
        socket.close()
        socket = try Self.connect(context, endpoint)
        heardOnThisSocket = false
        busySince = nil
        brokerInstance = nil
    }

    /// Ends the oldest request with this id with `error`.
    private func end(_ id: String, _ error: EnlargerClientError) {
        guard let channel = routes[id]?.first else { return }
        channel.fail(error)
        finishRoute(id)
    }

    private func finishRoute(_ id: String) {
        routes[id]?.removeFirst()
        if routes[id]?.isEmpty == true { routes[id] = nil }
    }

    // MARK: Failing and closing

    /// Fails every request and waiting call with `error` and forgets them.
    private func failOutstanding(_ error: EnlargerClientError) {
        for channel in routes.values.joined() { channel.fail(error) }
        routes.removeAll()
        outbox.removeAll()
        for waiter in cancelWaiters.values.joined() { waiter?.resume(returning: .failure(error)) }
        cancelWaiters.removeAll()
        for waiter in statusWaiters { waiter.resume(returning: .failure(error)) }
        statusWaiters.removeAll()
    }

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
        failOutstanding(error)
        socket.close()
        running = false
        for closer in closers { closer.resume() }
    }
}

extension RequestEvent {
    /// The event for a Result frame, or the failure that ends the request when the result
    /// is one this version cannot read (an unknown stage or format).
    fileprivate static func reading(
        _ result: Enlarger_V1_Result, image: Message
    ) -> Result<RequestEvent, EnlargerClientError> {
        let format: OutputFormat
        switch result.format {
        case .jpeg: format = .jpeg
        case .pnm: format = .pnm
        case .UNRECOGNIZED(let value):
            return .failure(.failed(.malformed, "the broker sent a result in unknown format \(value)"))
        }
        let encoded = EncodedImage(bytes: image.bytes, width: Int(result.width),
                                   height: Int(result.height), format: format)
        switch result.stage {
        case .degraded: return .success(.degraded(encoded))
        case .final: return .success(.final(encoded))
        case .unspecified, .UNRECOGNIZED:
            return .failure(.failed(.malformed, "the broker sent a result with stage \(result.stage)"))
        }
    }
}
