import EnlargerProtocol
import Timekeeping

/// The client's protocol decisions as a pure state machine: no sockets, no clock, no threads.
///
/// Feed it what happened — a caller's command (`submit`, `cancel`, `status`), a message from
/// the broker (`received`), the socket taking the next message (`messageSent`), the time
/// (`tick`) — and it returns the `ClientAction`s to perform, in order. What it wants sent
/// waits in its outbox until the socket takes it (`nextMessage`). `ClientLoop` is the
/// poll-and-perform loop around it; tests drive it directly with a hand-made clock.
///
/// Rules, each decided here and nowhere else:
/// - **One end per request.** Every request gets exactly one terminal action (a terminal
///   `deliver`, or `fail`) and nothing after it.
/// - **One request per id on the wire.** A request whose id still belongs to an earlier one
///   of this client (cancelled, timed out, or given up with a silent connection, the broker's
///   end not heard yet) waits, unsent, until that end is heard: the terminal frame, the
///   answer to its Cancel, or a Sync. So a frame about an id belongs to the one request the
///   broker can be talking about, even after a reset lost frames. Reusing an id at once after
///   `cancel(id)` costs one round trip. And since the broker accepts a request before it
///   says anything else about it, a frame about an id whose request has not been accepted
///   is about another one (a Sync moves every request of this identity with a named id to
///   the syncing connection, another process's too): it is dropped.
/// - **Degraded, then final.** A degraded result is delivered at most once, and only before
///   the final one.
/// - **Liveness.** While anything is outstanding, the broker must be heard at least once per
///   `missedHeartbeats` heartbeat intervals, counted from its last message or from when the
///   wait began; otherwise everything outstanding fails (`.brokerLost`, or
///   `.brokerUnreachable` when nothing was ever heard on the connection) and the loop
///   connects afresh. A Ping goes out whenever the client has been quiet for its heartbeat
///   interval, or for the broker's if that is shorter (from Accepted or Pong).
/// - **Sync.** Every `syncInterval`, while anything the socket took waits for an answer, the
///   broker is asked which of the requests it holds: the others fail `.requestLost`. A call
///   whose answer should have come before the Sync's reply (the broker answers in order)
///   was lost with a reset connection: a status call is asked again, and so is a cancel
///   unless a later request with the id is on the wire (which a second Cancel would hit);
///   that one fails `.requestLost`.
/// - **Timeouts.** A request with a timeout fails `.deadlineExceeded` one heartbeat interval
///   after it, should the broker not have ended it by then (unreachable); the broker is asked
///   to cancel it, and its late frames are absorbed until the broker's end.
/// - **Size.** An image over the broker's limit (from its Pong, else the configured one) is
///   refused before it is sent: libzmq would drop the whole connection for it.
/// - **Broker restarts.** A new broker instance knows none of the requests sent to the old
///   one. When its instance number first shows, a Sync asks it at once which it holds; those
///   it does not, sent while an older instance held them, are submitted again in submission
///   order (a request whose degraded result was delivered asks for the final one only), so
///   nothing the new instance got before the client noticed is sent twice. With that turned
///   off, everything outstanding fails `.brokerLost` at once.
///
/// **Strict cancel is not decided here.** The core learns of a cancel when the loop gets to
/// its mail, after `cancel(id)` has already marked the request's `RequestChannel`, which
/// alone decides what reaches the consumer. The core sends the Cancel, keeps the request
/// until the broker's end of it is heard (so that its late frames are not taken for a later
/// request with the same id), and never submits it again.
///
/// `Payload` is the frame type: ZeroMQ messages in the loop, `[UInt8]` in tests. Not
/// thread-safe: one thread (the loop's) owns it.
struct ClientCore<Payload: FrameBytes> {
    typealias Action = ClientAction
    typealias Instant = ContinuousClock.Instant

    struct Configuration {
        var heartbeatInterval: Duration
        var missedHeartbeats: Int
        var syncInterval: Duration
        var resubmitAfterBrokerRestart: Bool
        /// The input limit until the broker's own is known.
        var maxInputBytes: Int

        var silenceLimit: Duration { heartbeatInterval * missedHeartbeats }
    }

    // MARK: - State
    //
    // A route is one submitted request, from its Submit until the broker's end of it is
    // heard. Each id's routes are kept in submission order: the first is on the wire (its
    // Submit in the outbox or sent) and every frame about the id is about it; the others
    // wait, unsent, for it to end. A route outlives its consumer's interest when the caller
    // cancelled it, when its local deadline ended it, or when the connection it went out on
    // was given up (`ended`): it then only absorbs the broker's last frames about it.
    //
    // A call is a Cancel or a StatusRequest waiting for its answer; the answers come in the
    // order the socket took the messages, so calls are kept in that order (per id for
    // cancels). Everything the socket took and that waits for an answer carries the send
    // serial it went out at, to be judged by the next Sync reply.

    /// One submitted request, until the broker's end of it is heard.
    struct Route {
        let token: RequestToken
        /// Submission order, kept when the request is submitted again.
        let order: UInt64
        var submit: Enlarger_V1_Submit
        let image: Payload
        /// When the client stops waiting for the broker's end.
        var deadline: Instant?
        /// `sendSerial` when the socket took its Submit; nil while it waits (in the outbox, or
        /// behind an earlier route with the id).
        var sentSerial: UInt64?
        /// The broker accepted this submission of it (its Accepted arrived). Until then, a
        /// frame about the id other than the answer to the Submit is about another request.
        var accepted = false
        /// The consumer was told `.accepted` (once: a resubmission is not announced again).
        var announced = false
        /// The broker instance believed to hold it: from its Accepted, else the one known
        /// when it was sent.
        var instance: UInt64?
        var degradedDelivered = false
        var placeholderDelivered = false
        /// The caller cancelled it: it is never submitted again.
        var cancelled = false
        /// Its terminal action was given already (its local deadline passed, or the
        /// connection it went out on was given up).
        var ended = false
    }

    /// A Cancel or a StatusRequest waiting for the broker's answer.
    struct Call {
        /// Who waits; nil for a cancel nobody waits for.
        let token: CallToken?
        /// `sendSerial` when the socket took it; nil while it waits in the outbox.
        var sentSerial: UInt64?

        /// A stable order for calls failed together (the loop's tokens), so runs replay exactly.
        var order: UInt64 { token?.value ?? .max }
    }

    /// A message in the outbox, and what to note when the socket takes it.
    struct Outgoing {
        enum Note {
            case route(String, RequestToken)
            /// The first call for the id not sent yet (calls wait in outbox order).
            case cancel(String)
            case status
            case sync(nonce: UInt64)
            case ping
        }

        let message: ClientToBrokerMessage<Payload>
        let note: Note
    }

    // State. Internal rather than private only so that the other ClientCore files can reach
    // it; nothing outside the core writes it.
    let configuration: Configuration
    var routes: [String: [Route]] = [:]
    var routeIDs: [RequestToken: String] = [:]
    var deadlines = DeadlineHeap<RequestToken, ContinuousClock.Instant>()
    var nextOrder: UInt64 = 0
    var outbox = Backlog<Outgoing>()
    var cancelCalls: [String: [Call]] = [:]
    var statusCalls: [Call] = []
    /// Routes and calls taken by the socket and not answered yet: a Sync is due only while
    /// there are some.
    var awaitingAnswer = 0
    /// Numbers the messages the socket takes, so that a SyncReply is judged against exactly
    /// what went out before its Sync.
    var sendSerial: UInt64 = 0
    /// Syncs sent and not answered yet: nonce → the serial they went out at.
    var pendingSyncs: [UInt64: UInt64] = [:]
    var nextSyncNonce: UInt64 = 1
    var lastSync: Instant

    // Liveness.
    var heardOnConnection = false
    var lastHeard: Instant
    /// Since when something has been outstanding; nil while idle.
    var busySince: Instant?
    var lastSent: Instant
    /// The broker's heartbeat interval from its Accepted or Pong: the client must not be quieter.
    var brokerInterval: Duration?
    /// The broker process this client talks to (from Accepted, Pong and SyncReply).
    var brokerInstance: UInt64?
    /// The broker's input limit from its Pong, once known.
    var brokerMaxInputBytes: Int?
    /// Whether the latest Accepted said that the broker neither caches nor shares, so that
    /// an inline digest would be computed for nothing.
    var digestsUnused = false
    private(set) var isClosed = false

    init(configuration: Configuration, now: Instant) {
        self.configuration = configuration
        lastHeard = now
        lastSent = now
        lastSync = now
    }

    // MARK: - Introspection

    /// The message the socket should take next, if any. Once the socket has taken it, call
    /// `messageSent`.
    var nextMessage: ClientToBrokerMessage<Payload>? { outbox.first?.message }

    /// Whether nothing is outstanding: no request, call or message.
    var isIdle: Bool {
        routes.isEmpty && outbox.isEmpty && cancelCalls.isEmpty && statusCalls.isEmpty
    }

    var pingInterval: Duration {
        min(configuration.heartbeatInterval, brokerInterval ?? configuration.heartbeatInterval)
    }

    /// The earliest time `tick` has something to do (a Ping, a Sync, a request's deadline, the
    /// silence limit); nil while idle. Nothing is due before it, so the loop may sleep until
    /// then unless a caller or the socket wakes it.
    var nextWakeup: Instant? {
        guard let busySince, !isClosed else { return nil }
        var wakeup = max(busySince, lastHeard) + configuration.silenceLimit
        if let deadline = deadlines.earliest { wakeup = min(wakeup, deadline) }
        // While messages wait, the socket's writability is what matters, not Pings or Syncs.
        if outbox.isEmpty {
            wakeup = min(wakeup, lastSent + pingInterval)
            if awaitingAnswer > 0 { wakeup = min(wakeup, lastSync + configuration.syncInterval) }
        }
        return wakeup
    }

    // MARK: - Commands from callers

    /// A caller submitted a request (already validated by `ResizeRequest.wireSubmit`).
    mutating func submit(_ token: RequestToken, _ submit: Enlarger_V1_Submit, image: Payload,
                         now: Instant) -> [Action] {
        precondition(routeIDs[token] == nil, "\(token) submitted twice")
        guard !isClosed else { return [.fail(token, .closed)] }
        let limit = brokerMaxInputBytes ?? configuration.maxInputBytes
        guard image.count <= limit else {
            // Sent anyway, an oversize frame would make libzmq drop the connection.
            return [.fail(token, .rejected(.tooLarge, "input of \(image.count) bytes exceeds the broker's limit of \(limit)"))]
        }
        let deadline = submit.deadlineMs == 0 ? nil
            : now + .milliseconds(submit.deadlineMs) + configuration.heartbeatInterval
        let id = submit.requestID
        nextOrder += 1
        let waits = routes[id] != nil
        routes[id, default: []].append(Route(token: token, order: nextOrder, submit: submit, image: image, deadline: deadline))
        routeIDs[token] = id
        if let deadline { deadlines.insert(token, at: deadline) }
        if !waits { queueSubmit(id) }
        noteBusy(now: now)
        return []
    }

    /// A caller cancelled `id` (its `RequestChannel`s are marked already). `waiter`, if any,
    /// gets the broker's answer.
    mutating func cancel(_ id: String, waiter: CallToken?, now: Instant) -> [Action] {
        guard !isClosed else { return waiter.map { [.answerCancel($0, .failure(.closed))] } ?? [] }
        var actions: [Action] = []
        if routes[id] != nil {
            routes[id]![0].cancelled = true
            // The ones waiting behind it were never sent: they simply end.
            while routes[id]!.count > 1 {
                actions.append(.fail(routes[id]![1].token, .cancelled))
                removeRoute(id, at: 1)
            }
        }
        queueCancel(id, Call(token: waiter))
        noteBusy(now: now)
        return actions
    }

    /// A caller asked for the broker's status.
    mutating func status(_ waiter: CallToken, now: Instant) -> [Action] {
        guard !isClosed else { return [.answerStatus(waiter, .failure(.closed))] }
        statusCalls.append(Call(token: waiter))
        outbox.append(Outgoing(message: .statusRequest, note: .status))
        noteBusy(now: now)
        return []
    }

    /// Cancels not yet answered by the broker (sent or still to send).
    var cancelsOutstanding: Bool { cancelCalls.values.contains { !$0.isEmpty } }

    /// The client is closing (or its socket failed): everything outstanding fails with
    /// `error`, and every later command fails `.closed`.
    mutating func close(failing error: EnlargerClientError) -> [Action] {
        guard !isClosed else { return [] }
        var actions: [Action] = []
        failAll(error, &actions)
        isClosed = true
        busySince = nil
        return actions
    }

    // MARK: - The socket

    /// The socket took `nextMessage`.
    mutating func messageSent(now: Instant) {
        guard let sent = outbox.removeFirst() else { preconditionFailure("messageSent with an empty outbox") }
        sendSerial += 1
        lastSent = now
        switch sent.note {
        case .route(let id, let token):
            guard let index = routes[id]?.firstIndex(where: { $0.token == token }) else { break }
            routes[id]![index].sentSerial = sendSerial
            routes[id]![index].instance = brokerInstance
            awaitingAnswer += 1
        case .cancel(let id):
            guard let index = cancelCalls[id]?.firstIndex(where: { $0.sentSerial == nil }) else { break }
            cancelCalls[id]![index].sentSerial = sendSerial
            awaitingAnswer += 1
        case .status:
            guard let index = statusCalls.firstIndex(where: { $0.sentSerial == nil }) else { break }
            statusCalls[index].sentSerial = sendSerial
            awaitingAnswer += 1
        case .sync(let nonce):
            pendingSyncs[nonce] = sendSerial
        case .ping:
            break
        }
        noteBusy(now: now)
    }

    // MARK: - Helpers

    /// Puts the Submit of the id's first route in the outbox.
    mutating func queueSubmit(_ id: String) {
        let route = routes[id]![0]
        outbox.append(Outgoing(message: .submit(route.submit, image: route.image), note: .route(id, route.token)))
    }

    mutating func queueCancel(_ id: String, _ call: Call) {
        cancelCalls[id, default: []].append(call)
        var cancel = Enlarger_V1_Cancel()
        cancel.requestID = id
        outbox.append(Outgoing(message: .cancel(cancel), note: .cancel(id)))
    }

    /// Starts or stops the wait the silence limit counts from. Call at the end of every event.
    mutating func noteBusy(now: Instant) {
        if isIdle || isClosed {
            busySince = nil
        } else if busySince == nil {
            busySince = now
        }
    }
}

/// A first-in first-out queue whose `removeFirst` is O(1): the outbox may hold thousands of
/// Submits while no broker is connected. What it has handed out it no longer holds.
struct Backlog<Element> {
    private var elements: [Element?] = []
    private var head = 0

    var isEmpty: Bool { head == elements.count }
    var count: Int { elements.count - head }
    var first: Element? { isEmpty ? nil : elements[head] }

    mutating func append(_ element: Element) {
        elements.append(element)
    }

    mutating func removeFirst() -> Element? {
        guard !isEmpty else { return nil }
        let element = elements[head]
        elements[head] = nil
        head += 1
        if head == elements.count {
            elements.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 1024, head * 2 >= elements.count {
            elements.removeFirst(head)
            head = 0
        }
        return element
    }

    mutating func removeAll() {
        elements.removeAll()
        head = 0
    }
}
