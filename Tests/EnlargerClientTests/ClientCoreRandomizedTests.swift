import EnlargerProtocol
import ImageModel
import TestSupport
import XCTest

@testable import Enlarger

/// Random interleavings of callers' submits, cancels and status calls, a fake broker's
/// answers and work, lost frames, connection resets, broker silence and restarts, and
/// timeouts, against the rules the client must keep whatever the order. The consumers read
/// through real `RequestChannel`s, so strict cancel is checked where it is enforced. Each run
/// prints its seeds; `ENLARGER_SEED=<seed>` replays one with a trace of what happened, and
/// `ENLARGER_RUNS=<n>` runs more seeds than the default 300.
final class ClientCoreRandomizedTests: XCTestCase {
    func testRulesHoldUnderRandomInterleavings() {
        let environment = ProcessInfo.processInfo.environment
        let replay = environment["ENLARGER_SEED"].flatMap(UInt64.init)
        let base = replay ?? UInt64.random(in: 0...UInt64(UInt32.max))
        let runs: UInt64 = replay == nil ? environment["ENLARGER_RUNS"].flatMap(UInt64.init) ?? 300 : 1
        print("client core random interleavings: seeds \(base)…\(base + runs - 1)")
        var totals = ClientSimulation.Totals()
        for offset in 0..<runs {
            var simulation = ClientSimulation(seed: base + offset)
            simulation.traces = replay != nil
            simulation.run(steps: 400)
            totals.add(simulation.totals)
            if !simulation.violations.isEmpty {
                if replay != nil { print(simulation.trace.suffix(400).joined(separator: "\n")) }
                XCTFail("seed \(base + offset): \(simulation.violations.prefix(5).joined(separator: "; "))"
                        + (replay == nil ? " (replay with ENLARGER_SEED=\(base + offset) for a trace)" : ""))
                return
            }
        }
        print(totals.report)
        // The generator must actually reach the interesting cases (over many seeds).
        guard runs >= 100 else { return }
        XCTAssertGreaterThan(totals.finals, 0)
        XCTAssertGreaterThan(totals.degraded, 0)
        XCTAssertGreaterThan(totals.cancelsBeforeAccepted, 0)
        XCTAssertGreaterThan(totals.cancelsAfterAccepted, 0)
        XCTAssertGreaterThan(totals.heldBackByCancel, 0, "events that reached a cancelled channel")
        XCTAssertGreaterThan(totals.requestLost, 0)
        XCTAssertGreaterThan(totals.localTimeouts, 0)
        XCTAssertGreaterThan(totals.brokerDeadlines, 0)
        XCTAssertGreaterThan(totals.brokerLost, 0)
        XCTAssertGreaterThan(totals.refusedTooLarge, 0)
        XCTAssertGreaterThan(totals.rejectedTooLarge, 0)
        XCTAssertGreaterThan(totals.duplicateIDs, 0)
        XCTAssertGreaterThan(totals.resubmitted, 0)
        XCTAssertGreaterThan(totals.failedByRestart, 0)
        XCTAssertGreaterThan(totals.callsAskedAgain, 0)
    }

    /// The checker is not vacuous: the same runs, with events handed to the consumer
    /// directly, as a delivery path that forgot strict cancel would, are caught.
    func testTheCheckerCatchesADeliveryThatIgnoresCancel() {
        var caught = 0
        for seed: UInt64 in 1...40 {
            var simulation = ClientSimulation(seed: seed)
            simulation.bypassesChannels = true
            simulation.run(steps: 400)
            if simulation.violations.contains(where: { $0.contains("after cancel") }) { caught += 1 }
        }
        XCTAssertGreaterThan(caught, 20, "caught in \(caught) of 40 runs")
    }

    /// Each rule of the checker fires on a hand-made breach.
    func testTheCheckerCatchesBrokenRules() {
        var simulation = ClientSimulation(seed: 1)
        let token = simulation.addRequest(id: "x", delivery: .progressive)
        let other = simulation.addRequest(id: "y", delivery: .progressive)
        simulation.perform([.deliver(token, .final(ClientSimulation.result(.final, for: token)), terminal: true),
                            .deliver(token, .degraded(ClientSimulation.result(.degraded, for: token)), terminal: false),
                            .fail(token, .brokerLost),
                            .deliver(other, .final(ClientSimulation.result(.final, for: token)), terminal: true)])
        XCTAssert(simulation.violations.contains { $0.contains("after its terminal action") }, "\(simulation.violations)")
        XCTAssert(simulation.violations.contains { $0.contains("belongs to") }, "\(simulation.violations)")

        simulation = ClientSimulation(seed: 1)
        let cancelled = simulation.addRequest(id: "z", delivery: .progressive)
        simulation.callerCancels("z")
        simulation.observe(cancelled, .event(.accepted))
        let twice = simulation.addRequest(id: "w", delivery: .progressive)
        simulation.observe(twice, .event(.degraded(ClientSimulation.result(.degraded, for: twice))))
        simulation.observe(twice, .event(.degraded(ClientSimulation.result(.degraded, for: twice))))
        simulation.observe(twice, .event(.final(ClientSimulation.result(.final, for: twice))))
        simulation.observe(twice, .failure(.brokerLost))
        let silent = simulation.addRequest(id: "v", delivery: .final)
        simulation.observe(silent, .end)
        XCTAssert(simulation.violations.contains { $0.contains("after cancel") }, "\(simulation.violations)")
        XCTAssert(simulation.violations.contains { $0.contains("second degraded") }, "\(simulation.violations)")
        XCTAssert(simulation.violations.contains { $0.contains("after its end") }, "\(simulation.violations)")
        XCTAssert(simulation.violations.contains { $0.contains("ended without") }, "\(simulation.violations)")
    }
}

/// One seeded run: callers and consumers, the loop's part, the wire and a fake broker around
/// a real `ClientCore`.
struct ClientSimulation {
    typealias Bytes = [UInt8]
    typealias Instant = ContinuousClock.Instant

    struct Totals {
        var requests = 0, finals = 0, degraded = 0, cancels = 0, cancelsBeforeAccepted = 0, cancelsAfterAccepted = 0
        var heldBackByCancel = 0, requestLost = 0, localTimeouts = 0, brokerDeadlines = 0, brokerLost = 0
        var brokerUnreachable = 0, refusedTooLarge = 0, rejectedTooLarge = 0, duplicateIDs = 0, otherFailures = 0
        var resubmitted = 0, failedByRestart = 0, callsAskedAgain = 0, resets = 0, restarts = 0, freezes = 0
        var reconnects = 0

        mutating func add(_ other: Totals) {
            requests += other.requests
            finals += other.finals
            degraded += other.degraded
            cancels += other.cancels
            cancelsBeforeAccepted += other.cancelsBeforeAccepted
            cancelsAfterAccepted += other.cancelsAfterAccepted
            heldBackByCancel += other.heldBackByCancel
            requestLost += other.requestLost
            localTimeouts += other.localTimeouts
            brokerDeadlines += other.brokerDeadlines
            brokerLost += other.brokerLost
            brokerUnreachable += other.brokerUnreachable
            refusedTooLarge += other.refusedTooLarge
            rejectedTooLarge += other.rejectedTooLarge
            duplicateIDs += other.duplicateIDs
            otherFailures += other.otherFailures
            resubmitted += other.resubmitted
            failedByRestart += other.failedByRestart
            callsAskedAgain += other.callsAskedAgain
            resets += other.resets
            restarts += other.restarts
            freezes += other.freezes
            reconnects += other.reconnects
        }

        var report: String {
            """
              \(requests) requests: \(finals) finished (\(degraded) degraded results), \(cancels) cancelled by the caller \
            (\(cancelsBeforeAccepted) before Accepted, \(cancelsAfterAccepted) after; \(heldBackByCancel) events held back \
            by strict cancel)
              failures: \(requestLost) requestLost, \(localTimeouts) local timeouts, \(brokerDeadlines) broker deadlines, \
            \(brokerLost) brokerLost (\(failedByRestart) after a restart without resubmission), \(brokerUnreachable) \
            unreachable, \(refusedTooLarge) refused too large before sending, \(rejectedTooLarge) rejected too large by the \
            broker, \(duplicateIDs) duplicate ids, \(otherFailures) other
              network: \(resets) connection resets, \(restarts) broker restarts, \(freezes) broker freezes, \(reconnects) \
            reconnects, \(resubmitted) requests submitted again, \(callsAskedAgain) calls asked again
            """
        }
    }

    /// One request as its caller and consumer know it, and what the core did about it.
    struct Request {
        let token: RequestToken
        let id: String
        let delivery: Enlarger_V1_Delivery
        let channel: RequestChannel
        var cancelCalled = false
        var acceptedDelivered = false
        // The core's actions.
        var terminalActions = 0
        var degradedActions = 0
        var submitsSent = 0
        // What the consumer took.
        var consumerDegraded = false
        var consumerTerminal = false
        var consumerDone = false
    }

    enum Mail {
        case submit(RequestToken, Enlarger_V1_Submit, Bytes)
        case cancel(String, CallToken?)
        case status(CallToken)
    }

    /// What the fake broker holds for one live request.
    struct Live {
        let token: UInt64
        var owner: Int
        let delivery: Enlarger_V1_Delivery
        let deadline: Instant?
        var attempt: UInt32 = 0
        var degradedSent = false
    }

    static let heartbeat = Duration.milliseconds(100)
    static let missedHeartbeats = 3
    static let syncInterval = Duration.milliseconds(250)
    static let clientMaxInput = 64
    static let brokerMaxInput = 48
    static let ids = (0..<6).map { "r\($0)" }

    var random: SeededGenerator
    var violations: [String] = []
    var totals = Totals()
    /// Hands events to the consumer directly instead of through its `RequestChannel`: a
    /// delivery path that ignores strict cancel, for showing that the checker catches it.
    var bypassesChannels = false
    /// Whether to keep `trace`: what happened, one line per event, for replaying a failure.
    var traces = false
    var trace: [String] { log.lines }
    /// A reference, so that noting a line does not need exclusive access to the simulation.
    private final class Log { var lines: [String] = [] }
    private let log = Log()

    private(set) var core: ClientCore<Bytes>
    private(set) var now: Instant
    private let start: Instant
    private let resubmits: Bool
    /// The fake broker's heartbeat interval (ms), shorter than the client's in some runs.
    private let brokerIntervalMs: UInt32

    // Callers and the loop.
    private var requests: [RequestToken: Request] = [:]
    private var answers: [CallToken: Int] = [:]
    private var mail: [Mail] = []
    private var lastToken: UInt64 = 0
    /// Drain mode: the socket takes everything and the broker works without failing.
    private var settling = false

    // The wire: the client's connection, and frames in flight each way.
    private var connection = 0
    private var toBroker: [(connection: Int, message: ClientToBrokerMessage<Bytes>)] = []
    private var toClient: [BrokerToClientMessage<Bytes>] = []

    // The fake broker.
    private var instance: UInt64 = 1
    private var live: [String: Live] = [:]
    private var ended: Set<String> = []
    /// While restarting: the socket takes nothing until then.
    private var upAt: Instant?
    /// While frozen: it reads nothing and says nothing, but its connection takes messages.
    private var frozenUntil: Instant?

    init(seed: UInt64) {
        random = SeededGenerator(seed: seed)
        resubmits = seed % 4 != 0
        brokerIntervalMs = [0, 60, 100][Int(seed % 3)]
        now = ContinuousClock.now
        start = now
        core = ClientCore(configuration: .init(
            heartbeatInterval: Self.heartbeat, missedHeartbeats: Self.missedHeartbeats, syncInterval: Self.syncInterval,
            resubmitAfterBrokerRestart: resubmits, maxInputBytes: Self.clientMaxInput), now: now)
    }

    mutating func run(steps: Int) {
        for _ in 0..<steps {
            step()
            if !violations.isEmpty { return }
        }
        drain()
    }

    private func note(_ line: @autoclosure () -> String) {
        guard traces else { return }
        log.lines.append("\(milliseconds(now - start).rounded()) ms  \(line())")
    }

    // MARK: Random steps

    private mutating func chance(_ percent: UInt64) -> Bool { random.next() % 100 < percent }
    private mutating func pick(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &random) }

    private mutating func step() {
        switch random.next() % 100 {
        case 0..<12: callerSubmits()
        case 12..<18: callerCancels(Self.ids.randomElement(using: &random)!)
        case 18..<19: callerCancels("nobody")
        case 19..<21: callerAsksStatus()
        case 21..<33: loopTakesMail(upTo: pick(1...3))
        case 33..<41: socketTakes()
        case 41..<53: brokerReads(upTo: pick(1...4))
        case 53..<65: brokerWorks()
        case 65..<77: loopReceives(upTo: pick(1...4))
        case 77..<87: consumersTake()
        case 87..<88: connectionReset()
        case 88..<89 where chance(40): brokerRestarts()
        case 89..<90 where chance(50): brokerFreezes()
        case 90..<92: anotherClientSubmits()
        default: timePasses()
        }
    }

    // MARK: Callers and consumers

    private mutating func callerSubmits() {
        let id = Self.ids.randomElement(using: &random)!
        // The registry refuses an id live in this client without asking anyone.
        if requests.values.contains(where: { $0.id == id && !$0.channel.isCancelled && !$0.channel.hasEnded }) { return }
        let delivery: Enlarger_V1_Delivery = [.progressive, .final, .degraded][pick(0...2)]
        let token = addRequest(id: id, delivery: delivery)
        var submit = Enlarger_V1_Submit()
        submit.requestID = id
        submit.spec.width = 10
        submit.delivery = delivery
        if chance(20) { submit.deadlineMs = UInt32(pick(50...400)) }
        let size = chance(4) ? pick(Self.clientMaxInput + 1...80) : chance(5) ? pick(Self.brokerMaxInput + 1...Self.clientMaxInput)
            : pick(10...40)
        var image: Bytes = [0xFF, 0xD8] + Self.bytes(of: token.value)
        image += Bytes(repeating: 0, count: size - image.count)
        mail.append(.submit(token, submit, image))
    }

    /// A request the callers made (also for tests of the checker itself).
    mutating func addRequest(id: String, delivery: Enlarger_V1_Delivery) -> RequestToken {
        lastToken += 1
        let token = RequestToken(value: lastToken)
        requests[token] = Request(token: token, id: id, delivery: delivery, channel: RequestChannel(id: id))
        totals.requests += 1
        return token
    }

    /// `cancel(id)`: marks every request with the id that the registry still knows (those
    /// submitted since the id's last cancel) at once, then posts the Cancel.
    mutating func callerCancels(_ id: String) {
        for token in requests.keys.sorted() where requests[token]!.id == id && !requests[token]!.cancelCalled {
            requests[token]!.channel.cancel()
            requests[token]!.cancelCalled = true
            if requests[token]!.terminalActions == 0 {
                totals.cancels += 1
                if requests[token]!.acceptedDelivered { totals.cancelsAfterAccepted += 1 } else { totals.cancelsBeforeAccepted += 1 }
            }
        }
        mail.append(.cancel(id, chance(70) ? newCallToken() : nil))
    }

    private mutating func callerAsksStatus() {
        mail.append(.status(newCallToken()))
    }

    private mutating func newCallToken() -> CallToken {
        lastToken += 1
        answers[CallToken(value: lastToken)] = 0
        return CallToken(value: lastToken)
    }

    private mutating func consumersTake() {
        let reading = requests.keys.sorted().filter { !requests[$0]!.consumerDone }
        guard let token = reading.randomElement(using: &random) else { return }
        for _ in 0..<pick(1...3) {
            guard let step = requests[token]!.channel.nextIfReady() else { return }
            observe(token, step)
        }
    }

    /// What a consumer took, checked against the rules a consumer relies on.
    mutating func observe(_ token: RequestToken, _ step: RequestChannel.Step) {
        var request = requests[token]!
        defer { requests[token] = request }
        let what: String
        switch step {
        case .end:
            request.consumerDone = true
            if !request.cancelCalled && !request.consumerTerminal {
                violations.append("\(token) ended without a terminal event or failure")
            }
            return
        case .failure(let error):
            what = "failure \(error)"
        case .event(let event):
            what = "\(event)"
        }
        if request.cancelCalled { violations.append("\(what) delivered to \(token) after cancel") }
        if request.consumerTerminal { violations.append("\(what) delivered to \(token) after its end") }
        switch step {
        case .event(.degraded):
            if request.consumerDegraded { violations.append("second degraded for \(token)") }
            request.consumerDegraded = true
            if request.delivery == .degraded { request.consumerTerminal = true }
        case .event(.final), .failure:
            request.consumerTerminal = true
        default:
            break
        }
    }

    // MARK: The loop

    private mutating func loopTakesMail(upTo count: Int) {
        for _ in 0..<count where !mail.isEmpty {
            switch mail.removeFirst() {
            case .submit(let token, let submit, let image):
                note("mail: submit \(submit.requestID) as \(token), \(image.count) bytes, \(submit.delivery), timeout \(submit.deadlineMs) ms")
                perform(core.submit(token, submit, image: image, now: now))
            case .cancel(let id, let waiter):
                note("mail: cancel \(id) \(waiter.map { "for \($0)" } ?? "")")
                perform(core.cancel(id, waiter: waiter, now: now))
            case .status(let waiter):
                note("mail: status for \(waiter)")
                perform(core.status(waiter, now: now))
            }
        }
        endOfTurn()
    }

    private mutating func loopReceives(upTo count: Int) {
        for _ in 0..<count where !toClient.isEmpty {
            let message = toClient.removeFirst()
            if chance(1) { core.receivedMalformed(now: now) }
            let decoded = try! BrokerToClientMessage<Bytes>(frames: message.encoded().frames)
            note("client reads \(Self.describe(decoded))")
            let unsentCalls = Self.unsentCalls(core)
            let knownInstance = core.brokerInstance
            let brokerLost = totals.brokerLost
            perform(core.received(decoded, now: now))
            if case .syncReply = decoded, core.brokerInstance == knownInstance {
                totals.callsAskedAgain += max(0, Self.unsentCalls(core) - unsentCalls)
            }
            if knownInstance != nil, core.brokerInstance != knownInstance {
                totals.failedByRestart += totals.brokerLost - brokerLost
            }
        }
        endOfTurn()
    }

    private static func unsentCalls(_ core: ClientCore<Bytes>) -> Int {
        core.cancelCalls.values.joined().filter { $0.sentSerial == nil }.count
            + core.statusCalls.filter { $0.sentSerial == nil }.count
    }

    /// As every turn of the loop ends: tick, then hand the outbox to the socket.
    private mutating func endOfTurn() {
        perform(core.tick(now: now))
        socketTakes()
    }

    private mutating func socketTakes() {
        updateBroker()
        // Nothing while the broker restarts; now and then its queue is full.
        while upAt == nil, let message = core.nextMessage, settling || !chance(10) {
            let decoded = try! ClientToBrokerMessage<Bytes>(frames: message.encoded().frames)
            if case .submit(_, let image) = decoded {
                let token = RequestToken(value: Self.token(in: image))
                requests[token]!.submitsSent += 1
                if requests[token]!.submitsSent == 2 { totals.resubmitted += 1 }
            }
            note("socket takes \(ClientCoreHarness.summary(decoded))")
            toBroker.append((connection, decoded))
            core.messageSent(now: now)
        }
    }

    private mutating func timePasses() {
        let target: Instant
        if let wakeup = core.nextWakeup, chance(40) {
            target = max(now, wakeup)
        } else {
            target = now + .milliseconds(Int64(pick(1...40)))
        }
        // Nothing is due before the core's wakeup: the loop may sleep until then.
        if let wakeup = core.nextWakeup, wakeup > now {
            var early = core
            let probe = min(target, wakeup - .nanoseconds(1))
            let actions = early.tick(now: probe)
            if !actions.isEmpty || early.outbox.count != core.outbox.count {
                violations.append("tick before the wakeup did something: \(actions)")
            }
        }
        now = target
        note("tick")
        endOfTurn()
    }

    /// Performs the core's actions as `ClientLoop` does, checking each against the rules.
    mutating func perform(_ actions: [ClientAction]) {
        for action in actions {
            note("action: \(ClientCoreHarness.summary(action))")
            switch action {
            case .deliver(let token, let event, let terminal):
                guard var request = requests[token] else {
                    violations.append("\(event) for \(token), which nobody submitted")
                    continue
                }
                if request.terminalActions > 0 { violations.append("\(event) for \(token) after its terminal action") }
                switch event {
                case .accepted:
                    request.acceptedDelivered = true
                case .degraded(let image):
                    if request.degradedActions > 0 { violations.append("a second degraded for \(token)") }
                    request.degradedActions += 1
                    checkAttribution(image, token)
                    totals.degraded += 1
                case .final(let image):
                    if !terminal { violations.append("a final that is not terminal for \(token)") }
                    checkAttribution(image, token)
                case .started:
                    break
                case .placeholder:
                    if terminal { violations.append("a terminal placeholder for \(token)") }
                    if request.degradedActions > 0 { violations.append("a placeholder after the degraded for \(token)") }
                case .info:
                    violations.append("an info event for \(token), which asked for a resize")
                case .download:
                    violations.append("a download event for \(token), whose image was sent inline")
                }
                if terminal {
                    request.terminalActions += 1
                    totals.finals += 1
                }
                if request.cancelCalled { totals.heldBackByCancel += 1 }
                requests[token] = request
                if bypassesChannels {
                    observe(token, .event(event))
                } else {
                    request.channel.deliver(event, terminal: terminal)
                }
            case .fail(let token, let error):
                guard requests[token] != nil else {
                    violations.append("failure \(error) for \(token), which nobody submitted")
                    continue
                }
                if requests[token]!.terminalActions > 0 {
                    violations.append("failure \(error) for \(token) after its terminal action")
                }
                requests[token]!.terminalActions += 1
                count(error, for: token)
                if requests[token]!.cancelCalled { totals.heldBackByCancel += 1 }
                if bypassesChannels {
                    observe(token, .failure(error))
                } else {
                    requests[token]!.channel.fail(error)
                }
            case .answerCancel(let token, _), .answerStatus(let token, _):
                answers[token, default: 0] += 1
                if answers[token]! > 1 { violations.append("\(token) answered twice") }
            case .digestsUnused:
                break
            case .reconnect:
                // The old socket is closed: what it had not read is gone, and so is part of
                // what it had sent.
                connection += 1
                toClient.removeAll()
                toBroker = Array(toBroker.prefix(pick(0...toBroker.count)))
                totals.reconnects += 1
            }
        }
    }

    /// A result's image names the request it was made for: it must reach that one.
    private mutating func checkAttribution(_ image: EncodedImage, _ token: RequestToken) {
        let owner = Self.token(in: image.bytes, at: 1)
        if owner != token.value { violations.append("\(token) got a result that belongs to request #\(owner)") }
    }

    private mutating func count(_ error: EnlargerClientError, for token: RequestToken) {
        // The fake broker starts every message about a request with its token.
        var message: String?
        switch error {
        case .failed(.requestLost, _): totals.requestLost += 1
        case .failed(.deadlineExceeded, let text):
            if text.hasPrefix("token") { totals.brokerDeadlines += 1 } else { totals.localTimeouts += 1 }
            message = text
        case .rejected(.tooLarge, let text):
            if text.hasPrefix("token") { totals.rejectedTooLarge += 1 } else { totals.refusedTooLarge += 1 }
            message = text
        case .duplicateID(let text):
            totals.duplicateIDs += 1
            message = text
        case .failed(_, let text), .rejected(_, let text):
            totals.otherFailures += 1
            message = text
        case .brokerLost:
            totals.brokerLost += 1
        case .brokerUnreachable: totals.brokerUnreachable += 1
        case .cancelled:
            if !requests[token]!.cancelCalled { violations.append("\(token) cancelled, but nobody cancelled it") }
        case .invalidRequestID, .closed, .transport, .insecureEndpoint, .batchFailed:
            violations.append("\(token) failed \(error), which this run never causes")
        }
        if let message, message.hasPrefix("token "), let owner = UInt64(message.split(separator: " ")[1]),
           owner != token.value {
            violations.append("\(token) got \(error), which belongs to request #\(owner)")
        }
    }

    // MARK: The network and the fake broker

    private mutating func connectionReset() {
        defer { note("connection reset: \(toBroker.count) to the broker and \(toClient.count) to the client still in flight") }
        // libzmq reconnects under the same routing id; frames in flight are partly lost.
        toBroker = Array(toBroker.prefix(pick(0...toBroker.count)))
        toClient = Array(toClient.prefix(pick(0...toClient.count)))
        totals.resets += 1
    }

    private mutating func brokerRestarts() {
        defer { note("broker restarts: \(toBroker.count) to the broker and \(toClient.count) to the client still in flight") }
        // What was on its way to the old process dies with it (libzmq, with ZMQ_IMMEDIATE,
        // drops what a broken connection had not delivered); how much of what the old one
        // sent the client still reads is a matter of luck.
        instance += 1
        live.removeAll()
        ended.removeAll()
        toBroker.removeAll()
        toClient = Array(toClient.prefix(pick(0...toClient.count)))
        upAt = now + .milliseconds(Int64(pick(0...150)))
        frozenUntil = nil
        totals.restarts += 1
    }

    /// Another process with the same identity submits a request with one of this client's
    /// ids (a producer's retry from elsewhere, say): this client's Submit with the id is
    /// refused meanwhile, and a Sync of its naming the id moves the other request here.
    private mutating func anotherClientSubmits() {
        let id = Self.ids.randomElement(using: &random)!
        // Not while this client has a request with the id: the broker could not tell the two
        // apart either, should a reset lose this client's end of its own (a Sync would then
        // move the other's here, as this client's).
        guard brokerRuns, live[id] == nil, core.routes[id] == nil, !mail.contains(where: { Self.submits(id, $0) })
        else { return }
        note("another client submits \(id)")
        live[id] = Live(token: 0, owner: Self.anotherClient, delivery: .progressive, deadline: nil)
        ended.remove(id)
    }

    private static func submits(_ id: String, _ mail: Mail) -> Bool {
        if case .submit(_, let submit, _) = mail { submit.requestID == id } else { false }
    }

    /// The connection of that other process.
    private static let anotherClient = -1

    private mutating func brokerFreezes() {
        defer { note("broker freezes: \(toBroker.count) to the broker and \(toClient.count) to the client still in flight") }
        // Sometimes longer than the client's silence limit, sometimes not.
        frozenUntil = now + .milliseconds(Int64(pick(50...450)))
        totals.freezes += 1
    }

    private mutating func updateBroker() {
        if let at = upAt, now >= at { upAt = nil }
        if let until = frozenUntil, now >= until { frozenUntil = nil }
    }

    private var brokerRuns: Bool { upAt == nil && frozenUntil == nil }

    private mutating func send(_ message: BrokerToClientMessage<Bytes>, to owner: Int) {
        // A message for a closed connection goes nowhere.
        note("broker sends \(Self.describe(message))\(owner == connection ? "" : " to a closed connection")")
        if owner == connection { toClient.append(message) }
    }

    private mutating func brokerReads(upTo count: Int) {
        updateBroker()
        for _ in 0..<count where brokerRuns && !toBroker.isEmpty {
            let (sender, message) = toBroker.removeFirst()
            note("broker reads \(ClientCoreHarness.summary(message))\(sender == connection ? "" : " from a closed connection")")
            brokerHandles(message, from: sender)
        }
    }

    private mutating func brokerHandles(_ message: ClientToBrokerMessage<Bytes>, from sender: Int) {
        switch message {
        case .submit(let submit, let image):
            let id = submit.requestID, token = Self.token(in: image)
            if image.count > Self.brokerMaxInput {
                send(Self.rejected(id, .tooLarge, "token \(token) is too large"), to: sender)
            } else if live[id] != nil {
                send(ClientCoreHarness.failed(id, .duplicateID, "token \(token) has a live id"), to: sender)
            } else if !settling && chance(3) {
                send(Self.rejected(id, .overloaded, "token \(token) came while the queue was full"), to: sender)
            } else {
                let deadline = submit.deadlineMs == 0 ? nil : now + .milliseconds(submit.deadlineMs)
                live[id] = Live(token: token, owner: sender, delivery: submit.delivery, deadline: deadline)
                ended.remove(id)
                send(ClientCoreHarness.accepted(id, instance: instance, intervalMs: brokerIntervalMs), to: sender)
                if chance(3) {
                    send(ClientCoreHarness.accepted(id, instance: instance, intervalMs: brokerIntervalMs), to: sender)
                }
            }
        case .cancel(let cancel):
            let id = cancel.requestID
            if let request = live.removeValue(forKey: id) {
                ended.insert(id)
                send(ClientCoreHarness.cancelled(id), to: request.owner)
                send(ClientCoreHarness.cancelAck(id, .cancelled), to: sender)
            } else {
                send(ClientCoreHarness.cancelAck(id, ended.contains(id) ? .finished : .unknown), to: sender)
            }
        case .statusRequest:
            send(.statusReply(.init()), to: sender)
        case .ping:
            send(.pong(ClientCoreHarness.pong(instance: instance, intervalMs: brokerIntervalMs,
                                              maxInputBytes: UInt64(Self.brokerMaxInput))), to: sender)
        case .sync(let sync):
            // The ones it holds move to this connection.
            for id in sync.requestIds { live[id]?.owner = sender }
            send(ClientCoreHarness.syncReply(nonce: sync.nonce, unknown: sync.requestIds.filter { live[$0] == nil },
                                             instance: instance), to: sender)
        }
    }

    /// One step of the broker's work: deadlines, then one request moves on.
    private mutating func brokerWorks() {
        updateBroker()
        guard brokerRuns else { return }
        for id in live.keys.sorted() where live[id]!.deadline.map({ now >= $0 }) == true {
            let request = live.removeValue(forKey: id)!
            ended.insert(id)
            send(ClientCoreHarness.failed(id, .deadlineExceeded, "token \(request.token) passed its deadline"),
                 to: request.owner)
        }
        guard let id = live.keys.sorted().randomElement(using: &random) else { return }
        work(on: id)
    }

    private mutating func work(on id: String) {
        var request = live[id]!
        guard request.owner == connection || request.owner == Self.anotherClient else {
            // Its client went away: the real broker fails it CLIENT_SILENT, to nobody.
            live[id] = nil
            ended.insert(id)
            return
        }
        if request.attempt == 0 || (!settling && request.attempt < 3 && chance(5)) {
            // Started, or started again after its worker was lost.
            request.attempt += 1
            live[id] = request
            send(ClientCoreHarness.started(id, attempt: request.attempt), to: request.owner)
            return
        }
        if !settling && chance(6) {
            finish(id, ClientCoreHarness.failed(id, .corrupt, "token \(request.token) is corrupt"))
        } else if request.delivery != .final && !request.degradedSent {
            let terminal = request.delivery == .degraded
            let result = Self.resultMessage(id, .degraded, terminal: terminal, token: request.token)
            if terminal {
                finish(id, result)
            } else {
                request.degradedSent = true
                live[id] = request
                send(result, to: request.owner)
            }
        } else {
            finish(id, Self.resultMessage(id, .final, terminal: true, token: request.token))
        }
    }

    private mutating func finish(_ id: String, _ message: BrokerToClientMessage<Bytes>) {
        let request = live.removeValue(forKey: id)!
        ended.insert(id)
        send(message, to: request.owner)
    }

    // MARK: The end of a run

    /// The network heals and the broker finishes everything; then every request must have
    /// ended exactly once, every call been answered once, and the core be idle.
    private mutating func drain() {
        settling = true
        frozenUntil = nil
        upAt = nil
        for _ in 0..<2_000 {
            loopTakesMail(upTo: mail.count)
            brokerReads(upTo: toBroker.count)
            for id in live.keys.sorted() where live[id] != nil {
                for _ in 0..<3 where live[id] != nil { work(on: id) }
            }
            loopReceives(upTo: toClient.count)
            for token in requests.keys.sorted() {
                while !requests[token]!.consumerDone, let step = requests[token]!.channel.nextIfReady() {
                    observe(token, step)
                }
            }
            if !violations.isEmpty { return }
            let consumersDone = bypassesChannels || requests.values.allSatisfy(\.consumerDone)
            if mail.isEmpty && toBroker.isEmpty && toClient.isEmpty && core.isIdle && consumersDone { break }
            now = now + .milliseconds(20)
            endOfTurn()
        }
        for token in requests.keys.sorted() {
            let request = requests[token]!
            if request.terminalActions != 1 {
                violations.append("\(token) (\(request.id)) got \(request.terminalActions) terminal actions")
            }
            if !bypassesChannels && !request.consumerDone { violations.append("\(token)'s consumer never saw the end") }
        }
        for (token, count) in answers.sorted(by: { $0.key < $1.key }) where count != 1 {
            violations.append("\(token) answered \(count) times")
        }
        if !core.isIdle { violations.append("the core still holds \(core.routes.count) ids at the end") }
        if core.nextWakeup != nil { violations.append("the core wants a wakeup while idle") }
    }

    // MARK: Frames

    static func describe(_ message: BrokerToClientMessage<Bytes>) -> String {
        switch message {
        case .result(let result, let image):
            "\(result.stage) \(result.requestID)\(result.terminal ? " (terminal)" : "") for #\(token(in: image.withUnsafeBytes { Array($0) }, at: 1))"
        case .failed(let failed): "failed \(failed.requestID) \(failed.code) \(failed.message)"
        case .rejected(let rejected): "rejected \(rejected.requestID) \(rejected.code) \(rejected.message)"
        case .cancelAck(let ack): "cancel ack \(ack.requestID) \(ack.outcome)"
        case .accepted(let accepted): "accepted \(accepted.requestID) by instance \(accepted.brokerInstance)"
        case .pong(let pong): "pong from instance \(pong.brokerInstance)"
        case .syncReply(let reply): "sync reply #\(reply.nonce) unknown \(reply.unknownRequestIds) from instance \(reply.brokerInstance)"
        case .batchEnded(let ended): "batch \(ended.batchID) ended \(ended.outcome)"
        default: "\(message.kindName) \(message.requestID ?? "")"
        }
    }

    static func bytes(of value: UInt64) -> Bytes {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) }
    }

    /// The request token a submitted image (after the JPEG magic) or a result image (after
    /// the stage byte) carries.
    static func token(in bytes: Bytes, at offset: Int = 2) -> UInt64 {
        (0..<8).reduce(0) { $0 | UInt64(bytes[offset + $1]) << (8 * $1) }
    }

    static func result(_ stage: Enlarger_V1_Stage, for token: RequestToken) -> EncodedImage {
        EncodedImage(bytes: [UInt8(stage.rawValue)] + bytes(of: token.value), width: 10, height: 8, format: .jpeg)
    }

    static func resultMessage(_ id: String, _ stage: Enlarger_V1_Stage, terminal: Bool, token: UInt64) -> BrokerToClientMessage<Bytes> {
        ClientCoreHarness.result(id, stage, terminal: terminal, image: [UInt8(stage.rawValue)] + bytes(of: token))
    }

    static func rejected(_ id: String, _ code: Enlarger_V1_ErrorCode, _ message: String) -> BrokerToClientMessage<Bytes> {
        var rejected = Enlarger_V1_Rejected()
        rejected.requestID = id
        rejected.code = code
        rejected.message = message
        return .rejected(rejected)
    }
}
