import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker

/// An exhaustive, bounded explorer of `BrokerCore`: the real type, not a model of it.
///
/// A small world (two clients of two principals, two workers of capacity 1, four requests
/// in two lanes, two of each principal naming the same image, one with a short deadline)
/// is driven through every interleaving of its actions up to a depth: submits, cancels,
/// workers registering, answering, failing, acknowledging cancels, dying, a duplicated
/// terminal frame, a placeholder (one request opted out of it), and time passing. States are fingerprinted (the core's decisive state
/// and what the peers hold and have been told) so each is expanded once. At every state:
/// - no request is told more than one terminal event, nothing follows it;
/// - no request is told two placeholders, a terminal one, or one it opted out of;
/// - a result reaches a request only from a job of its own principal (sharing is off);
/// - no worker is given more jobs than its capacity, no job is on two workers;
/// - the core's own bookkeeping holds (`CoreHarness.inconsistencies`: every waiting job in
///   one place, running counts right, nothing dispatchable waiting while a worker of its
///   lane has credit, principals within their limits).
/// At every leaf (the depth reached, or nothing left to do) the world is drained: workers
/// answer everything and time passes until every request has ended. Then every accepted
/// request must have been told exactly one terminal event, every credit must be back and the
/// core idle.
///
/// `ENLARGER_MODEL_DEPTH` raises the bound (the suite keeps it small).
final class BrokerModelCheckerTests: XCTestCase {
    func testEveryInterleavingOfASmallWorldKeepsTheInvariants() {
        let depth = ProcessInfo.processInfo.environment["ENLARGER_MODEL_DEPTH"].flatMap { Int($0) } ?? 7
        let start = ContinuousClock.now
        var checker = ModelChecker(depth: depth)
        checker.run()
        let elapsed = ContinuousClock.now - start
        print("model checker: depth \(depth), \(checker.statesExplored) states, \(checker.leavesDrained) leaves drained, "
              + "\(checker.transitions) transitions in \(elapsed)")
        XCTAssertEqual(checker.violations.prefix(5), [], "first violations, with the actions that led there")
        XCTAssertGreaterThan(checker.statesExplored, 1000, "the world should be explored, not skipped")
        XCTAssertGreaterThan(checker.terminalsSeen, 0)
    }

    /// The checker is not vacuous: with a planted bug in the core's state it finds a trace.
    func testItFindsACreditReturnedOnCancel() {
        // The bug: when a job is cancelled, its worker's credit comes back at once instead of
        // when the worker acknowledges (the worker is still running it).
        var checker = ModelChecker(depth: 7) { core in
            for index in core.workers.indices { core.workers[index].tombstones.removeAll() }
        }
        checker.stopAtFirstViolation = true
        checker.run()
        XCTAssertFalse(checker.violations.isEmpty, "a credit returned on cancel went unnoticed")
        print("planted credit bug found: \(checker.violations.first ?? "")")
    }

    func testItFindsAJobLeftQueuedWhileAWorkerRunsIt() {
        // The bug: a dispatched job is also left waiting, so it can be given out twice.
        var checker = ModelChecker(depth: 7) { core in
            for (jobID, job) in core.jobs where job.worker != nil && core.waiting.place(of: jobID) == nil {
                core.waiting.place(jobID, lane: job.lane, principal: job.owner.principal)
            }
        }
        checker.stopAtFirstViolation = true
        checker.run()
        XCTAssertFalse(checker.violations.isEmpty, "a job given out twice went unnoticed")
        print("planted double dispatch found: \(checker.violations.first ?? "")")
    }

    func testItFindsAPlaceholderSentToARequestThatOptedOut() {
        // The bug: the broker forgets which requests opted out of the placeholder.
        var checker = ModelChecker(depth: 7) { core in
            for key in Array(core.requests.keys) { core.requests[key]!.wantsPlaceholder = true }
        }
        checker.stopAtFirstViolation = true
        checker.run()
        XCTAssertFalse(checker.violations.isEmpty, "a placeholder for a request that opted out went unnoticed")
        print("planted placeholder bug found: \(checker.violations.first ?? "")")
    }
}

/// The world and its exploration (see `BrokerModelCheckerTests`).
struct ModelChecker {
    struct Request {
        let id: String
        let client: Int
        let priority: Enlarger_V1_Priority
        let image: [UInt8]
        let deadlineMs: UInt32
        /// Its Submit does not say no_placeholder.
        var wantsPlaceholder = true
    }

    static let principals = [Principal("curve:p1"), Principal("curve:p2")]
    static let clientPeers: [PeerID] = ["client-1", "client-2"]
    static let workerPeers: [PeerID] = ["worker-1", "worker-2"]
    static let shared: [UInt8] = [0xFF, 0xD8, 0xFF, 0x01]
    static let requests = [
        Request(id: "a", client: 0, priority: .interactive, image: shared, deadlineMs: 0),
        Request(id: "b", client: 1, priority: .bulk, image: [0xFF, 0xD8, 0xFF, 0x02], deadlineMs: 0, wantsPlaceholder: false),
        Request(id: "c", client: 0, priority: .bulk, image: shared, deadlineMs: 1500),
        Request(id: "d", client: 1, priority: .interactive, image: shared, deadlineMs: 0),
    ]
    static let heartbeat = Duration.seconds(1)

    /// What one worker process holds, as it sees it.
    struct Held: Hashable {
        let jobID: UInt64
        let attempt: UInt32
        var cancelRequested = false
        var placeholderSent = false
    }

    /// What one request's client has been told.
    struct Told: Hashable {
        var accepted = false
        var terminals = 0
        var afterTerminal = 0
        var placeholders = 0
    }

    struct State {
        var core: BrokerCore<[UInt8]>
        var now: MonotonicInstant
        var submitted: [Bool] = Array(repeating: false, count: ModelChecker.requests.count)
        var cancelled: [Bool] = Array(repeating: false, count: ModelChecker.requests.count)
        var registered: [Bool] = [false, false]
        var held: [[Held]] = [[], []]
        var lastTerminal: [[[UInt8]]?] = [nil, nil]
        var told: [Told] = Array(repeating: Told(), count: ModelChecker.requests.count)
        /// Which principal's job made each job's result (job id → principal index).
        var jobPrincipal: [UInt64: Int] = [:]
        var deathsLeft = 1
        var duplicatesLeft = 1
        var placeholdersLeft = 1
        var ticksLeft = 2
        var trace: [String] = []
        var problems: [String] = []
    }

    let depth: Int
    /// Applied to the core after every action: plants a bug, to show the checker finds it.
    let mutation: ((inout BrokerCore<[UInt8]>) -> Void)?
    var stopAtFirstViolation = false
    private(set) var statesExplored = 0
    private(set) var transitions = 0
    private(set) var leavesDrained = 0
    private(set) var terminalsSeen = 0
    private(set) var violations: [String] = []
    private var visited: Set<Int> = []

    init(depth: Int, mutation: ((inout BrokerCore<[UInt8]>) -> Void)? = nil) {
        self.depth = depth
        self.mutation = mutation
    }

    static func initialState() -> State {
        var configuration = BrokerConfiguration()
        configuration.heartbeatInterval = heartbeat
        configuration.heartbeatLiveness = 3
        configuration.interactiveReserve = 0.5
        configuration.cancelAckTimeout = .seconds(5)
        configuration.tenants = TenantPolicy(defaults: .init(maxRunning: 1))
        let now = MonotonicInstant(nanoseconds: 1_000_000_000)
        return State(core: BrokerCore(configuration: configuration, now: now), now: now)
    }

    mutating func run() {
        explore(Self.initialState(), remaining: depth)
    }

    // MARK: Exploring

    private mutating func explore(_ state: State, remaining: Int) {
        if stopAtFirstViolation && !violations.isEmpty { return }
        guard visited.insert(Self.fingerprint(state, remaining: remaining)).inserted else { return }
        statesExplored += 1
        let actions = Self.enabledActions(state)
        guard remaining > 0, !actions.isEmpty else {
            drainAndCheck(state)
            return
        }
        for action in actions {
            var next = state
            apply(action, to: &next)
            transitions += 1
            if !next.problems.isEmpty {
                violations.append((next.problems.first ?? "") + " after " + next.trace.joined(separator: ", "))
                if stopAtFirstViolation { return }
                continue
            }
            explore(next, remaining: remaining - 1)
        }
    }

    enum Action {
        case submit(Int), cancel(Int)
        case register(Int), finish(Int, Int), fail(Int, Int), acknowledge(Int, Int), placeholder(Int, Int)
        case die(Int), duplicate(Int), tick
    }

    private static func enabledActions(_ state: State) -> [Action] {
        var actions: [Action] = []
        for index in requests.indices {
            if !state.submitted[index] { actions.append(.submit(index)) }
            if state.submitted[index] && !state.cancelled[index] && state.told[index].terminals == 0 {
                actions.append(.cancel(index))
            }
        }
        for worker in workerPeers.indices {
            if !state.registered[worker] { actions.append(.register(worker)); continue }
            for (slot, held) in state.held[worker].enumerated() {
                actions.append(.finish(worker, slot))
                if held.cancelRequested { actions.append(.acknowledge(worker, slot)) } else { actions.append(.fail(worker, slot)) }
                if state.placeholdersLeft > 0, !held.placeholderSent { actions.append(.placeholder(worker, slot)) }
            }
            if state.deathsLeft > 0 { actions.append(.die(worker)) }
            if state.duplicatesLeft > 0, state.lastTerminal[worker] != nil { actions.append(.duplicate(worker)) }
        }
        if state.ticksLeft > 0 { actions.append(.tick) }
        return actions
    }

    // MARK: Acting

    private mutating func apply(_ action: Action, to state: inout State) {
        switch action {
        case .submit(let index):
            let request = Self.requests[index]
            state.submitted[index] = true
            state.trace.append("submit \(request.id)")
            var submit = Enlarger_V1_Submit()
            submit.requestID = request.id
            submit.spec.width = 64
            submit.delivery = .final
            submit.priority = request.priority
            submit.deadlineMs = request.deadlineMs
            submit.noPlaceholder = !request.wantsPlaceholder
            submit.source.inline.sha256 = Data(SHA256Stub.digest(request.image))
            client(request.client, .submit(submit, image: request.image), &state)
        case .cancel(let index):
            let request = Self.requests[index]
            state.cancelled[index] = true
            state.trace.append("cancel \(request.id)")
            client(request.client, .cancel(.with { $0.requestID = request.id }), &state)
        case .register(let worker):
            state.registered[worker] = true
            state.held[worker] = []
            state.trace.append("register w\(worker + 1)")
            self.worker(worker, .ready(.with { $0.capacity = 1; $0.workerName = "w"; $0.pid = 1 }), &state)
        case .finish(let worker, let slot):
            let held = state.held[worker].remove(at: slot)
            state.trace.append("w\(worker + 1) finishes job \(held.jobID)")
            var result = Enlarger_V1_JobResult()
            result.jobID = held.jobID
            result.attempt = held.attempt
            result.stage = .final
            result.terminal = true
            result.width = 8
            result.height = 8
            result.digestVerified = true
            // The payload names the job that made it, to trace where a result came from.
            let message = WorkerToBrokerMessage<[UInt8]>.jobResult(result, image: Self.bytes(of: held.jobID))
            state.lastTerminal[worker] = message.encoded().frames
            self.worker(worker, message, &state)
        case .fail(let worker, let slot):
            let held = state.held[worker].remove(at: slot)
            state.trace.append("w\(worker + 1) fails job \(held.jobID)")
            let message = WorkerToBrokerMessage<[UInt8]>.jobFailed(.with {
                $0.jobID = held.jobID
                $0.attempt = held.attempt
                $0.code = .corrupt
            })
            state.lastTerminal[worker] = message.encoded().frames
            self.worker(worker, message, &state)
        case .placeholder(let worker, let slot):
            state.placeholdersLeft -= 1
            state.held[worker][slot].placeholderSent = true
            let held = state.held[worker][slot]
            state.trace.append("w\(worker + 1) sends a placeholder for job \(held.jobID)")
            self.worker(worker, .jobResult(.with {
                $0.jobID = held.jobID
                $0.attempt = held.attempt
                $0.stage = .placeholder
                $0.width = 8
                $0.height = 8
                $0.placeholder = Data([1, 2, 3, 4, 5])
            }, image: []), &state)
        case .acknowledge(let worker, let slot):
            let held = state.held[worker].remove(at: slot)
            state.trace.append("w\(worker + 1) acknowledges the cancel of job \(held.jobID)")
            self.worker(worker, .jobCancelled(.with { $0.jobID = held.jobID; $0.attempt = held.attempt }), &state)
        case .die(let worker):
            state.deathsLeft -= 1
            state.registered[worker] = false
            state.held[worker] = []
            state.lastTerminal[worker] = nil
            state.trace.append("w\(worker + 1) dies")
            record(state.core.workerUnreachable(Self.workerPeers[worker], now: state.now), &state)
        case .duplicate(let worker):
            state.duplicatesLeft -= 1
            state.trace.append("w\(worker + 1) repeats its last terminal frame")
            let frames = state.lastTerminal[worker]!
            record(state.core.workerFrames(from: Self.workerPeers[worker], frames, now: state.now), &state)
        case .tick:
            state.ticksLeft -= 1
            state.trace.append("a second passes")
            passTime(&state)
        }
        mutation?(&state.core)
        checkInside(&state)
    }

    /// Live peers say so, then a heartbeat interval passes.
    private func passTime(_ state: inout State) {
        for client in Self.clientPeers.indices { self.client(client, .ping, &state) }
        for worker in Self.workerPeers.indices where state.registered[worker] { self.worker(worker, .heartbeat, &state) }
        state.now = state.now + Self.heartbeat
        record(state.core.tick(now: state.now), &state)
    }

    private func client(_ index: Int, _ message: ClientToBrokerMessage<[UInt8]>, _ state: inout State) {
        record(state.core.clientFrames(from: Self.clientPeers[index], principal: Self.principals[index],
                                       message.encoded().frames, now: state.now), &state)
    }

    private func worker(_ index: Int, _ message: WorkerToBrokerMessage<[UInt8]>, _ state: inout State) {
        record(state.core.workerFrames(from: Self.workerPeers[index], message.encoded().frames, now: state.now), &state)
    }

    static func bytes(of jobID: UInt64) -> [UInt8] { withUnsafeBytes(of: jobID.littleEndian) { Array($0) } }

    /// What the peers make of the core's actions, checked as they arrive.
    private func record(_ actions: [BrokerAction<[UInt8]>], _ state: inout State) {
        for action in actions {
            switch action {
            case .sendToClient(let peer, let outgoing, _, _):
                guard let client = Self.clientPeers.firstIndex(of: peer),
                      let event = try? BrokerToClientMessage<[UInt8]>(frames: outgoing.frames) else {
                    state.problems.append("an undecodable message or an unknown client")
                    continue
                }
                observe(event, by: client, &state)
            case .sendToWorker(let peer, let outgoing):
                guard let worker = Self.workerPeers.firstIndex(of: peer),
                      let command = try? BrokerToWorkerMessage<[UInt8]>(frames: outgoing.frames) else {
                    state.problems.append("an undecodable message or an unknown worker")
                    continue
                }
                switch command {
                case .job(let job, _):
                    guard state.registered[worker] else { continue }  // it is gone; the send fails
                    if state.held[worker].contains(where: { $0.jobID == job.jobID }) {
                        state.problems.append("job \(job.jobID) given twice to w\(worker + 1)")
                    }
                    for other in Self.workerPeers.indices
                    where other != worker && state.held[other].contains(where: { $0.jobID == job.jobID && !$0.cancelRequested }) {
                        state.problems.append("job \(job.jobID) given to w\(worker + 1) while w\(other + 1) runs it")
                    }
                    state.held[worker].append(Held(jobID: job.jobID, attempt: job.attempt))
                    if state.held[worker].count > 1 {
                        state.problems.append("w\(worker + 1) (capacity 1) given a second job while it runs one")
                    }
                    if let principal = state.core.jobs[job.jobID]?.owner.principal,
                       let index = Self.principals.firstIndex(of: principal) {
                        state.jobPrincipal[job.jobID] = index
                    }
                case .cancelJob(let cancel):
                    if let slot = state.held[worker].firstIndex(where: { $0.jobID == cancel.jobID && $0.attempt == cancel.attempt }) {
                        state.held[worker][slot].cancelRequested = true
                    }
                case .disconnect:
                    state.registered[worker] = false
                    state.held[worker] = []
                case .heartbeat, .error:
                    break
                }
            case .report:
                break
            }
        }
    }

    private func observe(_ event: BrokerToClientMessage<[UInt8]>, by client: Int, _ state: inout State) {
        func request(_ id: String) -> Int? {
            Self.requests.firstIndex { $0.id == id && $0.client == client }
        }
        let (id, terminal): (String, Bool)
        switch event {
        case .accepted(let accepted):
            guard let index = request(accepted.requestID) else { return }
            if state.told[index].accepted { state.problems.append("\(accepted.requestID) accepted twice") }
            state.told[index].accepted = true
            return
        case .started(let started): (id, terminal) = (started.requestID, false)
        case .result(let result, let image):
            (id, terminal) = (result.requestID, result.terminal)
            if result.stage == .placeholder, let index = request(id) {
                state.told[index].placeholders += 1
                if state.told[index].placeholders > 1 { state.problems.append("\(id) told two placeholders") }
                if !Self.requests[index].wantsPlaceholder { state.problems.append("\(id) told a placeholder it opted out of") }
                if result.terminal { state.problems.append("\(id) told a terminal placeholder") }
            }
            let jobID = image.count == 8 ? image.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } : 0
            if let maker = state.jobPrincipal[UInt64(littleEndian: jobID)], maker != client {
                state.problems.append("\(id) of principal \(client + 1) got a result made for principal \(maker + 1)")
            }
        case .failed(let failed): (id, terminal) = (failed.requestID, true)
        case .cancelled(let cancelled): (id, terminal) = (cancelled.requestID, true)
        case .rejected(let rejected): (id, terminal) = (rejected.requestID, true)
        default: return
        }
        guard let index = request(id) else {
            state.problems.append("client \(client + 1) told about \(id), which is not its request")
            return
        }
        if state.told[index].terminals > 0 {
            state.told[index].afterTerminal += 1
            state.problems.append("\(id) told something after its terminal event")
        }
        if terminal { state.told[index].terminals += 1 }
    }

    private func checkInside(_ state: inout State) {
        var harness = CoreHarness()
        harness.core = state.core
        state.problems += harness.inconsistencies
        for (worker, index) in Self.workerPeers.enumerated().map({ ($0.offset, $0.element) }) {
            guard let at = state.core.workerIndex[index] else { continue }
            let counted = state.core.workers[at].inFlight
            if counted < 0 || counted > state.core.workers[at].capacity {
                state.problems.append("w\(worker + 1) counts \(counted) credits taken")
            }
            // The core may count a cancelled job the worker has not acknowledged; it must
            // never count fewer than the worker runs.
            if state.registered[worker], counted < state.held[worker].count {
                state.problems.append("w\(worker + 1) runs \(state.held[worker].count) jobs, the broker counts \(counted)")
            }
        }
    }

    // MARK: Leaves

    /// Workers answer everything and time passes until nothing is live; then every request
    /// must have ended exactly once and every credit be back.
    private mutating func drainAndCheck(_ state: State) {
        leavesDrained += 1
        var state = state
        for worker in Self.workerPeers.indices where !state.registered[worker] {
            state.registered[worker] = true
            state.held[worker] = []
            self.worker(worker, .ready(.with { $0.capacity = 1; $0.workerName = "w"; $0.pid = 1 }), &state)
        }
        var rounds = 0
        while rounds < 400 {
            rounds += 1
            var acted = false
            for worker in Self.workerPeers.indices {
                while let held = state.held[worker].first {
                    state.held[worker].removeFirst()
                    acted = true
                    if held.cancelRequested {
                        self.worker(worker, .jobCancelled(.with { $0.jobID = held.jobID; $0.attempt = held.attempt }), &state)
                    } else {
                        var result = Enlarger_V1_JobResult()
                        result.jobID = held.jobID
                        result.attempt = held.attempt
                        result.stage = .final
                        result.terminal = true
                        result.digestVerified = true
                        self.worker(worker, .jobResult(result, image: Self.bytes(of: held.jobID)), &state)
                    }
                }
            }
            if !acted {
                if state.core.liveRequestCount == 0 && state.core.isIdle { break }
                passTime(&state)
            }
        }
        checkInside(&state)
        for (index, request) in Self.requests.enumerated() where state.submitted[index] {
            let told = state.told[index]
            terminalsSeen += told.terminals
            if told.terminals != 1 {
                state.problems.append("\(request.id) told \(told.terminals) terminal events once everything ended")
            }
        }
        if !state.core.isIdle {
            let core = state.core
            let why = [
                core.requests.isEmpty ? nil : "\(core.requests.count) requests",
                core.jobs.isEmpty ? nil : "\(core.jobs.count) jobs",
                core.waiting.isEmpty ? nil : "waiting \(core.waiting.fingerprint)",
                core.running.isEmpty ? nil : "running \(core.running.byPrincipal)",
                core.clients.isEmpty ? nil : "\(core.clients.count) clients",
                core.workers.allSatisfy({ $0.inFlight == 0 && !$0.reserved }) ? nil
                    : "workers \(core.workers.map { "\($0.inFlight)/\($0.reserved)" })",
            ].compactMap { $0 }
            state.problems.append("the core is not idle once everything ended: \(why.joined(separator: ", "))")
        }
        for worker in state.core.workers where worker.inFlight != 0 {
            state.problems.append("\(worker.id) still counts \(worker.inFlight) credits taken")
        }
        if !state.problems.isEmpty {
            violations.append((state.problems.first ?? "") + " (drained) after " + state.trace.joined(separator: ", "))
        }
    }

    // MARK: Fingerprints

    /// Everything that decides what happens next, and what the peers hold and were told;
    /// not counters, logs or the trace.
    static func fingerprint(_ state: State, remaining: Int) -> Int {
        var hasher = Hasher()
        let core = state.core
        hasher.combine(remaining)
        hasher.combine(state.now.duration(since: MonotonicInstant(nanoseconds: 1_000_000_000)).milliseconds)
        for key in core.requests.keys.sorted() {
            let request = core.requests[key]!
            hasher.combine(key.principal.name)
            hasher.combine(key.id)
            hasher.combine(request.jobID)
            hasher.combine(request.client)
            hasher.combine(request.startedAttempt)
        }
        for jobID in core.jobs.keys.sorted() {
            let job = core.jobs[jobID]!
            hasher.combine(jobID)
            hasher.combine(job.requests.map(\.id))
            hasher.combine(job.worker)
            hasher.combine(job.attempt)
            hasher.combine(job.lane.rawValue)
            hasher.combine(job.quarantined)
            hasher.combine(job.losses)
            hasher.combine(job.shareKey != nil)
            hasher.combine(job.placeholder)
            hasher.combine(job.placeholderSent)
        }
        hasher.combine(core.waiting.fingerprint)
        for worker in core.workers {
            hasher.combine(worker.id)
            hasher.combine(worker.jobs.sorted { $0.key < $1.key }.map { "\($0.key)/\($0.value)" })
            hasher.combine(worker.tombstones.keys.sorted())
            hasher.combine(worker.reserved)
            hasher.combine(worker.exclusiveJob)
        }
        for peer in core.clients.keys.sorted() { hasher.combine(peer) }
        hasher.combine(core.sharing.cacheBytes)
        hasher.combine(core.nextJobID)
        hasher.combine(state.submitted)
        hasher.combine(state.cancelled)
        hasher.combine(state.registered)
        hasher.combine(state.held)
        hasher.combine(state.told)
        hasher.combine(state.lastTerminal.map { $0 != nil })
        hasher.combine(state.deathsLeft)
        hasher.combine(state.duplicatesLeft)
        hasher.combine(state.placeholdersLeft)
        hasher.combine(state.ticksLeft)
        return hasher.finalize()
    }
}

/// A stand-in digest for the world's two images: the broker only compares digests, and the
/// fake worker says it verified them.
enum SHA256Stub {
    static func digest(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        for (index, byte) in bytes.enumerated() { digest[index % 32] ^= byte &+ UInt8(index) }
        return digest
    }
}
