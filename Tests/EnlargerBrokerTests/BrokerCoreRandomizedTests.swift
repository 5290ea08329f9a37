import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker
import TestSupport

/// Thousands of random interleavings of submits, cancels (from the submitter and from other
/// clients), worker results, failures, deaths, departures, stale frames, garbage and time,
/// checked against the broker's invariants from the outside (what the peers receive) and
/// the inside (the core's own bookkeeping).
///
/// The seed is printed; replay a failure with `ENLARGER_BROKER_SEED=<seed>` (and
/// `ENLARGER_BROKER_RUNS=1` to replay only the failing run, whose seed the failure names).
/// `ENLARGER_BROKER_RUNS` and `ENLARGER_BROKER_STEPS` scale the test.
final class BrokerCoreRandomizedTests: XCTestCase {
    func testRandomInterleavingsKeepTheInvariants() {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["ENLARGER_BROKER_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        let runs = environment["ENLARGER_BROKER_RUNS"].flatMap { Int($0) } ?? 150
        let steps = environment["ENLARGER_BROKER_STEPS"].flatMap { Int($0) } ?? 400
        print("BrokerCore randomized test: ENLARGER_BROKER_SEED=\(seed), \(runs) runs of \(steps) steps")

        var totalAccepted: UInt64 = 0
        var shared: UInt64 = 0, cached: UInt64 = 0, completed: UInt64 = 0, failed: UInt64 = 0, variantSharers = 0
        for run in 0..<runs {
            let runSeed = seed &+ UInt64(run)
            let simulation = Simulation(seed: runSeed)
            simulation.run(steps: steps)
            totalAccepted += simulation.broker.totals.accepted
            shared += simulation.broker.totals.jobsShared
            variantSharers += simulation.variantSharers
            cached += simulation.broker.totals.cacheHits
            completed += simulation.broker.totals.batchesCompleted
            failed += simulation.broker.totals.batchesFailed + simulation.broker.totals.batchesCancelled
            if !simulation.problems.isEmpty {
                let shown = simulation.problems.prefix(10).joined(separator: "\n  ")
                XCTFail("run \(run) failed; replay with ENLARGER_BROKER_SEED=\(runSeed) ENLARGER_BROKER_RUNS=1\n  \(shown)")
                return
            }
        }
        XCTAssertGreaterThan(totalAccepted, UInt64(runs), "the simulation should accept plenty of requests")
        XCTAssertGreaterThan(shared, UInt64(runs), "requests should often share a job")
        XCTAssertGreaterThan(cached, UInt64(runs), "requests should often be answered from the cache")
        XCTAssertGreaterThan(variantSharers, runs / 30, "single requests should now and then share a set's variant")
        // Sets and their failures end some batches early: 75-114 completions a sitting were seen.
        XCTAssertGreaterThan(completed, UInt64(runs) / 3, "batches should often complete")
        XCTAssertGreaterThan(failed, UInt64(runs) / 2, "batches should often fail or be cancelled")
        print("  \(totalAccepted) accepted, \(shared) joined a live job, \(cached) answered from the cache, "
              + "\(completed) batches completed, \(failed) failed or cancelled, \(variantSharers) shared one variant of a set")
    }
}


extension SeededGenerator {
    mutating func chance(_ probability: Double) -> Bool {
        Double.random(in: 0..<1, using: &self) < probability
    }
}

private final class Simulation {
    // MARK: Simulated peers

    struct SimClient {
        let peer: PeerID
        var asleep = false
    }

    struct HeldJob {
        let job: Enlarger_V1_Job
        var cancelled = false
        var started = false
        var degradedSent = false
        /// For a set: the variants this attempt has sent.
        var variantsSent: Set<UInt32> = []
        /// For a file job: the version it reported opening.
        var opened: Data?
    }

    struct SimWorker {
        let peer: PeerID
        var capacity = 1
        /// The broker has it registered (as far as the test can tell from what it observed).
        var registered = false
        var frozen = false
        /// Jobs the broker counts against this worker's credit, in arrival order.
        var jobs: [HeldJob] = []
        /// Attempts the worker held in an earlier life; it may still send frames about them.
        var zombies: [Enlarger_V1_Job] = []
    }

    // MARK: What the clients have seen

    struct Track {
        let delivery: Enlarger_V1_Delivery
        var degraded = false
        /// A set's variant count (0: one output), and the indexes received.
        var variants = 0
        var variantsSeen: Set<UInt32> = []
    }

    var rng: SeededGenerator
    var now = MonotonicInstant(nanoseconds: 5_000_000_000)
    var broker: BrokerCore<Bytes>
    var clients: [SimClient]
    var workers: [SimWorker] = []
    /// Live requests as the clients see them: request id → (owner, track).
    var live: [String: (owner: PeerID, track: Track)] = [:]
    /// Submits sent in the current step, awaiting their first answer.
    var pendingSubmits: [(peer: PeerID, requestID: String, delivery: Enlarger_V1_Delivery, variants: Int)] = []
    /// Cache keys ("digest-byte terminal-stage") of results a worker vouched for: a cached
    /// answer is only ever one of these.
    var vouched: Set<String> = []
    /// The cache key each live shareable request would be answered from (for a set, its
    /// first variant's; `variantKey` gives the others).
    var cacheKeys: [String: String] = [:]
    /// Requests whose Submit was answered from the cache in the current step.
    var answeredFromCache = 0
    /// Single-output requests that joined a set's job for one of its variants.
    var variantSharers = 0
    /// The image of the Submit being sent, and of each live request.
    var submitting: Bytes = []
    var images: [String: Bytes] = [:]
    /// File sources: the file each live file request names, and each file's current version
    /// (it changes now and then, as a file on disk would).
    var submittingFile: String?
    var fileOf: [String: String] = [:]
    var fileVersions = ["f0": 0, "f1": 0]
    /// The batch the Submit being sent names, if any, and each live request's batch.
    var submittingBatch: (id: String, size: UInt32)?
    var batchOf: [String: String] = [:]
    /// Batches with an accepted item and no BatchEnded yet: their size, and how many of
    /// their items ended with a result.
    var openBatches: [String: (size: UInt32, finished: Int)] = [:]
    var batchesEnded = 0
    var expectedErrors: [PeerID: Int] = [:]
    var accepted = 0
    var endedLoudly = 0
    /// "id outcome CODE" per request end, as clients were told and as the core reported it.
    var toldEnds: [String] = []
    var reportedEnds: [String] = []
    var problems: [String] = []
    var step = 0

    let requestIDs = (0..<10).map { "r\($0)" }
    let heartbeat = Duration.milliseconds(100)

    init(seed: UInt64) {
        rng = SeededGenerator(seed: seed)
        var configuration = BrokerConfiguration()
        configuration.heartbeatInterval = heartbeat
        configuration.heartbeatLiveness = 3
        configuration.queueLimit = 6
        configuration.maxInputBytes = 64
        configuration.cancelAckTimeout = .seconds(2)
        configuration.endedRequestMemoryLimit = 8
        configuration.endedRequestMemoryDuration = .seconds(1)
        // Batches with missing items end at their first item's deadline: soon, in the drain.
        configuration.defaultDeadline = .seconds(5)
        // Lanes, the interactive reserve and a principal's limits, differently each run.
        configuration.interactiveReserve = [0, 0.25, 0.5].randomElement(using: &rng)!
        if rng.chance(0.5) {
            configuration.tenants = TenantPolicy(defaults: .init(
                weight: Int.random(in: 1...3, using: &rng), maxQueued: rng.chance(0.5) ? Int.random(in: 1...4, using: &rng) : nil,
                maxRunning: rng.chance(0.5) ? Int.random(in: 1...2, using: &rng) : nil))
        }
        broker = BrokerCore(configuration: configuration, now: now)
        clients = (0..<3).map { SimClient(peer: PeerID(Array("client-\($0)".utf8))) }
    }

    func problem(_ text: String) {
        problems.append("step \(step): \(text)")
    }

    // MARK: Running

    func run(steps: Int) {
        addWorker()
        for index in 0..<steps {
            step = index
            randomStep()
            checkInside()
            if !problems.isEmpty { return }
        }
        drain()
        checkEnd()
    }

    private func randomStep() {
        let roll = Int.random(in: 0..<100, using: &rng)
        switch roll {
        case 0..<24: submit()
        case 24..<34: cancel()
        case 34..<66: workerActs()
        case 66..<70: addWorker()
        case 70..<72: resetWorker()
        case 72..<74: workerDisconnects()
        case 74..<76: toggleFreeze()
        case 76..<79: reregister()
        case 79..<83: zombieFrame()
        case 83..<86: garbage()
        case 86..<88: toggleSleep()
        case 88..<89: unreachable()
        case 89..<91: status()
        case 91..<93: backlog()
        case 93..<94: fileChanges()
        default: timePasses(upTo: 250)
        }
    }

    // MARK: Client behaviour

    private func awakeClient() -> SimClient? {
        clients.filter { !$0.asleep }.randomElement(using: &rng)
    }

    private func submit() {
        guard let client = awakeClient() else { return }
        let requestID = requestIDs.randomElement(using: &rng)!
        let delivery = [Enlarger_V1_Delivery.progressive, .final, .degraded].randomElement(using: &rng)!
        var submit = Enlarger_V1_Submit()
        submit.requestID = requestID
        submit.spec.width = rng.chance(0.03) ? 0 : 100
        submit.delivery = delivery
        if rng.chance(0.4) { submit.priority = .bulk }
        if rng.chance(0.1) { submit.deadlineMs = UInt32.random(in: 100...3000, using: &rng) }
        // Two images, often named by their digest (so requests share jobs and cached
        // results), now and then with a digest that belongs to the other image.
        let which = Int.random(in: 0..<2, using: &rng)
        var image = Bytes(repeating: 0xD8 + UInt8(which), count: rng.chance(0.03) ? 65 : 8)
        submittingFile = nil
        if rng.chance(0.3) {
            // A file source: no bytes, no digest; what it is, only its worker finds out.
            image = []
            submittingFile = "f\(which)"
            submit.source.file.path = "f\(which)"
            submit.source.noShare = rng.chance(0.1)
            cacheKeys[requestID] = nil
        } else if rng.chance(0.6) {
            let named = rng.chance(0.05) ? 1 - which : which
            submit.source.inline.sha256 = Data(repeating: UInt8(named), count: 32)
            cacheKeys[requestID] = "\(named) \(delivery == .degraded ? "degraded" : "final")"
        } else {
            cacheKeys[requestID] = nil
        }
        // Now and then an item of one of two batches, at a random place (sometimes one that
        // does not fit).
        submittingBatch = nil
        if rng.chance(0.25) {
            let batchID = ["B0", "B1"].randomElement(using: &rng)!
            let size = UInt32.random(in: 1...3, using: &rng)
            submit.batch = .with {
                $0.batchID = batchID
                $0.size = size
                $0.index = UInt32.random(in: 0..<(rng.chance(0.05) ? size + 1 : size), using: &rng)
            }
            submittingBatch = (batchID, size)
        }
        // Now and then a set of two outputs, the first the single requests' own spec, so a
        // single request may share it, or be answered by its cached final, and the other way
        // round.
        var variants = 0
        if submittingFile == nil && delivery != .degraded && rng.chance(0.35) {
            variants = 2
            submit.variants = [.with { $0.width = 100 }, .with { $0.width = 50 }]
        }
        pendingSubmits.append((client.peer, requestID, delivery, variants))
        submitting = image
        send(client: client.peer, ClientToBrokerMessage.submit(submit, image: image).encoded().frames)
        if broker.requests.values.contains(where: { $0.requestID == requestID && $0.client == client.peer && $0.onlyVariant != nil }) {
            variantSharers += 1
        }
        if let pending = pendingSubmits.first {
            problem("Submit \(pending.requestID) from \(pending.peer) got no first answer")
            pendingSubmits.removeAll()
        }
    }

    private func cancel() {
        guard let client = awakeClient() else { return }
        let requestID = requestIDs.randomElement(using: &rng)!
        let owner = live[requestID]?.owner
        let actions = broker.clientFrames(
            from: client.peer, ClientToBrokerMessage<Bytes>.cancel(.with { $0.requestID = requestID }).encoded().frames,
            now: now)
        let summaries = actions.compactMap { action -> String? in
            guard case .sendToClient(let peer, let message, _, _) = action,
                  let event = try? BrokerToClientMessage(frames: message.frames),
                  event.requestID == requestID
            else { return nil }
            return "\(peer) \(event.summary)"
        }
        perform(actions)
        let ack = summaries.last ?? "none"
        if let owner {
            if summaries != ["\(owner) cancelled \(requestID)", "\(client.peer) cancelAck \(requestID) cancelled"] {
                problem("cancel of live \(requestID) answered \(summaries)")
            }
        } else if !ack.hasSuffix("finished") && !ack.hasSuffix("unknown") {
            problem("cancel of ended \(requestID) answered \(summaries)")
        }
    }

    /// The I/O loop reports that a client is (or is no longer) not reading: its work must
    /// be held back meanwhile and released afterwards, without breaking any invariant.
    private func backlog() {
        let client = clients.randomElement(using: &rng)!
        let bytes = rng.chance(0.5) ? 0 : Int.random(in: 1...10_000_000, using: &rng)
        perform(broker.clientBacklog(client.peer, waitingBytes: bytes, now: now))
    }

    private func toggleSleep() {
        let index = Int.random(in: 0..<clients.count, using: &rng)
        clients[index].asleep.toggle()
    }

    // MARK: Worker behaviour

    private func addWorker() {
        let peer = PeerID(Array("worker-\(workers.count)".utf8))
        workers.append(SimWorker(peer: peer))
        register(workers.count - 1)
    }

    private func register(_ index: Int) {
        workers[index].capacity = Int.random(in: 1...3, using: &rng)
        workers[index].registered = true
        workers[index].frozen = false
        workers[index].zombies += workers[index].jobs.map(\.job)
        workers[index].jobs = []
        let ready = Enlarger_V1_Ready.with {
            $0.capacity = UInt32(workers[index].capacity)
            $0.workerName = "sim"
        }
        send(worker: workers[index].peer, WorkerToBrokerMessage<Bytes>.ready(ready).encoded().frames)
    }

    private func activeWorkerIndex(withJobs: Bool = false) -> Int? {
        workers.indices.filter {
            workers[$0].registered && !workers[$0].frozen && (!withJobs || !workers[$0].jobs.isEmpty)
        }.randomElement(using: &rng)
    }

    private func resetWorker() {
        guard let index = activeWorkerIndex() else { return }
        register(index)
    }

    private func reregister() {
        guard let index = workers.indices.filter({ !workers[$0].registered && !workers[$0].frozen })
            .randomElement(using: &rng)
        else { return }
        register(index)
    }

    private func workerDisconnects() {
        guard let index = activeWorkerIndex() else { return }
        workers[index].registered = false
        workers[index].zombies += workers[index].jobs.map(\.job)
        workers[index].jobs = []
        send(worker: workers[index].peer, WorkerToBrokerMessage<Bytes>.disconnect.encoded().frames)
    }

    private func toggleFreeze() {
        guard let index = workers.indices.randomElement(using: &rng) else { return }
        workers[index].frozen.toggle()
    }

    private func workerActs() {
        guard let index = activeWorkerIndex(withJobs: true) else { return }
        let position = Int.random(in: 0..<workers[index].jobs.count, using: &rng)
        let held = workers[index].jobs[position]
        let job = held.job
        let peer = workers[index].peer

        if held.cancelled {
            // Usually the ack; sometimes the job finished before the worker saw the cancel.
            workers[index].jobs.remove(at: position)
            if rng.chance(0.7) {
                send(worker: peer, WorkerToBrokerMessage<Bytes>.jobCancelled(.with {
                    $0.jobID = job.jobID
                    $0.attempt = job.attempt
                }).encoded().frames)
            } else {
                sendResult(peer, job, stage: job.delivery == .degraded ? .degraded : .final, terminal: true)
            }
            return
        }

        if let file = job.hasSource ? (job.source.file.path.isEmpty ? nil : job.source.file.path) : nil,
           held.opened == nil, rng.chance(0.8) {
            // A file job names the version it opened before anything else (now and then
            // after a download step).
            if rng.chance(0.3) {
                send(worker: peer, WorkerToBrokerMessage<Bytes>.jobDownload(.with {
                    $0.jobID = job.jobID
                    $0.attempt = job.attempt
                    $0.phase = .progress
                    $0.bytes = 10
                }).encoded().frames)
            }
            let identity = Self.identity(file, fileVersions[file]!)
            workers[index].jobs[position].opened = identity
            send(worker: peer, WorkerToBrokerMessage<Bytes>.jobSourceOpened(.with {
                $0.jobID = job.jobID
                $0.attempt = job.attempt
                $0.identity = identity
            }).encoded().frames)
            return
        }
        let roll = Int.random(in: 0..<10, using: &rng)
        if !job.variants.isEmpty && (roll >= 3 || held.started) && roll < 9 {
            sendNextVariant(of: index, at: position)
            return
        }
        if !held.started && roll < 3 {
            workers[index].jobs[position].started = true
            send(worker: peer, WorkerToBrokerMessage<Bytes>.jobStarted(.with {
                $0.jobID = job.jobID
                $0.attempt = job.attempt
            }).encoded().frames)
        } else if job.delivery == .progressive && !held.degradedSent && roll < 6 {
            workers[index].jobs[position].degradedSent = true
            sendResult(peer, job, stage: .degraded, terminal: false, opened: held.opened)
        } else if roll < 9 {
            workers[index].jobs.remove(at: position)
            sendResult(peer, job, stage: job.delivery == .degraded ? .degraded : .final, terminal: true, opened: held.opened)
        } else {
            workers[index].jobs.remove(at: position)
            send(worker: peer, WorkerToBrokerMessage<Bytes>.jobFailed(.with {
                $0.jobID = job.jobID
                $0.attempt = job.attempt
                // A failure of the image, or one that may be one output's (see
                // giveVariantSharersJobsOfTheirOwn).
                $0.code = [.corrupt, .tooLarge].randomElement(using: &rng)!
                $0.message = "simulated"
            }).encoded().frames)
        }
    }

    /// One of a set's variants not yet sent by this attempt, in any order; the last terminal.
    private func sendNextVariant(of index: Int, at position: Int) {
        let held = workers[index].jobs[position]
        let left = held.job.variants.map(\.index).filter { !held.variantsSent.contains($0) }
        let next = left.randomElement(using: &rng)!
        let terminal = left.count == 1
        if terminal {
            workers[index].jobs.remove(at: position)
        } else {
            workers[index].jobs[position].variantsSent.insert(next)
        }
        sendResult(workers[index].peer, held.job, stage: .final, terminal: terminal, variant: next)
    }

    /// The width of a set's variant `index` (variant 0 is a single request's spec).
    static func width(of index: UInt32) -> UInt32 { index == 0 ? 100 : 50 }

    /// The cache key of a set's variant `index` (variant 0 is a single request's spec).
    static func variantKey(_ key: String, _ index: UInt32) -> String {
        index == 0 ? key : "\(key) w50"
    }

    /// The identity a worker reports for `file` at `version`.
    static func identity(_ file: String, _ version: Int) -> Data {
        Data("file\u{0}\(file)\u{0}\(version)".utf8)
    }

    /// A file changes on disk: jobs that open it from now on find another version.
    private func fileChanges() {
        let file = ["f0", "f1"].randomElement(using: &rng)!
        fileVersions[file]! += 1
    }

    private func sendResult(
        _ peer: PeerID, _ job: Enlarger_V1_Job, stage: Enlarger_V1_Stage, terminal: Bool, opened: Data? = nil,
        variant: UInt32? = nil
    ) {
        let verified = job.hasSource && rng.chance(0.8)
        // A set's frame names a variant (a tombstone's last frame too: it is dropped unread).
        let variant = variant ?? job.variants.last?.index
        let result = Enlarger_V1_JobResult.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = stage
            // A set's variant has its own spec's width: a request given another's would show.
            $0.width = variant.flatMap { index in job.variants.first { $0.index == index }?.spec.width } ?? 100
            $0.height = 50
            $0.terminal = terminal
            $0.digestVerified = verified
            $0.variant = variant ?? 0
        }
        if verified, let variant, let named = job.source.inline.sha256.first {
            vouched.insert(Self.variantKey("\(named) final", variant))
        } else if verified && terminal, let named = job.source.inline.sha256.first {
            vouched.insert("\(named) \(stage == .degraded ? "degraded" : "final")")
        }
        if verified && terminal, let opened {
            vouched.insert("\(opened.base64EncodedString()) \(stage == .degraded ? "degraded" : "final")")
        }
        send(worker: peer, WorkerToBrokerMessage.jobResult(result, image: Bytes([1, 2, 3])).encoded().frames)
    }

    /// A frame about an attempt the worker held in an earlier life: always late, never
    /// forwarded, whatever happened to the request since.
    private func zombieFrame() {
        guard let index = workers.indices.filter({ !workers[$0].frozen && !workers[$0].zombies.isEmpty })
            .randomElement(using: &rng)
        else { return }
        let job = workers[index].zombies.randomElement(using: &rng)!
        let before = broker.totals.lateResultsDropped
        sendResult(workers[index].peer, job, stage: .final, terminal: true)
        if broker.totals.lateResultsDropped != before + 1 {
            problem("zombie frame for job \(job.jobID) #\(job.attempt) was not counted as late")
        }
    }

    private func garbage() {
        let frames: [Bytes] = [Array("ENL-C1".utf8), [0xFF, 0x01]]
        if rng.chance(0.5), let client = awakeClient() {
            expectedErrors[client.peer, default: 0] += 1
            send(client: client.peer, frames)
        } else if let index = activeWorkerIndex() {
            expectedErrors[workers[index].peer, default: 0] += 1
            send(worker: workers[index].peer, frames)
        }
        if !expectedErrors.isEmpty { problem("malformed input not answered with Error: \(expectedErrors)") }
        expectedErrors.removeAll()
    }

    private func unreachable() {
        if rng.chance(0.5) {
            let client = clients.randomElement(using: &rng)!
            perform(broker.clientUnreachable(client.peer, now: now))
        } else if let index = activeWorkerIndex() {
            perform(broker.workerUnreachable(workers[index].peer, now: now))
        }
    }

    private func status() {
        let status = broker.status(now: now)
        for worker in status.workers where worker.inFlight > worker.capacity {
            problem("status shows worker \(worker.id) with \(worker.inFlight) of \(worker.capacity)")
        }
        if status.queueDepth > status.queueLimit + UInt32(workers.count * 3) {
            problem("queue depth \(status.queueDepth) beyond limit plus requeued work")
        }
    }

    /// Peers that are awake send their heartbeats (now and then one is missed), then time
    /// moves on and the core ticks.
    private func timePasses(upTo milliseconds: Int) {
        for client in clients where !client.asleep && live.values.contains(where: { $0.owner == client.peer }) {
            if rng.chance(0.9) { send(client: client.peer, ClientToBrokerMessage<Bytes>.ping.encoded().frames) }
        }
        for worker in workers where worker.registered && !worker.frozen {
            if rng.chance(0.9) { send(worker: worker.peer, WorkerToBrokerMessage<Bytes>.heartbeat.encoded().frames) }
        }
        now = now + .milliseconds(Int.random(in: 0...milliseconds, using: &rng))
        perform(broker.tick(now: now))
    }

    // MARK: Moving frames and checking what comes back

    private func send(client peer: PeerID, _ frames: [Bytes]) {
        perform(broker.clientFrames(from: peer, frames, now: now))
    }

    private func send(worker peer: PeerID, _ frames: [Bytes]) {
        perform(broker.workerFrames(from: peer, frames, now: now))
    }

    private func perform(_ actions: [BrokerAction<Bytes>]) {
        for action in actions {
            switch action {
            case .sendToClient(let peer, let message, _, _):
                guard let event = try? BrokerToClientMessage(frames: message.frames) else {
                    problem("undecodable message to client \(peer)")
                    continue
                }
                observe(event, by: peer)
            case .sendToWorker(let peer, let message):
                guard let command = try? BrokerToWorkerMessage(frames: message.frames) else {
                    problem("undecodable message to worker \(peer)")
                    continue
                }
                observe(command, by: peer)
            case .report(let report):
                observe(report)
            }
        }
    }

    private func observe(_ event: BrokerToClientMessage<Bytes>, by peer: PeerID) {
        let id = event.requestID ?? ""
        let owner = live[id]?.owner
        switch event {
        case .accepted:
            guard let index = pendingSubmits.firstIndex(where: { $0.peer == peer && $0.requestID == id }) else {
                return problem("unexpected \(event.summary) to \(peer)")
            }
            let pending = pendingSubmits.remove(at: index)
            if owner != nil { problem("\(id) accepted while live for \(owner!)") }
            answeredFromCache = 0
            images[id] = submitting
            fileOf[id] = submittingFile
            batchOf[id] = submittingBatch?.id
            if let batch = submittingBatch, openBatches[batch.id] == nil { openBatches[batch.id] = (batch.size, 0) }
            live[id] = (peer, Track(delivery: pending.delivery, variants: pending.variants))
            accepted += 1
        case .rejected(let rejected):
            answerSubmit(id, peer, event)
            toldEnds.append("\(id) rejected \(rejected.code.contractName)")
        case .failed(let failed) where failed.code == .duplicateID:
            answerSubmit(id, peer, event)
            if owner == nil { problem("duplicate refused for \(id), which is not live") }
        case .started:
            if owner != peer { problem("\(event.summary) to \(peer), owner \(String(describing: owner))") }
        case .result(let result, _) where !result.terminal:
            guard owner == peer, let track = live[id]?.track else {
                return problem("\(event.summary) to \(peer) after the end or to a stranger")
            }
            if track.variants > 0 {
                if result.stage != .final || Int(result.variant) >= track.variants || result.width != Self.width(of: result.variant)
                    || !live[id]!.track.variantsSeen.insert(result.variant).inserted {
                    problem("\(event.summary) variant \(result.variant) is not a set's next final")
                }
                if result.cached, !vouched.contains(Self.variantKey(cacheKeys[id] ?? "-", result.variant)) {
                    problem("\(id) variant \(result.variant) answered from the cache with no vouched result")
                }
                return
            }
            if result.variant != 0 { problem("\(event.summary) of one output names variant \(result.variant)") }
            if result.stage != .degraded || track.delivery != .progressive || track.degraded {
                problem("non-terminal \(event.summary) breaks delivery \(track.delivery)")
            }
            live[id]?.track.degraded = true
        case .result, .failed, .cancelled:
            guard owner == peer, let track = live[id]?.track else {
                return problem("terminal \(event.summary) to \(peer), owner \(String(describing: owner))")
            }
            if case .result(let result, _) = event, result.stage != (track.delivery == .degraded ? .degraded : .final) {
                problem("terminal \(event.summary) does not fit delivery \(track.delivery)")
            }
            if case .result(let result, _) = event, result.width != Self.width(of: track.variants > 0 ? result.variant : 0) {
                problem("terminal \(event.summary) is \(result.width) wide, variant \(result.variant) of \(track.variants)")
            }
            if case .result(let result, _) = event, track.variants > 0 {
                // The one that completes the set, each variant once.
                if Int(result.variant) >= track.variants || track.variantsSeen.contains(result.variant)
                    || track.variantsSeen.count != track.variants - 1 {
                    problem("terminal \(event.summary) variant \(result.variant) after \(track.variantsSeen.sorted()) of \(track.variants)")
                }
                if result.cached, !vouched.contains(Self.variantKey(cacheKeys[id] ?? "-", result.variant)) {
                    problem("\(id) variant \(result.variant) answered from the cache with no vouched result")
                }
            } else if case .result(let result, _) = event, result.variant != 0 {
                problem("terminal \(event.summary) of one output names variant \(result.variant)")
            }
            if case .result(let result, _) = event, result.cached, let file = fileOf[id] {
                // Answered when its worker opened the file: only from the version it found,
                // the current one, never a stale one.
                let key = "\(Self.identity(file, fileVersions[file]!).base64EncodedString()) \(result.stage == .degraded ? "degraded" : "final")"
                if !vouched.contains(key) { problem("\(id) answered from the cache with no vouched result of \(file)'s current version") }
                answeredFromCache += 1
            } else if case .result(let result, _) = event, result.cached, track.variants > 0 {
                answeredFromCache += 1
            } else if case .result(let result, _) = event, result.cached {
                guard let key = cacheKeys[id], vouched.contains(key) else {
                    return problem("\(id) answered from the cache with no vouched result for \(cacheKeys[id] ?? "no digest")")
                }
                answeredFromCache += 1
            }
            live[id] = nil
            fileOf[id] = nil
            endedLoudly += 1
            if case .result = event, let batch = batchOf[id] { openBatches[batch]?.finished += 1 }
            batchOf[id] = nil
            switch event {
            case .failed(let failed): toldEnds.append("\(id) failed \(failed.code.contractName)")
            case .cancelled: toldEnds.append("\(id) cancelled CANCELLED")
            default: toldEnds.append("\(id) finished OK")
            }
        case .error:
            guard expectedErrors[peer, default: 0] > 0 else { return problem("unexpected \(event.summary) to client \(peer)") }
            expectedErrors[peer] = expectedErrors[peer]! - 1 == 0 ? nil : expectedErrors[peer]! - 1
        case .download:
            if owner != peer || fileOf[id] == nil { problem("\(event.summary) to \(peer), owner \(String(describing: owner))") }
        case .cancelAck, .statusReply, .pong, .syncReply:
            break
        case .batchEnded(let ended):
            batchesEnded += 1
            let stillLive = batchOf.filter { $0.value == ended.batchID && live[$0.key] != nil }.keys.sorted()
            if !stillLive.isEmpty { problem("batch \(ended.batchID) ended before its items \(stillLive)") }
            if let open = openBatches.removeValue(forKey: ended.batchID) {
                if ended.outcome == .completed && open.finished != Int(open.size) {
                    problem("batch \(ended.batchID) completed with \(open.finished) of \(open.size) results")
                }
                if ended.outcome != .completed && open.finished == Int(open.size) {
                    problem("batch \(ended.batchID) had all \(open.size) results but ended \(ended.outcome)")
                }
            } else if ended.outcome == .completed {
                problem("batch \(ended.batchID) completed, but none of its items was accepted")
            }
        }
    }

    private func answerSubmit(_ id: String, _ peer: PeerID, _ event: BrokerToClientMessage<Bytes>) {
        guard let index = pendingSubmits.firstIndex(where: { $0.peer == peer && $0.requestID == id }) else {
            return problem("unexpected \(event.summary) to \(peer)")
        }
        pendingSubmits.remove(at: index)
    }

    private func observe(_ command: BrokerToWorkerMessage<Bytes>, by peer: PeerID) {
        guard let index = workers.firstIndex(where: { $0.peer == peer }) else {
            return problem("\(command.summary) to unknown worker \(peer)")
        }
        switch command {
        case .job(let job, _):
            if !workers[index].registered { problem("job sent to unregistered \(peer)") }
            if workers[index].jobs.count >= workers[index].capacity {
                problem("credit exceeded on \(peer): \(workers[index].jobs.count) of \(workers[index].capacity)")
            }
            if workers[index].jobs.contains(where: { $0.job.jobID == job.jobID }) {
                problem("job \(job.jobID) sent twice to \(peer)")
            }
            workers[index].jobs.append(HeldJob(job: job))
        case .cancelJob(let cancel):
            guard let position = workers[index].jobs.firstIndex(where: {
                $0.job.jobID == cancel.jobID && $0.job.attempt == cancel.attempt
            }) else {
                return problem("\(command.summary) for a job \(peer) does not hold")
            }
            workers[index].jobs[position].cancelled = true
        case .disconnect:
            if workers[index].registered { problem("registered \(peer) was sent Disconnect") }
            workers[index].registered = false
            workers[index].zombies += workers[index].jobs.map(\.job)
            workers[index].jobs = []
        case .error:
            guard expectedErrors[peer, default: 0] > 0 else { return problem("unexpected \(command.summary) to worker \(peer)") }
            expectedErrors[peer] = expectedErrors[peer]! - 1 == 0 ? nil : expectedErrors[peer]! - 1
        case .heartbeat:
            break
        }
    }

    private func observe(_ report: BrokerReport) {
        switch report {
        case .clientVanished(let peer, _):
            // Each of its requests has just ended loudly, with Failed{CLIENT_SILENT}.
            let mine = live.filter { $0.value.owner == peer }.map(\.key)
            if !mine.isEmpty { problem("client \(peer) vanished with \(mine.count) requests not ended") }
        case .workerLost(let peer, _, _, _), .workerLeft(let peer, _):
            guard let index = workers.firstIndex(where: { $0.peer == peer }) else { return }
            workers[index].registered = false
            workers[index].zombies += workers[index].jobs.map(\.job)
            workers[index].jobs = []
        case .cancelAckTimedOut(let peer, let jobID):
            guard let index = workers.firstIndex(where: { $0.peer == peer }) else { return }
            workers[index].zombies += workers[index].jobs.filter { $0.job.jobID == jobID }.map(\.job)
            workers[index].jobs.removeAll { $0.job.jobID == jobID }
        case .workerRegistered(let peer, _, _):
            guard let index = workers.firstIndex(where: { $0.peer == peer }) else { return }
            workers[index].registered = true
        case .malformed:
            break
        case .requestEnded(let end):
            reportedEnds.append("\(end.requestID) \(end.outcome.name) \(end.outcome.code)")
            if end.attempts == 0, end.queueWait != nil { problem("\(end.requestID) never dispatched but has a queue wait") }
            if let wait = end.queueWait, wait > end.duration { problem("\(end.requestID) waited longer than it lived") }
        case .requestRejected(let requestID, let code):
            reportedEnds.append("\(requestID) rejected \(code.contractName)")
        }
    }

    // MARK: Invariants

    private func checkInside() {
        var harness = CoreHarness()
        harness.core = broker
        for inconsistency in harness.inconsistencies { problem(inconsistency) }
        // Requests share a job only when they sent the same bytes, and named the same file.
        for (jobID, job) in broker.jobs {
            for key in job.requests where images[key.id] != job.image {
                problem("request \(key.id) with other bytes shares job \(jobID)")
            }
            let files = Set(job.requests.map { fileOf[$0.id] ?? "-" })
            if files.count > 1 { problem("requests for \(files.sorted()) share job \(jobID)") }
        }
        if broker.liveRequestCount != live.count {
            problem("broker has \(broker.liveRequestCount) live requests, clients see \(live.count)")
        }
        for worker in workers where worker.registered {
            guard let index = broker.workerIndex[worker.peer] else {
                problem("\(worker.peer) should be registered")
                continue
            }
            let held = broker.workers[index]
            if held.inFlight != worker.jobs.count {
                problem("\(worker.peer): broker counts \(held.inFlight) in flight, worker holds \(worker.jobs.count)")
            }
        }
    }

    /// Everyone wakes up and behaves until every request has ended.
    private func drain() {
        for index in clients.indices {
            clients[index].asleep = false
            perform(broker.clientBacklog(clients[index].peer, waitingBytes: 0, now: now))
        }
        for index in workers.indices { workers[index].frozen = false }
        addWorker()
        for round in 0..<400 {
            step = 100_000 + round
            for index in workers.indices where !workers[index].registered { register(index) }
            for index in workers.indices {
                while !workers[index].jobs.isEmpty && workers[index].registered {
                    let before = workers[index].jobs.count
                    finishFirstJob(of: index)
                    if workers[index].jobs.count >= before { break }
                }
            }
            timePasses(upTo: 50)
            checkInside()
            if broker.isIdle && live.isEmpty || !problems.isEmpty { return }
        }
    }

    private func finishFirstJob(of index: Int) {
        if !workers[index].jobs[0].cancelled && !workers[index].jobs[0].job.variants.isEmpty {
            sendNextVariant(of: index, at: 0)
            return
        }
        let held = workers[index].jobs.removeFirst()
        let job = held.job
        if held.cancelled {
            send(worker: workers[index].peer, WorkerToBrokerMessage<Bytes>.jobCancelled(.with {
                $0.jobID = job.jobID
                $0.attempt = job.attempt
            }).encoded().frames)
        } else {
            sendResult(workers[index].peer, job, stage: job.delivery == .degraded ? .degraded : .final, terminal: true,
                       opened: held.opened)
        }
    }

    private func checkEnd() {
        guard problems.isEmpty else { return }
        if !broker.isIdle { problem("broker not idle at the end: \(broker.status(now: now))") }
        if !live.isEmpty { problem("requests never ended: \(live.keys.sorted())") }
        if !openBatches.isEmpty { problem("batches never ended: \(openBatches.keys.sorted())") }
        let batchTotals = broker.totals.batchesCompleted + broker.totals.batchesFailed + broker.totals.batchesCancelled
        if batchTotals != UInt64(batchesEnded) { problem("\(batchesEnded) BatchEnded seen, totals say \(batchTotals)") }
        if accepted != endedLoudly {
            problem("\(accepted) accepted but \(endedLoudly) ended with a terminal event")
        }
        // What the operator's logs and metrics see is what the clients were told.
        if reportedEnds.sorted() != toldEnds.sorted() {
            let reported = Set(reportedEnds), told = Set(toldEnds)
            problem("reported ends differ from what clients were told: only reported \(reported.subtracting(told).sorted().prefix(5)), "
                    + "only told \(told.subtracting(reported).sorted().prefix(5)) (\(reportedEnds.count) vs \(toldEnds.count))")
        }
        let totals = broker.totals
        if totals.accepted != UInt64(accepted) { problem("totals.accepted \(totals.accepted) vs \(accepted) seen") }
        if totals.accepted != totals.finished + totals.failed + totals.cancelled {
            problem("accepted \(totals.accepted) != finished + failed + cancelled in \(totals)")
        }
        if totals.submitted != totals.accepted + totals.rejected + totals.duplicateIds {
            problem("submitted \(totals.submitted) != accepted + rejected + duplicates in \(totals)")
        }
    }
}
