import EnlargerProtocol
import XCTest

@testable import EnlargerBroker

typealias Bytes = [UInt8]
typealias ClientEvent = BrokerToClientMessage<Bytes>
typealias WorkerCommand = BrokerToWorkerMessage<Bytes>

/// Drives a `BrokerCore<[UInt8]>` with a hand-made clock and collects what it sends, decoded
/// with the protocol's own decoders (so the broker's output framing is checked too).
struct CoreHarness {
    var core: BrokerCore<Bytes>
    var now = MonotonicInstant(nanoseconds: 1_000_000_000)
    private(set) var toClients: [(peer: PeerID, event: ClientEvent)] = []
    private(set) var toWorkers: [(peer: PeerID, command: WorkerCommand)] = []
    private(set) var reports: [BrokerReport] = []

    static let jpeg: Bytes = [0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43, 0x00]
    static let image: Bytes = [0x50, 0x35, 0x0A]

    init(_ configure: (inout BrokerConfiguration) -> Void = { _ in }) {
        var configuration = BrokerConfiguration()
        configure(&configuration)
        core = BrokerCore(configuration: configuration, now: now)
    }

    var configuration: BrokerConfiguration { core.configuration }

    // MARK: Feeding events

    mutating func client(_ peer: PeerID, _ message: ClientToBrokerMessage<Bytes>) {
        clientFrames(peer, message.encoded().frames)
    }

    mutating func clientFrames(_ peer: PeerID, principal: Principal = .local, _ frames: [Bytes]) {
        record(core.clientFrames(from: peer, principal: principal, frames, now: now))
    }

    mutating func client(_ peer: PeerID, as principal: Principal, _ message: ClientToBrokerMessage<Bytes>) {
        clientFrames(peer, principal: principal, message.encoded().frames)
    }

    /// The I/O loop reports how many bytes wait for `peer`.
    mutating func backlog(_ peer: PeerID, bytes: Int) {
        record(core.clientBacklog(peer, waitingBytes: bytes, now: now))
    }

    mutating func worker(_ peer: PeerID, as principal: Principal = .local, _ message: WorkerToBrokerMessage<Bytes>) {
        workerFrames(peer, as: principal, message.encoded().frames)
    }

    mutating func workerFrames(_ peer: PeerID, as principal: Principal = .local, _ frames: [Bytes]) {
        record(core.workerFrames(from: peer, principal: principal, frames, now: now))
    }

    mutating func advance(by duration: Duration) {
        now = now + duration
        record(core.tick(now: now))
    }

    mutating func clientUnreachable(_ peer: PeerID) {
        record(core.clientUnreachable(peer, now: now))
    }

    mutating func workerUnreachable(_ peer: PeerID) {
        record(core.workerUnreachable(peer, now: now))
    }

    mutating func shutdown() {
        record(core.shutdown(now: now))
    }

    mutating func record(_ actions: [BrokerAction<Bytes>]) {
        for action in actions {
            switch action {
            case .sendToClient(let peer, let message, _, _):
                do {
                    toClients.append((peer, try ClientEvent(frames: message.frames)))
                } catch {
                    XCTFail("broker sent an undecodable client message: \(error)")
                }
            case .sendToWorker(let peer, let message):
                do {
                    toWorkers.append((peer, try WorkerCommand(frames: message.frames)))
                } catch {
                    XCTFail("broker sent an undecodable worker message: \(error)")
                }
            case .report(let report):
                reports.append(report)
            }
        }
    }

    // MARK: Collecting what was sent

    /// Everything sent to `peer` since the last call, in order.
    mutating func events(for peer: PeerID) -> [ClientEvent] {
        let (mine, others) = toClients.partitioned { $0.peer == peer }
        toClients = others
        return mine.map(\.event)
    }

    /// Everything but heartbeats sent to worker `peer` since the last call, in order.
    mutating func commands(for peer: PeerID) -> [WorkerCommand] {
        let (mine, others) = toWorkers.partitioned { $0.peer == peer }
        toWorkers = others
        return mine.map(\.command).filter { if case .heartbeat = $0 { false } else { true } }
    }

    mutating func discardPongs() {
        toClients.removeAll { if case .pong = $0.event { true } else { false } }
    }

    mutating func takeReports() -> [BrokerReport] {
        defer { reports = [] }
        return reports
    }

    /// The jobs sent to `peer` since the last call (other commands are discarded).
    mutating func jobs(for peer: PeerID) -> [Enlarger_V1_Job] {
        commands(for: peer).compactMap { if case .job(let job, _) = $0 { job } else { nil } }
    }

    // MARK: Common conversations

    /// Registers a worker and returns the jobs dispatched to it at once.
    @discardableResult
    mutating func ready(_ peer: PeerID, capacity: UInt32 = 1, name: String = "w") -> [Enlarger_V1_Job] {
        worker(peer, .ready(.with { $0.capacity = capacity; $0.workerName = name; $0.pid = 7 }))
        return jobs(for: peer)
    }

    mutating func submit(
        _ peer: PeerID, _ requestID: String, delivery: Enlarger_V1_Delivery = .progressive, image: Bytes = jpeg
    ) {
        client(peer, .submit(Self.submitMessage(requestID, delivery: delivery), image: image))
    }

    mutating func cancel(_ peer: PeerID, _ requestID: String) {
        client(peer, .cancel(.with { $0.requestID = requestID }))
    }

    mutating func result(
        _ peer: PeerID, _ job: Enlarger_V1_Job, _ stage: Enlarger_V1_Stage, terminal: Bool, attempt: UInt32? = nil
    ) {
        worker(peer, .jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = attempt ?? job.attempt
            $0.stage = stage
            $0.width = 32
            $0.height = 24
            $0.format = job.spec.format
            $0.terminal = terminal
        }, image: Self.image))
    }

    mutating func finish(_ peer: PeerID, _ job: Enlarger_V1_Job) {
        result(peer, job, .final, terminal: true)
    }

    static func submitMessage(_ requestID: String, delivery: Enlarger_V1_Delivery = .progressive) -> Enlarger_V1_Submit {
        .with {
            $0.requestID = requestID
            $0.spec.width = 64
            $0.delivery = delivery
        }
    }

    /// Internal consistency of the core's state; empty when all is well.
    var inconsistencies: [String] {
        var problems: [String] = []
        problems += core.waiting.inconsistencies
        var batchesBy: [Principal: Int] = [:]
        for key in core.batches.keys { batchesBy[key.principal, default: 0] += 1 }
        if batchesBy != core.liveBatchesBy { problems.append("live batches per principal are miscounted") }
        let queued = Set(core.waiting.allPlaces.keys)
        var running = RunningCounts()
        for (jobID, place) in core.waiting.allPlaces {
            guard let job = core.jobs[jobID], job.worker == nil else {
                problems.append("waiting job \(jobID) is not a live, unassigned job")
                continue
            }
            switch place {
            case .quarantine:
                if !job.quarantined { problems.append("job \(jobID) in quarantine unmarked") }
            case .heldBack(let peer):
                if core.requests[job.owner]?.client != peer { problems.append("held-back job \(jobID) not on its owner's list") }
            case .lane(let lane, let principal):
                if lane != job.lane { problems.append("job \(jobID) waits in \(lane), not its lane \(job.lane)") }
                if principal != job.owner.principal { problems.append("job \(jobID) waits for another principal than its owner's") }
            }
        }
        for job in core.jobs.values {
            if let key = job.runningAs {
                if job.worker == nil { problems.append("a waiting job is counted running") }
                running.add(key)
            } else if job.worker != nil {
                problems.append("a job on a worker is not counted running")
            }
            if let lowest = job.requests.compactMap({ core.requests[$0]?.lane }).min(), lowest < job.lane {
                problems.append("job waits in \(job.lane) while a request of it is \(lowest)")
            }
        }
        if running.byLane != core.running.byLane || running.byPrincipal != core.running.byPrincipal {
            problems.append("running counts \(core.running) disagree with the jobs (\(running))")
        }
        // Work-conserving: nothing dispatchable waits while a worker could take it.
        if core.workers.contains(where: \.takesOrdinaryJobs) {
            for (jobID, place) in core.waiting.allPlaces {
                guard case .lane(let lane, let principal) = place, core.hasRoom(for: lane) else { continue }
                if let limit = core.tenants.terms(for: principal).maxRunning, core.running.count(of: principal) >= limit {
                    continue
                }
                problems.append("job \(jobID) waits in \(lane) while a worker has credit")
                break
            }
        }
        for (principal, count) in core.running.byPrincipal {
            let quarantinedRunning = core.jobs.values.count { $0.quarantined && $0.runningAs?.principal == principal }
            if let limit = core.tenants.terms(for: principal).maxRunning, count - quarantinedRunning > limit {
                problems.append("\(principal) runs \(count) jobs, over its limit \(limit)")
            }
        }
        var requestsOnJobs = 0
        for (jobID, job) in core.jobs {
            if job.requests.isEmpty { problems.append("job \(jobID) without requests") }
            requestsOnJobs += job.requests.count
            for key in job.requests where core.requests[key]?.jobID != jobID {
                problems.append("job \(jobID) lists request \(key.id), which is not on it")
            }
            if let worker = job.worker {
                guard let index = core.workerIndex[worker] else {
                    problems.append("job \(jobID) held by unregistered worker")
                    continue
                }
                if core.workers[index].jobs[jobID] != job.attempt {
                    problems.append("job \(jobID) attempt not on its worker")
                }
            } else if !queued.contains(jobID) {
                problems.append("unassigned job \(jobID) is not queued")
            }
        }
        for (key, request) in core.requests {
            if core.jobs[request.jobID]?.requests.contains(key) != true {
                problems.append("request \(key.id) is not on its job \(request.jobID)")
            }
            if let only = request.onlyVariant, let job = core.jobs[request.jobID],
               job.variantsSent.contains(only) || !job.variants.contains(where: { $0.index == only }) {
                problems.append("request \(key.id) waits for variant \(only), which its job will not send")
            }
            if core.clients[request.client]?.requests.contains(key) != true {
                problems.append("client of \(key.id) does not list it")
            }
        }
        if requestsOnJobs != core.requests.count { problems.append("requests and jobs disagree") }
        for (jobID, job) in core.jobs where (core.jobCosts[jobID] ?? 1) != BrokerCore<Bytes>.fairShareCost(job) {
            problems.append("job \(jobID) costs \(core.jobCosts[jobID] ?? 1), not \(BrokerCore<Bytes>.fairShareCost(job))")
        }
        for jobID in core.jobCosts.keys where core.jobs[jobID] == nil { problems.append("a cost kept for ended job \(jobID)") }
        for (shareKey, jobID) in core.sharing.liveJobs where core.jobs[jobID]?.shareKey != shareKey {
            // Or the key of one of its variants still to come.
            if let job = core.jobs[jobID], let index = job.variantKeys.firstIndex(of: shareKey),
               !job.variantsSent.contains(UInt32(index)) {
                continue
            }
            problems.append("shared job index names job \(jobID) for another key")
        }
        // Each inline image once in the broker's count, and once for each principal with a
        // live request on a job holding it.
        var imageBytes = 0
        var imageBytesBy: [Principal: Int] = [:]
        var holders: [UInt64: [UInt64]] = [:]
        for (jobID, job) in core.jobs.sorted(by: { $0.key < $1.key }) {
            if job.image.count == 0 { if job.imageHold != nil { problems.append("job \(jobID) holds no bytes") } }
            else if let hold = job.imageHold { holders[hold, default: []].append(jobID) }
            else { problems.append("job \(jobID)'s image is not held") }
        }
        if Set(holders.keys) != Set(core.imageHolds.keys) { problems.append("image holds and jobs disagree") }
        var requestsOnHold: [UInt64: [Principal: Int]] = [:]
        for (key, request) in core.requests {
            if let hold = core.jobs[request.jobID]?.imageHold { requestsOnHold[hold, default: [:]][key.principal, default: 0] += 1 }
        }
        for (id, hold) in core.imageHolds {
            if Set(hold.jobs) != Set(holders[id] ?? []) { problems.append("image hold \(id) names other jobs") }
            if let first = hold.jobs.first, let job = core.jobs[first], job.image.count != hold.bytes {
                problems.append("image hold \(id) has the wrong size")
            }
            if hold.holders != requestsOnHold[id, default: [:]] {
                problems.append("image hold \(id) counts \(hold.holders), its jobs' requests are \(requestsOnHold[id, default: [:]])")
            }
            imageBytes += hold.bytes
            for principal in hold.holders.keys { imageBytesBy[principal, default: 0] += hold.bytes }
        }
        if imageBytes != core.liveImageBytes { problems.append("live image bytes \(core.liveImageBytes), jobs hold \(imageBytes)") }
        if imageBytesBy != core.liveImageBytesBy { problems.append("live image bytes per principal are miscounted") }
        let liveBy = Dictionary(grouping: core.requests.keys, by: \.principal).mapValues(\.count)
        if liveBy != core.liveRequestsBy { problems.append("live requests per principal are miscounted") }
        let batchPeers = core.batches.values.flatMap(\.peers).reduce(into: [PeerID: Int]()) { $0[$1, default: 0] += 1 }
        if batchPeers != core.batchPeers.mapValues(\.batches) { problems.append("connections named by batches are miscounted") }
        for (key, batch) in core.batches where batch.peers.contains(where: { core.batchPeers[$0]?.principal != key.principal }) {
            problems.append("batch \(key.id) names a connection as another principal's")
        }
        if core.sharing.cacheBytes > core.sharing.cacheLimit { problems.append("cache over its limit") }
        for (index, worker) in core.workers.enumerated() {
            if core.workerIndex[worker.id] != index { problems.append("worker index mismatch") }
            if worker.inFlight > worker.capacity { problems.append("worker \(worker.id) over capacity") }
            if worker.isExclusive && worker.inFlight != 1 {
                problems.append("worker \(worker.id) runs a quarantined job beside \(worker.inFlight - 1) others")
            }
            for jobID in worker.jobs.keys where core.jobs[jobID]?.worker != worker.id {
                problems.append("worker \(worker.id) holds job \(jobID) that is not assigned to it")
            }
            for jobID in worker.tombstones.keys where core.jobs[jobID] != nil {
                problems.append("tombstone for live job \(jobID)")
            }
        }
        for (peer, client) in core.clients where client.requests.isEmpty {
            problems.append("client \(peer) tracked without requests")
        }
        return problems
    }
}

extension Array {
    func partitioned(_ belongsInFirst: (Element) -> Bool) -> ([Element], [Element]) {
        var first: [Element] = []
        var second: [Element] = []
        for element in self {
            if belongsInFirst(element) { first.append(element) } else { second.append(element) }
        }
        return (first, second)
    }
}

extension PeerID: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) {
        self.init(Array(value.utf8))
    }
}

// Compact descriptions of events, so tests can compare whole conversations at a glance.
extension BrokerToClientMessage {
    var summary: String {
        switch self {
        case .accepted(let m): "accepted \(m.requestID)"
        case .started(let m): "started \(m.requestID) #\(m.attempt)"
        case .result(let m, _): "result \(m.requestID) \(m.stage)\(m.terminal ? " terminal" : "")\(m.cached ? " cached" : "")"
        case .failed(let m): "failed \(m.requestID) \(m.code)"
        case .cancelled(let m): "cancelled \(m.requestID)"
        case .rejected(let m): "rejected \(m.requestID) \(m.code)"
        case .cancelAck(let m): "cancelAck \(m.requestID) \(m.outcome)"
        case .statusReply: "status"
        case .pong: "pong"
        case .error(let m): "error \(m.code)"
        case .syncReply(let m): "syncReply \(m.unknownRequestIds)"
        case .download(let m): "download \(m.requestID) \(m.phase) \(m.bytes)"
        case .batchEnded(let m): "batchEnded \(m.batchID) \(m.outcome)\(m.outcome == .completed ? "" : " \(m.index) \(m.code)")"
        }
    }
}

extension BrokerToWorkerMessage {
    var summary: String {
        switch self {
        case .job(let m, _): "job \(m.jobID) #\(m.attempt) \(m.delivery)"
        case .cancelJob(let m): "cancelJob \(m.jobID) #\(m.attempt)"
        case .heartbeat: "heartbeat"
        case .disconnect: "disconnect"
        case .error(let m): "error \(m.code)"
        }
    }
}
