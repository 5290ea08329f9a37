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
    private var routes: [String: [Route]] = [:]
    /// Numbers the messages handed to the socket, so a SyncReply is matched against the
    /// Submits sent before its Sync.
    private var sendSerial: UInt64 = 0
    /// Syncs sent and not answered yet: nonce → the serial they were sent at.
    private var pendingSyncs: [UInt64: UInt64] = [:]
    private var nextSyncNonce: UInt64 = 1
    private var lastSync: ContinuousClock.Instant
    /// The broker's input limit from its Pong, once known.
    private var brokerMaxInputBytes: Int?

    /// One submitted request as the I/O thread tracks it until its terminal event.
    private final class Route {
        let channel: RequestChannel
        var submit: Enlarger_V1_Submit
        let payload: SubmitPayload
        /// When the client gives up on hearing the end from the broker.
        let deadline: ContinuousClock.Instant?
        /// `sendSerial` when the Submit was handed to the socket; nil while it waits.
        var sentSerial: UInt64?
        /// The broker accepted it (once; a resubmission is not announced again).
        var accepted = false
        var degradedDelivered = false

        init(channel: RequestChannel, submit: Enlarger_V1_Submit, payload: SubmitPayload,
             deadline: ContinuousClock.Instant?) {
            self.channel = channel
            self.submit = submit
            self.payload = payload
            self.deadline = deadline
        }
    }
    /// Messages not yet accepted by the socket: with `ZMQ_IMMEDIATE`, nothing is queued
    /// toward a broker that is not connected. A Submit carries its route, to stamp it sent.
    private var outbox: [(message: OutgoingMessage<Message>, route: Route?)] = []
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
        socket = try Self.connect(context, endpoint, configuration.curve)
        lastHeard = clock.now
        lastSent = clock.now
        lastSync = clock.now
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
        let nextSync = hasSentRoutes ? lastSync + configuration.syncInterval : nil
        let wake = busySince.map {
            [silenceDeadline(since: $0), nextPing, nextSync, earliestDeadline].compactMap { $0 }.min()!
        }
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

    private var hasSentRoutes: Bool {
        routes.values.contains { $0.contains { $0.sentSerial != nil } }
    }

    private var earliestDeadline: ContinuousClock.Instant? {
        routes.values.joined().compactMap(\.deadline).min()
    }

    private func checkLiveness() throws(ZMQError) {
        guard let busySince else { return }
        let now = clock.now
        if now >= silenceDeadline(since: busySince) {
            try startOver(failing: heardOnThisSocket ? .brokerLost : .brokerUnreachable)
            return
        }
        try expireDeadlines(now: now)
        if outbox.isEmpty, hasSentRoutes, now - lastSync >= configuration.syncInterval {
            try sendSync(now: now)
        }
        if outbox.isEmpty, now - lastSent >= pingInterval {
            // A Ping the socket cannot take now (no broker connected) is simply skipped.
            if try socket.send(ClientToBrokerMessage<Message>.ping.encoded()) { sendSerial += 1 }
            lastSent = now
            registry.prune()
        }
    }

    /// Requests whose timeout passed without an end from the broker (which would have sent
    /// DEADLINE_EXCEEDED itself, had it been reachable) fail here, and the broker is asked
    /// to cancel them in case it is still working on them.
    private func expireDeadlines(now: ContinuousClock.Instant) throws(ZMQError) {
        for (id, list) in routes {
            for route in list where route.deadline.map({ now >= $0 }) == true {
                route.channel.fail(.failed(.deadlineExceeded, "no end heard from the broker within the request's timeout"))
                remove(route, id: id)
                var cancel = Enlarger_V1_Cancel()
                cancel.requestID = id
                cancelWaiters[id, default: []].append(nil)
                outbox.append((ClientToBrokerMessage.cancel(cancel).encoded(), nil))
            }
        }
    }

    /// Asks the broker which of the requests sent so far it still holds.
    private func sendSync(now: ContinuousClock.Instant) throws(ZMQError) {
        let ids = routes.filter { $0.value.contains { $0.sentSerial != nil } }.keys.sorted()
        lastSync = now
        var start = 0
        while start < ids.count {
            let chunk = ids[start..<min(start + WireLimits.maxSyncRequestIDs, ids.count)]
            start += chunk.count
            var sync = Enlarger_V1_Sync()
            sync.requestIds = Array(chunk)
            sync.nonce = nextSyncNonce
            nextSyncNonce += 1
            // Sent directly (the outbox is empty): its serial is then exactly what it saw.
            guard try socket.send(ClientToBrokerMessage<Message>.sync(sync).encoded()) else { return }
            sendSerial += 1
            pendingSyncs[sync.nonce] = sendSerial
            lastSent = now
        }
    }

    // MARK: Sending

    private func flush() throws(ZMQError) {
        while let next = outbox.first, try socket.send(next.message) {
            outbox.removeFirst()
            sendSerial += 1
            next.route?.sentSerial = sendSerial
            lastSent = clock.now
        }
    }

    private func handle(_ mail: ClientMail) throws(ZMQError) {
        switch mail {
        case .submit(let channel, let submit, let payload):
            let limit = brokerMaxInputBytes ?? configuration.maxInputBytes
            guard payload.frame.count <= limit else {
                // Sent anyway, an oversize frame would make libzmq drop the connection.
                channel.fail(.rejected(.tooLarge, "input of \(payload.frame.count) bytes exceeds the broker's limit of \(limit)"))
                return
            }
            let deadline = submit.deadlineMs == 0 ? nil
                : clock.now + .milliseconds(submit.deadlineMs) + configuration.heartbeatInterval
            let route = Route(channel: channel, submit: submit, payload: payload, deadline: deadline)
            routes[channel.id, default: []].append(route)
            outbox.append((ClientToBrokerMessage.submit(submit, image: payload.frame).encoded(), route))
        case .cancel(let id, let waiter):
            var cancel = Enlarger_V1_Cancel()
            cancel.requestID = id
            cancelWaiters[id, default: []].append(waiter)
            outbox.append((ClientToBrokerMessage.cancel(cancel).encoded(), nil))
        case .status(let waiter):
            statusWaiters.append(waiter)
            outbox.append((ClientToBrokerMessage<Message>.statusRequest.encoded(), nil))
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
            adoptInterval(accepted.heartbeatIntervalMs)
            // The oldest route not yet accepted (a resubmitted one was, and its consumer saw it).
            guard let route = routes[accepted.requestID]?.first else { return }
            if !route.accepted {
                route.accepted = true
                route.channel.deliver(.accepted, terminal: false)
            }
        case .started(let started):
            routes[started.requestID]?.first?.channel.deliver(.started(attempt: Int(started.attempt)), terminal: false)
        case .result(let result, let image):
            guard let route = routes[result.requestID]?.first else { return }
            switch RequestEvent.reading(result, image: image) {
            case .success(let event):
                if case .degraded = event {
                    // After a resubmission only the final may come; a second degraded never.
                    guard !route.degradedDelivered else { return }
                    route.degradedDelivered = true
                }
                route.channel.deliver(event, terminal: result.terminal)
                if result.terminal { finishRoute(result.requestID) }
            case .failure(let violation):
                route.channel.fail(violation)
                finishRoute(result.requestID)
            }
        case .failed(let failed):
            if failed.code == .duplicateID {
                // Answers only the duplicate Submit: the newest route with the id that was
                // not accepted (the live one, accepted earlier, is untouched).
                guard let route = routes[failed.requestID]?.last(where: { !$0.accepted }) else { return }
                route.channel.fail(.duplicateID(failed.message))
                remove(route, id: failed.requestID)
            } else {
                end(failed.requestID, .failed(.init(failed.code), failed.message))
            }
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
            adoptInterval(pong.heartbeatIntervalMs)
            if pong.maxInputBytes > 0 { brokerMaxInputBytes = Int(clamping: pong.maxInputBytes) }
            try noteBrokerInstance(pong.brokerInstance)
        case .syncReply(let reply):
            // A new broker instance knows none of the ids: resubmit (or fail) them as such.
            try noteBrokerInstance(reply.brokerInstance)
            guard let serial = pendingSyncs.removeValue(forKey: reply.nonce) else { return }
            // Syncs are answered in order: an older one without a reply was lost.
            pendingSyncs = pendingSyncs.filter { $0.key > reply.nonce }
            for id in Set(reply.unknownRequestIds) {
                for route in routes[id] ?? [] where (route.sentSerial ?? .max) < serial {
                    route.channel.fail(.failed(
                        .requestLost, "the broker no longer holds this request; its end was lost (connection reset?)"))
                    remove(route, id: id)
                }
            }
        case .error:
            // A sign of life only: an Error names no request, so there is nobody to tell.
            break
        }
    }

    /// The broker's heartbeat interval applies at once: a broker with a shorter one than
    /// ours would otherwise judge this client silent before its first Ping.
    private func adoptInterval(_ milliseconds: UInt32) {
        guard milliseconds > 0 else { return }
        brokerInterval = .milliseconds(milliseconds)
    }

    /// A broker that restarted on the same endpoint answers Pings like the old one but has
    /// forgotten every request: when its instance number changes, whatever is outstanding
    /// is submitted again (or fails with `.brokerLost`) instead of waiting forever.
    private func noteBrokerInstance(_ instance: UInt64) throws(ZMQError) {
        guard instance != 0 else { return }  // a broker that does not say
        if let known = brokerInstance, known != instance {
            if configuration.resubmitAfterBrokerRestart {
                try resubmitAll()
            } else {
                try startOver(failing: .brokerLost)
            }
        }
        brokerInstance = instance
    }

    /// Sends every unfinished request again to the new broker instance, in the order they
    /// were submitted; waiting cancels fail with `.brokerLost` (their requests were
    /// cancelled locally and are not resubmitted), status requests are asked again.
    /// A request whose degraded result was delivered asks for the final result only.
    private func resubmitAll() throws(ZMQError) {
        for waiter in cancelWaiters.values.joined() { waiter?.resume(returning: .failure(.brokerLost)) }
        cancelWaiters.removeAll()
        pendingSyncs.removeAll()
        outbox.removeAll()
        // A status request may have gone to either instance; asking again is harmless (an
        // answer nobody waits for is dropped).
        for _ in statusWaiters {
            outbox.append((ClientToBrokerMessage<Message>.statusRequest.encoded(), nil))
        }
        let all = routes.values.joined().sorted { ($0.sentSerial ?? .max) < ($1.sentSerial ?? .max) }
        for route in all {
            if route.channel.isCancelled {
                // Cancelled locally: nothing more is delivered, and the new broker never
                // heard of it.
                remove(route, id: route.channel.id)
                continue
            }
            if route.degradedDelivered { route.submit.delivery = .final }
            route.sentSerial = nil
            outbox.append((ClientToBrokerMessage.submit(route.submit, image: route.payload.frame).encoded(), route))
        }
    }

    /// Fails everything outstanding and connects afresh, so that nothing from the old
    /// conversation reaches later requests.
    private func startOver(failing error: EnlargerClientError) throws(ZMQError) {
        failOutstanding(error)
        socket.close()
        socket = try Self.connect(context, endpoint, configuration.curve)
        heardOnThisSocket = false
        busySince = nil
        brokerInstance = nil
    }

    /// Ends the oldest request with this id with `error`.
    private func end(_ id: String, _ error: EnlargerClientError) {
        guard let route = routes[id]?.first else { return }
        route.channel.fail(error)
        finishRoute(id)
    }

    private func finishRoute(_ id: String) {
        routes[id]?.removeFirst()
        if routes[id]?.isEmpty == true { routes[id] = nil }
    }

    private func remove(_ route: Route, id: String) {
        routes[id]?.removeAll { $0 === route }
        if routes[id]?.isEmpty == true { routes[id] = nil }
    }

    // MARK: Failing and closing

    /// Fails every request and waiting call with `error` and forgets them.
    private func failOutstanding(_ error: EnlargerClientError) {
        for route in routes.values.joined() { route.channel.fail(error) }
        pendingSyncs.removeAll()
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
