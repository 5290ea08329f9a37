import EnlargerProtocol

// MARK: - Workers
//
// Workers talk to the broker through the worker ROUTER and are known by routing id once
// they have sent Ready. Any message from a registered worker is a sign of life. A worker
// the broker does not know (never registered, declared dead, or turned away at shutdown)
// is answered Disconnect, which tells it to drop its jobs and register again; whatever job
// frames it sent are counted as late. Malformed messages get Error{MALFORMED}.

extension BrokerCore {
    mutating func handleWorkerFrames(
        from peer: PeerID, _ frames: some RandomAccessCollection<Payload>, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        let message: WorkerToBrokerMessage<Payload>
        do {
            message = try WorkerToBrokerMessage(frames: frames)
        } catch {
            workerSentMalformed(peer, error.description, &actions)
            return
        }
        if let index = workerIndex[peer] { workers[index].lastSeen = now }

        switch (message, workerIndex[peer]) {
        case (.ready(let ready), _):
            register(peer, ready, now: now, &actions)
        case (.disconnect, nil):
            break
        case (_, nil):
            answerStranger(peer, message, &actions)
        case (.heartbeat, .some):
            break
        case (.disconnect, .some(let index)):
            workerLeft(at: index, &actions)
        case (.jobStarted(let started), .some(let index)):
            jobStarted(started, workerAt: index, &actions)
        case (.jobResult(let result, let image), .some(let index)):
            jobResult(result, image: image, workerAt: index, now: now, &actions)
        case (.jobFailed(let failed), .some(let index)):
            jobFailed(failed, workerAt: index, now: now, &actions)
        case (.jobCancelled(let cancelled), .some(let index)):
            jobCancelled(cancelled, workerAt: index, &actions)
        }
    }

    private mutating func answerStranger(
        _ peer: PeerID, _ message: WorkerToBrokerMessage<Payload>, _ actions: inout [Action]
    ) {
        switch message {
        case .jobStarted, .jobResult, .jobFailed, .jobCancelled: counters.lateResultsDropped += 1
        case .ready, .heartbeat, .disconnect: break
        }
        actions.append(.sendToWorker(peer, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
    }

    private mutating func workerSentMalformed(_ peer: PeerID, _ reason: String, _ actions: inout [Action]) {
        counters.malformedDropped += 1
        actions.append(.report(.malformed(peer, role: .worker, reason: reason)))
        var error = Enlarger_V1_Error()
        error.code = .malformed
        error.message = reason
        actions.append(.sendToWorker(peer, BrokerToWorkerMessage<Payload>.error(error).encoded()))
    }

    // MARK: Registration
    //
    // Ready gives a worker `capacity` credits. A Ready from a worker that is already
    // registered means it restarted its job pipeline: the jobs it held are lost, exactly as
    // if it had died, and it starts afresh.

    private mutating func register(
        _ peer: PeerID, _ ready: Enlarger_V1_Ready, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        if isShuttingDown {
            actions.append(.sendToWorker(peer, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
            return
        }
        guard (1...WireLimits.maxCapacity).contains(ready.capacity) else {
            workerSentMalformed(peer, "Ready.capacity must be 1 to \(WireLimits.maxCapacity), got \(ready.capacity)", &actions)
            return
        }
        guard ready.workerName.utf8.count <= WireLimits.maxWorkerNameBytes else {
            workerSentMalformed(peer, "Ready.worker_name is longer than \(WireLimits.maxWorkerNameBytes) bytes", &actions)
            return
        }
        if let index = workerIndex[peer] {
            loseWorker(at: index, reason: "registered again", now: now, &actions)
        }
        workerIndex[peer] = workers.count
        workers.append(
            Worker(id: peer, name: ready.workerName, pid: ready.pid, capacity: Int(ready.capacity), lastSeen: now))
        actions.append(.report(.workerRegistered(peer, name: ready.workerName, capacity: Int(ready.capacity))))
        dispatch(&actions)
    }

    // MARK: Job frames
    //
    // Every frame about a job names its job id and attempt. `classify` decides, against the
    // worker that sent it, whether the frame is about an attempt that worker currently holds,
    // about a job it was told to cancel, late (an attempt that is over), or malformed (a job
    // or attempt never issued, or a current attempt that another worker holds).

    enum JobFrameStatus {
        case current
        case cancelled
        case late
        case malformed(String)
    }

    func classify(jobID: UInt64, attempt: UInt32, workerAt index: Int) -> JobFrameStatus {
        let worker = workers[index]
        if worker.jobs[jobID] == attempt { return .current }
        if worker.tombstones[jobID]?.attempt == attempt { return .cancelled }
        guard jobID != 0, jobID < nextJobID, attempt != 0 else {
            return .malformed("job \(jobID) attempt \(attempt) was never issued")
        }
        if let request = requests[jobID] {
            if attempt > request.attempt {
                return .malformed("job \(jobID) attempt \(attempt) was never issued")
            }
            if attempt == request.attempt, let holder = request.worker, holder != worker.id {
                return .malformed("job \(jobID) attempt \(attempt) is held by another worker")
            }
        }
        return .late
    }

    private mutating func jobStarted(
        _ started: Enlarger_V1_JobStarted, workerAt index: Int, _ actions: inout [Action]
    ) {
        switch classify(jobID: started.jobID, attempt: started.attempt, workerAt: index) {
        case .current:
            guard let request = requests[started.jobID], request.startedAttempt < started.attempt else { return }
            requests[started.jobID]?.startedAttempt = started.attempt
            var event = Enlarger_V1_Started()
            event.requestID = request.requestID
            event.attempt = started.attempt
            send(.started(event), to: request.client, &actions)
        case .cancelled, .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    // Finality is decided here from the request's delivery, and the worker's `terminal`
    // flag must agree; a result that breaks the delivery's table is malformed and dropped.
    private mutating func jobResult(
        _ result: Enlarger_V1_JobResult, image: Payload, workerAt index: Int, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        let jobID = result.jobID
        switch classify(jobID: jobID, attempt: result.attempt, workerAt: index) {
        case .current:
            guard let request = requests[jobID] else { return }
            guard let terminal = request.delivery.isTerminal(result.stage), terminal == result.terminal else {
                let reason = "job \(jobID): a \(result.stage) result with terminal=\(result.terminal) "
                    + "does not fit delivery \(request.delivery)"
                abandonBrokenJob(jobID, workerAt: index, reason: reason, now: now, &actions)
                return
            }
            if result.stage == .degraded {
                guard !request.degradedSent else {
                    abandonBrokenJob(jobID, workerAt: index, reason: "job \(jobID): a second degraded result", now: now, &actions)
                    return
                }
                requests[jobID]?.degradedSent = true
            }
            var event = Enlarger_V1_Result()
            event.requestID = request.requestID
            event.stage = result.stage
            event.width = result.width
            event.height = result.height
            event.format = result.format
            event.terminal = terminal
            send(.result(event, image: image), to: request.client, &actions)
            if terminal {
                workers[index].jobs[jobID] = nil
                endRequest(jobID, now: now)
                counters.finished += 1
                dispatch(&actions)
            }
        case .cancelled:
            counters.lateResultsDropped += 1
            if result.terminal { releaseTombstone(jobID, workerAt: index, &actions) }
        case .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    /// A worker broke the protocol about a job it holds: the worker may well consider the job
    /// done and never send its terminal frame, so the request must not wait for one. It ends
    /// with `Failed{INTERNAL}`, and the job becomes a tombstone on the worker (told to stop,
    /// its credit back once it acknowledges), like a cancelled one.
    private mutating func abandonBrokenJob(
        _ jobID: UInt64, workerAt index: Int, reason: String, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        workerSentMalformed(workers[index].id, reason, &actions)
        withdraw(jobID, now: now, &actions)
        let request = endRequest(jobID, now: now)
        counters.failed += 1
        sendFailed(request, .internal, "the worker broke the protocol: \(reason)", &actions)
    }

    private mutating func jobFailed(
        _ failure: Enlarger_V1_JobFailed, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        let jobID = failure.jobID
        switch classify(jobID: jobID, attempt: failure.attempt, workerAt: index) {
        case .current:
            workers[index].jobs[jobID] = nil
            let request = endRequest(jobID, now: now)
            counters.failed += 1
            switch failure.code {
            case .unspecified, .UNRECOGNIZED:
                sendFailed(request, .internal, "worker failed with code \(failure.code): \(failure.message)", &actions)
            default:
                sendFailed(request, failure.code, failure.message, &actions)
            }
            dispatch(&actions)
        case .cancelled:
            counters.lateResultsDropped += 1
            releaseTombstone(jobID, workerAt: index, &actions)
        case .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    private mutating func jobCancelled(
        _ cancelled: Enlarger_V1_JobCancelled, workerAt index: Int, _ actions: inout [Action]
    ) {
        switch classify(jobID: cancelled.jobID, attempt: cancelled.attempt, workerAt: index) {
        case .cancelled:
            releaseTombstone(cancelled.jobID, workerAt: index, &actions)
        case .current:
            let reason = "job \(cancelled.jobID): JobCancelled for a job that was not cancelled"
            workerSentMalformed(workers[index].id, reason, &actions)
        case .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    private mutating func releaseTombstone(_ jobID: UInt64, workerAt index: Int, _ actions: inout [Action]) {
        workers[index].tombstones[jobID] = nil
        dispatch(&actions)
    }

    // MARK: Losing workers
    //
    // A worker leaves either gracefully (Disconnect: its jobs go back to the front of the
    // queue and the attempt does not count against the retry limit) or by being lost
    // (silence, an unreachable connection, or a second Ready: each job's loss is counted and
    // a job lost too often fails with WORKER_LOST). Either way its tombstones go with it,
    // and the next dispatch gives each re-queued job a new attempt number, so anything the
    // old attempt still sends is recognised as late.

    mutating func loseWorker(
        at index: Int, reason: String, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        let worker = removeWorker(at: index)
        counters.workersLost += 1
        var requeued = 0
        var failed = 0
        // Newest first, each to the front, so the oldest job ends up first in the queue.
        for jobID in worker.jobs.keys.sorted(by: >) {
            requests[jobID]?.worker = nil
            requests[jobID]?.losses += 1
            guard let request = requests[jobID], request.losses > configuration.maxRetries else {
                queue.prepend(jobID)
                requeued += 1
                continue
            }
            endRequest(jobID, now: now)
            counters.failed += 1
            failed += 1
            sendFailed(request, .workerLost, "lost the worker on each of \(request.losses) attempts", &actions)
        }
        counters.jobsRequeued += UInt64(requeued)
        actions.append(.report(.workerLost(worker.id, reason: reason, requeued: requeued, failed: failed)))
        dispatch(&actions)
    }

    private mutating func workerLeft(at index: Int, _ actions: inout [Action]) {
        let worker = removeWorker(at: index)
        counters.workersDisconnected += 1
        for jobID in worker.jobs.keys.sorted(by: >) {
            requests[jobID]?.worker = nil
            queue.prepend(jobID)
        }
        counters.jobsRequeued += UInt64(worker.jobs.count)
        actions.append(.report(.workerLeft(worker.id, requeued: worker.jobs.count)))
        dispatch(&actions)
    }

    private mutating func removeWorker(at index: Int) -> Worker {
        let worker = workers.remove(at: index)
        workerIndex[worker.id] = nil
        for later in index..<workers.count { workerIndex[workers[later].id] = later }
        return worker
    }

    // MARK: Dispatch
    //
    // Credit-based and FIFO: while the queue is not empty and some worker has a free credit,
    // the oldest waiting job goes to the worker with the most free credits (the first
    // registered among equals). Called after every event that can free credit or add work.
    // A retry of a request whose degraded result already reached the client asks for the
    // final result only.

    mutating func dispatch(_ actions: inout [Action]) {
        while !queue.isEmpty, let index = workerWithMostCredit(), let jobID = queue.popFirst() {
            guard var request = requests[jobID] else { continue }
            request.attempt += 1
            request.worker = workers[index].id
            requests[jobID] = request
            workers[index].jobs[jobID] = request.attempt

            var job = Enlarger_V1_Job()
            job.jobID = jobID
            job.attempt = request.attempt
            job.requestID = request.requestID
            job.spec = request.spec
            job.delivery = request.degradedSent ? .final : request.delivery
            actions.append(.sendToWorker(workers[index].id, BrokerToWorkerMessage.job(job, image: request.image).encoded()))
        }
    }

    private func workerWithMostCredit() -> Int? {
        var best: Int?
        var bestCredit = 0
        for index in workers.indices where workers[index].freeCredit > bestCredit {
            best = index
            bestCredit = workers[index].freeCredit
        }
        return best
    }
}
