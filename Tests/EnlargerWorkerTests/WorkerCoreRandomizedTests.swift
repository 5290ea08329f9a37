import EnlargerProtocol
import ImageModel
import Imaging
import TestSupport
import XCTest

@testable import EnlargerWorker

/// Random interleavings of broker messages, job-thread mail, cancels, disconnects and
/// silence, against the rules the worker core must keep whatever the order. Each run prints
/// its seed; `ENLARGER_SEED=<seed>` replays one.
final class WorkerCoreRandomizedTests: XCTestCase {
    func testRulesHoldUnderRandomInterleavings() {
        let base = ProcessInfo.processInfo.environment["ENLARGER_SEED"].flatMap(UInt64.init)
            ?? UInt64.random(in: 0...UInt64(UInt32.max))
        let runs = ProcessInfo.processInfo.environment["ENLARGER_SEED"] == nil ? 300 : 1
        print("worker core random interleavings: seeds \(base)…\(base + UInt64(runs) - 1)")
        var totals = Simulation.Totals()
        for offset in 0..<UInt64(runs) {
            var simulation = Simulation(seed: base + offset)
            simulation.run(steps: 400)
            totals.add(simulation.totals)
            if !simulation.violations.isEmpty {
                XCTFail("seed \(base + offset): \(simulation.violations.prefix(5).joined(separator: "; "))")
                return
            }
        }
        print("  \(totals.jobs) jobs: \(totals.finals) finished, \(totals.cancelled) cancelled, "
              + "\(totals.failed) failed (\(totals.tooLarge) TOO_LARGE), \(totals.abandoned) abandoned; "
              + "\(totals.reconnects) reconnects, \(totals.waitedForMemory) waited for memory")
        // The generator must actually reach the interesting cases.
        XCTAssertGreaterThan(totals.cancelled, 0)
        XCTAssertGreaterThan(totals.tooLarge, 0)
        XCTAssertGreaterThan(totals.abandoned, 0)
        XCTAssertGreaterThan(totals.waitedForMemory, 0)
    }

    /// The checker is not vacuous: a core that sent a result after a cancel, or a second
    /// terminal frame, is caught.
    func testTheCheckerCatchesBrokenRules() {
        var simulation = Simulation(seed: 1)
        simulation.observe([.connected, .sent(.ready(.init()))])
        simulation.brokerSentJob(JobKey(jobID: 9, attempt: 1), delivery: .progressive)
        var started = Enlarger_V1_JobStarted()
        started.jobID = 9
        started.attempt = 1
        var result = Enlarger_V1_JobResult()
        result.jobID = 9
        result.attempt = 1
        result.stage = .final
        result.terminal = true
        simulation.observe([.sent(.jobStarted(started))])
        simulation.brokerSentCancel(JobKey(jobID: 9, attempt: 1))
        simulation.observe([.sent(.jobResult(result, image: [])), .sent(.jobResult(result, image: []))])
        XCTAssert(simulation.violations.contains { $0.contains("after a cancel") }, "\(simulation.violations)")
        XCTAssert(simulation.violations.contains { $0.contains("after its terminal frame") }, "\(simulation.violations)")
    }
}

/// One seeded run: a fake broker and fake job threads around a real `WorkerCore`.
struct Simulation {
    struct Totals {
        var jobs = 0, finals = 0, cancelled = 0, failed = 0, tooLarge = 0, abandoned = 0, reconnects = 0
        var waitedForMemory = 0

        mutating func add(_ other: Totals) {
            jobs += other.jobs
            finals += other.finals
            cancelled += other.cancelled
            failed += other.failed
            tooLarge += other.tooLarge
            abandoned += other.abandoned
            reconnects += other.reconnects
            waitedForMemory += other.waitedForMemory
        }
    }

    /// What the broker side knows of one job on one connection.
    struct Record {
        var delivery: Enlarger_V1_Delivery
        var frames: [String] = []
        var terminal: String?
        var cancelRequested = false
        var degradedSeen = false
    }

    /// A fake job thread.
    struct Thread {
        enum Phase { case preparing, waiting, running(Int), finished }
        let token: JobToken
        let key: JobKey
        let epoch: Int
        let delivery: ImageModel.Delivery
        var phase = Phase.preparing
        var estimate = 0
    }

    static let budget = 1000
    static let heartbeat = Duration.milliseconds(100)
    static let missed = 3

    var random: SeededGenerator
    var harness: WorkerCoreHarness
    var violations: [String] = []
    var totals = Totals()
    /// What the core reported as jobs ended (logs and metrics), to compare with `totals`.
    var reported = Totals()

    // The broker side's view.
    private var epoch = 0
    private var connected = false
    private var records: [Int: [JobKey: Record]] = [:]
    private var lastHeard: ContinuousClock.Instant
    private var lastHeartbeatSent: ContinuousClock.Instant
    private var disconnectedAt: ContinuousClock.Instant?
    private var processed = 0
    private var threads: [JobToken: Thread] = [:]
    /// Threads that returned whose freed buffers the reaper has not confirmed yet.
    private var freeing: [JobToken] = []
    private var nextJobID: UInt64 = 1

    init(seed: UInt64) {
        random = SeededGenerator(seed: seed)
        harness = WorkerCoreHarness(capacity: 4, heartbeat: Self.heartbeat, missedHeartbeats: Self.missed,
                                    memoryBudget: Self.budget, start: false)
        lastHeard = harness.now
        lastHeartbeatSent = harness.now
    }

    mutating func run(steps: Int) {
        harness.record(harness.core.start(now: harness.now))
        observeNew()
        for _ in 0..<steps {
            step()
            if !violations.isEmpty { return }
        }
        drain()
    }

    // MARK: Random steps

    private mutating func chance(_ percent: UInt64) -> Bool { random.next() % 100 < percent }
    private mutating func pick(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &random) }

    private mutating func step() {
        let roll = random.next() % 100
        switch roll {
        case 0..<14 where connected:
            sendJob()
        case 14..<22 where connected:
            sendCancel()
        case 22..<30 where connected:
            deliver(.heartbeat)
        case 30..<31 where connected:
            deliver(.disconnect)
        case 31..<32:
            advance(Self.heartbeat * Self.missed)  // a silence long enough to give up
        case 32..<50:
            advance(.milliseconds(Int64(pick(1...120))))
            // The broker talks about once an interval, as the real one does; now and then late.
            if connected && chance(85) { deliver(.heartbeat) }
        default:
            stepThread()
        }
        checkMemory()
    }

    private mutating func sendJob() {
        // Sorted: dictionary order differs between processes, and a seed must replay.
        let live = threads.values.filter { $0.epoch == epoch && !isFinished($0) }.sorted { $0.token < $1.token }
        // Now and then the same job again (ignored), or an id an earlier connection used.
        let key: JobKey
        if chance(5), let duplicate = live.randomElement(using: &random) {
            key = duplicate.key
        } else if chance(10), nextJobID > 1, records[epoch]?.isEmpty ?? true {
            key = JobKey(jobID: UInt64(pick(1...Int(nextJobID - 1))), attempt: 1)
        } else {
            key = JobKey(jobID: nextJobID, attempt: UInt32(pick(1...3)))
            nextJobID += 1
        }
        let delivery: Enlarger_V1_Delivery = [.progressive, .final, .degraded][pick(0...2)]
        let known = harness.jobs.count
        brokerSentJob(key, delivery: delivery)
        harness.job(key.jobID, attempt: key.attempt, delivery: delivery)
        lastHeard = harness.now
        observeNew()
        if harness.jobs.count > known, let start = harness.jobs.values.max(by: { $0.token < $1.token }) {
            threads[start.token] = Thread(token: start.token, key: start.key, epoch: epoch, delivery: start.delivery)
            totals.jobs += 1
        }
    }

    private mutating func sendCancel() {
        let ids = (records[epoch].map { Array($0.keys) } ?? [])
            .sorted { ($0.jobID, $0.attempt) < ($1.jobID, $1.attempt) }
        let key = chance(85) ? ids.randomElement(using: &random) ?? JobKey(jobID: 999_999, attempt: 1)
            : JobKey(jobID: 999_999, attempt: 1)
        brokerSentCancel(key)
        harness.cancel(key.jobID, attempt: key.attempt)
        lastHeard = harness.now
        observeNew()
    }

    private mutating func deliver(_ message: BrokerToWorkerMessage<[UInt8]>) {
        if case .disconnect = message { disconnectedAt = harness.now }
        harness.broker(message)
        lastHeard = harness.now
        observeNew()
    }

    private mutating func advance(_ duration: Duration) {
        let wasConnected = connected
        let heard = lastHeard
        let before = harness.events.count
        harness.advance(by: duration)
        let reconnected = harness.events[before...].contains { if case .connected = $0 { true } else { false } }
        observeNew()
        let now = harness.now
        if wasConnected {
            let silent = now - heard >= Self.heartbeat * Self.missed
            if silent != reconnected {
                violations.append(silent ? "no reconnect after \(now - heard) of silence"
                                         : "reconnected after only \(now - heard) of silence")
            }
        } else if let at = disconnectedAt {
            let due = now - at >= Self.heartbeat
            if due != reconnected {
                violations.append(due ? "not registered again \(now - at) after Disconnect"
                                      : "registered again only \(now - at) after Disconnect")
            }
            if reconnected { disconnectedAt = nil }
        }
        if connected && now - lastHeartbeatSent >= Self.heartbeat {
            violations.append("no heartbeat for \(now - lastHeartbeatSent)")
        }
    }

    private func isFinished(_ thread: Thread) -> Bool {
        if case .finished = thread.phase { return true }
        return false
    }

    /// One step of a random live job thread, as the real one would go.
    private mutating func stepThread() {
        if !freeing.isEmpty && chance(30) {
            let token = freeing.remove(at: pick(0...freeing.count - 1))
            harness.memoryFreed(token)
            observeNew()
            return
        }
        let live = threads.values.filter { !isFinished($0) }.map(\.token).sorted()
        guard let token = live.randomElement(using: &random) else { return }
        stepThread(token)
    }

    private mutating func stepThread(_ token: JobToken) {
        var thread = threads[token]!
        let control = harness.jobs[token]!.control
        let cancelled = ImagingError(.cancelled, "cancelled")
        switch thread.phase {
        case .preparing:
            if control.isCancelled && chance(50) {
                end(&thread, .failed(cancelled))
            } else if chance(8) {
                end(&thread, .failed(ImagingError(.corrupt, "bad data")))
            } else {
                thread.estimate = chance(8) ? pick((Self.budget + 1)...(Self.budget * 2)) : pick(1...Self.budget / 2)
                harness.estimated(token, bytes: thread.estimate)
                thread.phase = .waiting
                observeNew()
                if thread.estimate > Self.budget, let record = records[thread.epoch]?[thread.key], thread.epoch == epoch,
                   !record.cancelRequested, record.terminal != "failed tooLarge" {
                    violations.append("\(thread.key) over the budget did not fail TOO_LARGE at once: \(record)")
                }
                if !control.isAdmitted && !control.isCancelled { totals.waitedForMemory += 1 }
            }
        case .waiting:
            if control.isCancelled {
                end(&thread, .failed(ImagingError(.cancelled, "cancelled before it was admitted")))
            } else if control.isAdmitted {
                thread.phase = .running(0)
            }
        case .running(let index):
            let stages: [(ImageModel.Stage, Bool)] = switch thread.delivery {
            case .progressive: [(.degraded, false), (.final, true)]
            case .final: [(.final, true)]
            case .degraded: [(.degraded, true)]
            }
            if control.isCancelled && chance(60) {
                end(&thread, .failed(cancelled))
            } else if chance(4) {
                end(&thread, .failed(ImagingError(.encodeFailed, "encoder broke")))
            } else if index < stages.count {
                // A result may still be on its way after the cancel: the core must drop it.
                harness.result(token, stages[index].0, terminal: stages[index].1)
                observeNew()
                thread.phase = .running(index + 1)
            } else {
                end(&thread, .completed)
            }
        case .finished:
            break
        }
        if !isFinished(thread) { threads[token] = thread }
    }

    private mutating func end(_ thread: inout Thread, _ outcome: JobOutcome) {
        harness.ended(thread.token, outcome, freed: false)
        freeing.append(thread.token)
        thread.phase = .finished
        threads[thread.token] = thread
        observeNew()
    }

    /// Lets every job thread run to its end while the broker keeps talking.
    private mutating func drain() {
        for _ in 0..<10_000 where !threads.values.allSatisfy(isFinished) || !freeing.isEmpty {
            if connected { deliver(.heartbeat) }
            advance(.milliseconds(10))
            for token in threads.keys.sorted() where !isFinished(threads[token]!) { stepThread(token) }
            for token in freeing { harness.memoryFreed(token) }
            freeing.removeAll()
            observeNew()
            checkMemory()
        }
        if !threads.values.allSatisfy(isFinished) { violations.append("jobs never finished") }
        // Jobs failed straight from their Job message (a bad spec) have no thread: the
        // generator sends none, so every terminal frame is one thread's report.
        if (reported.finals, reported.cancelled, reported.failed, reported.tooLarge)
            != (totals.finals, totals.cancelled, totals.failed, totals.tooLarge) {
            violations.append("reports say \(reported.finals) finished, \(reported.cancelled) cancelled, "
                + "\(reported.failed) failed (\(reported.tooLarge) TOO_LARGE); the broker was told \(totals.finals), "
                + "\(totals.cancelled), \(totals.failed) (\(totals.tooLarge))")
        }
        if harness.core.memoryInUse != 0 { violations.append("\(harness.core.memoryInUse) bytes still in use at the end") }
        if !harness.core.jobs.isEmpty { violations.append("\(harness.core.jobs.count) jobs remembered at the end") }
        for (recordEpoch, jobs) in records {
            for (key, record) in jobs where record.terminal == nil {
                if recordEpoch == epoch { violations.append("\(key) never got a terminal frame") }
                totals.abandoned += 1
            }
        }
    }

    // MARK: Checking what the core did

    mutating func brokerSentJob(_ key: JobKey, delivery: Enlarger_V1_Delivery) {
        if records[epoch]?[key] == nil { records[epoch, default: [:]][key] = Record(delivery: delivery) }
    }

    mutating func brokerSentCancel(_ key: JobKey) {
        guard var record = records[epoch]?[key], record.terminal == nil else { return }
        record.cancelRequested = true
        record.frames.append("cancel requested")
        records[epoch]![key] = record
    }

    private mutating func observeNew() {
        let new = Array(harness.events[processed...])
        processed = harness.events.count
        observe(new)
    }

    mutating func observe(_ events: [WorkerCoreHarness.Event]) {
        for event in events {
            switch event {
            case .connected:
                if epoch > 0 { totals.reconnects += 1 }
                epoch += 1
                connected = true
                lastHeard = harness.now
                lastHeartbeatSent = harness.now
            case .closed:
                // Its jobs are abandoned: anything later belongs to the next connection.
                connected = false
                epoch += 1
            case .sent(let message):
                sent(message)
            case .admitted(let token):
                let earlier = harness.core.jobs.filter { $0.value.phase == .waitingForMemory && !$0.value.abandoned && $0.key < token }
                if !earlier.isEmpty { violations.append("job \(token) admitted before earlier waiting jobs") }
            case .report(.jobEnded(let end)):
                // One report per job thread's return, saying what the broker was told.
                switch end.outcome {
                case .finished: reported.finals += 1
                case .cancelled: reported.cancelled += 1
                case .failed(let code):
                    reported.failed += 1
                    if code == .tooLarge { reported.tooLarge += 1 }
                case .abandoned: reported.abandoned += 1
                }
            case .started, .cancelled, .yielded, .report:
                break
            }
        }
    }

    private mutating func sent(_ message: WorkerToBrokerMessage<[UInt8]>) {
        guard connected else { return violations.append("sent \(message) with no connection") }
        switch message {
        case .heartbeat, .ready:
            lastHeartbeatSent = harness.now
            return
        case .disconnect:
            return
        default:
            break
        }
        let summary = WorkerCoreHarness.summary(message)
        let key: JobKey
        switch message {
        case .jobStarted(let m): key = JobKey(jobID: m.jobID, attempt: m.attempt)
        case .jobResult(let m, _): key = JobKey(jobID: m.jobID, attempt: m.attempt)
        case .jobFailed(let m): key = JobKey(jobID: m.jobID, attempt: m.attempt)
        case .jobCancelled(let m): key = JobKey(jobID: m.jobID, attempt: m.attempt)
        default: return
        }
        guard var record = records[epoch]?[key] else {
            return violations.append("\(summary) about \(key), which this connection never gave")
        }
        defer { records[epoch]![key] = record }
        if let terminal = record.terminal {
            violations.append("\(summary) for \(key) after its terminal frame \(terminal)")
        }
        if case .jobStarted = message {
            if record.frames.contains(where: { !$0.hasPrefix("cancel") }) {
                violations.append("JobStarted for \(key) after other frames \(record.frames)")
            }
        } else if record.frames.first(where: { !$0.hasPrefix("cancel") }).map({ !$0.hasPrefix("started") }) ?? true {
            violations.append("\(summary) for \(key) before JobStarted")
        }
        if case .jobResult(let result, _) = message {
            if record.cancelRequested { violations.append("\(summary) for \(key) after a cancel") }
            switch (record.delivery, result.stage, result.terminal) {
            case (.progressive, .degraded, false) where !record.degradedSeen, (.progressive, .final, true),
                 (.final, .final, true), (.degraded, .degraded, true):
                break
            default:
                violations.append("\(summary) breaks the \(record.delivery) delivery table")
            }
            if result.stage == .degraded { record.degradedSeen = true }
        }
        if case .jobCancelled = message {
            if !record.cancelRequested { violations.append("JobCancelled for \(key), which was not cancelled") }
        } else if case .jobFailed = message, record.cancelRequested {
            violations.append("\(summary) for \(key) after a cancel, instead of JobCancelled")
        }
        record.frames.append(summary)
        if message.isTerminal {
            record.terminal = summary.hasPrefix("failed") ? "failed \(summary.split(separator: " ").last!)"
                : summary.hasPrefix("cancelled") ? "cancelled" : summary
            if summary.hasPrefix("final") || summary.hasPrefix("degraded") { totals.finals += 1 }
            if summary.hasPrefix("cancelled") { totals.cancelled += 1 }
            if summary.hasPrefix("failed") { totals.failed += 1 }
            if summary.hasSuffix("tooLarge") { totals.tooLarge += 1 }
        }
    }

    private mutating func checkMemory() {
        let core = harness.core
        if core.memoryInUse > Self.budget { violations.append("\(core.memoryInUse) in use over the budget") }
        let held = threads.values
            .filter { (!isFinished($0) || freeing.contains($0.token)) && harness.jobs[$0.token]!.control.isAdmitted }
            .reduce(0) { $0 + $1.estimate }
        if held != core.memoryInUse { violations.append("\(core.memoryInUse) in use but admitted threads hold \(held)") }
    }
}
