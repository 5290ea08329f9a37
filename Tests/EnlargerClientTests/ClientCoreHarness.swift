import EnlargerProtocol
import XCTest

@testable import Enlarger

/// Drives a `ClientCore<[UInt8]>` with a hand-made clock, as `ClientLoop` would, and records
/// what it does. Messages go through the protocol's own encoder and decoder both ways, so
/// framing is checked too.
struct ClientCoreHarness {
    typealias Bytes = [UInt8]
    typealias Core = ClientCore<Bytes>

    var core: Core
    var now: ContinuousClock.Instant
    /// Whether the socket takes messages (a broker is connected).
    var connected = true
    /// Every action so far, in order (see `summary`).
    private(set) var actions: [ClientAction] = []
    /// Every message the socket took, in order.
    private(set) var sent: [ClientToBrokerMessage<Bytes>] = []
    private var lastToken: UInt64 = 0

    static let image: Bytes = [0xFF, 0xD8, 0xFF, 0xD9]

    init(heartbeat: Duration = .seconds(1), missedHeartbeats: Int = 3, sync: Duration = .seconds(2),
         resubmit: Bool = true, maxInputBytes: Int = 1 << 20) {
        now = ContinuousClock.now
        core = Core(configuration: .init(heartbeatInterval: heartbeat, missedHeartbeats: missedHeartbeats,
                                         syncInterval: sync, resubmitAfterBrokerRestart: resubmit,
                                         maxInputBytes: maxInputBytes), now: now)
    }

    // MARK: Callers

    @discardableResult
    mutating func submit(_ id: String, image: Bytes = Self.image, delivery: Enlarger_V1_Delivery = .progressive,
                         timeoutMs: UInt32 = 0) -> RequestToken {
        lastToken += 1
        let token = RequestToken(value: lastToken)
        var submit = Enlarger_V1_Submit()
        submit.requestID = id
        submit.spec.width = 100
        submit.delivery = delivery
        submit.deadlineMs = timeoutMs
        record(core.submit(token, submit, image: image, now: now))
        return token
    }

    /// A caller's cancel; `waits` as `cancel(_:)` does, or not, as `cancelNow(_:)`.
    @discardableResult
    mutating func cancel(_ id: String, waits: Bool = true) -> CallToken? {
        let token = waits ? CallToken(value: nextToken()) : nil
        record(core.cancel(id, waiter: token, now: now))
        return token
    }

    @discardableResult
    mutating func status() -> CallToken {
        let token = CallToken(value: nextToken())
        record(core.status(token, now: now))
        return token
    }

    mutating func close() {
        record(core.close(failing: .closed))
    }

    private mutating func nextToken() -> UInt64 {
        lastToken += 1
        return lastToken
    }

    // MARK: The broker and time

    /// A message from the broker, through the wire format; then the loop flushes.
    mutating func broker(_ message: BrokerToClientMessage<Bytes>) {
        let decoded = try! BrokerToClientMessage<Bytes>(frames: message.encoded().frames)
        record(core.received(decoded, now: now))
    }

    mutating func broker(_ messages: [BrokerToClientMessage<Bytes>]) {
        for message in messages { broker(message) }
    }

    /// Advances the clock and ticks, as the loop does after every wakeup.
    mutating func advance(by duration: Duration) {
        now = now + duration
        record(core.tick(now: now))
    }

    /// Advances in steps of `step`, the broker answering every Ping with a Pong.
    mutating func advance(by duration: Duration, step: Duration, pong: Enlarger_V1_Pong = Self.pong()) {
        var elapsed = Duration.zero
        while elapsed < duration {
            let before = sent.count
            advance(by: step)
            elapsed += step
            if sent[before...].contains(where: { if case .ping = $0 { true } else { false } }) { broker(.pong(pong)) }
        }
    }

    /// Hands the outbox to the socket while it takes messages.
    mutating func flush() {
        while connected, let message = core.nextMessage {
            sent.append(try! ClientToBrokerMessage<Bytes>(frames: message.encoded().frames))
            core.messageSent(now: now)
        }
    }

    private mutating func record(_ new: [ClientAction]) {
        actions += new
        flush()
    }

    /// Forgets what was done and sent so far.
    mutating func clear() {
        actions.removeAll()
        sent.removeAll()
    }

    // MARK: Broker messages

    static func accepted(_ id: String, instance: UInt64 = 1, intervalMs: UInt32 = 0) -> BrokerToClientMessage<Bytes> {
        var accepted = Enlarger_V1_Accepted()
        accepted.requestID = id
        accepted.brokerInstance = instance
        accepted.heartbeatIntervalMs = intervalMs
        return .accepted(accepted)
    }

    static func started(_ id: String, attempt: UInt32 = 1) -> BrokerToClientMessage<Bytes> {
        var started = Enlarger_V1_Started()
        started.requestID = id
        started.attempt = attempt
        return .started(started)
    }

    static func result(_ id: String, _ stage: Enlarger_V1_Stage, terminal: Bool, image: Bytes = [7]) -> BrokerToClientMessage<Bytes> {
        var result = Enlarger_V1_Result()
        result.requestID = id
        result.stage = stage
        result.terminal = terminal
        result.width = 10
        result.height = 8
        result.format = .jpeg
        return .result(result, image: image)
    }

    static func degraded(_ id: String) -> BrokerToClientMessage<Bytes> { result(id, .degraded, terminal: false) }
    static func final(_ id: String) -> BrokerToClientMessage<Bytes> { result(id, .final, terminal: true) }

    static func failed(_ id: String, _ code: Enlarger_V1_ErrorCode, _ message: String = "") -> BrokerToClientMessage<Bytes> {
        var failed = Enlarger_V1_Failed()
        failed.requestID = id
        failed.code = code
        failed.message = message
        return .failed(failed)
    }

    static func cancelled(_ id: String) -> BrokerToClientMessage<Bytes> {
        var cancelled = Enlarger_V1_Cancelled()
        cancelled.requestID = id
        return .cancelled(cancelled)
    }

    static func cancelAck(_ id: String, _ outcome: Enlarger_V1_CancelAck.Outcome) -> BrokerToClientMessage<Bytes> {
        var ack = Enlarger_V1_CancelAck()
        ack.requestID = id
        ack.outcome = outcome
        return .cancelAck(ack)
    }

    static func pong(instance: UInt64 = 1, intervalMs: UInt32 = 0, maxInputBytes: UInt64 = 0) -> Enlarger_V1_Pong {
        var pong = Enlarger_V1_Pong()
        pong.brokerInstance = instance
        pong.heartbeatIntervalMs = intervalMs
        pong.maxInputBytes = maxInputBytes
        return pong
    }

    static func syncReply(nonce: UInt64, unknown: [String], instance: UInt64 = 1) -> BrokerToClientMessage<Bytes> {
        var reply = Enlarger_V1_SyncReply()
        reply.nonce = nonce
        reply.unknownRequestIds = unknown
        reply.brokerInstance = instance
        return .syncReply(reply)
    }

    // MARK: Reading what happened

    /// The actions as short strings: "#1 accepted", "#1 started 1", "#1 degraded", "#1 final",
    /// "#1 fails brokerLost", "#2 cancel: cancelled", "#3 status", "#3 status fails closed",
    /// "reconnect".
    var summary: [String] { actions.map(Self.summary) }

    static func summary(_ action: ClientAction) -> String {
        switch action {
        case .deliver(let token, let event, let terminal):
            let name = switch event {
            case .accepted: "accepted"
            case .started(let attempt): "started \(attempt)"
            case .placeholder: terminal ? "placeholder (terminal)" : "placeholder"
            case .degraded: terminal ? "degraded (terminal)" : "degraded"
            case .final: terminal ? "final" : "final (not terminal)"
            case .info: terminal ? "info" : "info (not terminal)"
            case .download(let progress): "download \(progress.phase) \(progress.bytes)"
            }
            return "#\(token.value) \(name)"
        case .fail(let token, let error):
            return "#\(token.value) fails \(summary(error))"
        case .answerCancel(let token, .success(let outcome)):
            return "#\(token.value) cancel: \(outcome)"
        case .answerCancel(let token, .failure(let error)):
            return "#\(token.value) cancel fails \(summary(error))"
        case .answerStatus(let token, .success):
            return "#\(token.value) status"
        case .answerStatus(let token, .failure(let error)):
            return "#\(token.value) status fails \(summary(error))"
        case .digestsUnused(let unused):
            return "digests \(unused ? "unused" : "used")"
        case .reconnect:
            return "reconnect"
        }
    }

    static func summary(_ error: EnlargerClientError) -> String {
        switch error {
        case .failed(let code, _): "failed \(code)"
        case .rejected(let code, _): "rejected \(code)"
        case .duplicateID: "duplicateID"
        case .cancelled: "cancelled"
        case .invalidRequestID: "invalidRequestID"
        case .brokerUnreachable: "brokerUnreachable"
        case .brokerLost: "brokerLost"
        case .closed: "closed"
        case .transport: "transport"
        case .insecureEndpoint: "insecureEndpoint"
        case .batchFailed(let index, _, let reason): "batchFailed \(index) \(summary(reason))"
        }
    }

    /// What the socket took, as short strings: "submit a", "submit a final" (for a
    /// final-only delivery), "cancel a", "status", "ping", "sync a,b", "sync" (no ids).
    var sentSummary: [String] { sent.map(Self.summary) }

    /// Like `sentSummary`, without Pings.
    var sentRequests: [String] { sentSummary.filter { $0 != "ping" } }

    static func summary(_ message: ClientToBrokerMessage<Bytes>) -> String {
        switch message {
        case .submit(let submit, _): "submit \(submit.requestID)\(submit.delivery == .final ? " final" : "")"
        case .cancel(let cancel): "cancel \(cancel.requestID)"
        case .statusRequest: "status"
        case .ping: "ping"
        case .sync(let sync): sync.requestIds.isEmpty ? "sync" : "sync \(sync.requestIds.joined(separator: ","))"
        }
    }

    /// The nonce of the latest Sync sent.
    var lastSyncNonce: UInt64? {
        sent.reversed().lazy.compactMap { if case .sync(let sync) = $0 { sync.nonce } else { nil } }.first
    }
}
