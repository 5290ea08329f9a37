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
        from peer: PeerID, principal: Principal, _ frames: some RandomAccessCollection<Payload>, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        if let index = workerIndex[peer], workers[index].principal != principal {
            // The routing id now belongs to a connection of another key: the worker that
            // registered under it is gone, and nothing this one sends about its jobs counts.
            // What it held runs again elsewhere, charged to no request.
            loseWorker(at: index, reason: "its routing id was taken over by another key", charge: false, now: now, &actions)
        }
        if let index = workerIndex[peer] { workers[index].lastSeen = now }
        let message: WorkerToBrokerMessage<Payload>
        do {
            message = try WorkerToBrokerMessage(frames: frames)
        } catch {
            // A job frame whose framing is broken still names its job: if the worker holds
            // that job, the request must not wait for a frame that will never come right.
            if let job = error.job, let index = workerIndex[peer],
               case .current = classify(jobID: job.jobID, attempt: job.attempt, workerAt: index) {
                abandonBrokenJob(job.jobID, workerAt: index, reason: error.description, now: now, &actions)
            } else {
                workerSentMalformed(peer, error.description, &actions)
            }
            return
        }

        switch (message, workerIndex[peer]) {
        case (.ready(let ready), _):
            register(peer, principal: principal, ready, now: now, &actions)
        case (.disconnect, nil):
            break
        case (_, nil):
            answerStranger(peer, message, &actions)
        case (.heartbeat, .some):
            break
        case (.disconnect, .some(let index)):
            workerLeft(at: index, now: now, &actions)
        case (.jobStarted(let started), .some(let index)):
            jobStarted(started, workerAt: index, now: now, &actions)
        case (.jobResult(let result, let image), .some(let index)):
            jobResult(result, image: image, workerAt: index, now: now, &actions)
        case (.jobFailed(let failed), .some(let index)):
            jobFailed(failed, workerAt: index, now: now, &actions)
        case (.jobCancelled(let cancelled), .some(let index)):
            jobCancelled(cancelled, workerAt: index, now: now, &actions)
        case (.jobSourceOpened(let opened), .some(let index)):
            sourceOpened(opened, workerAt: index, now: now, &actions)
        case (.jobDownload(let download), .some(let index)):
            jobDownload(download, workerAt: index, now: now, &actions)
        case (.occupancy(let occupancy), .some(let index)):
            occupied(occupancy, workerAt: index, now: now, &actions)
        }
    }

    private mutating func answerStranger(
        _ peer: PeerID, _ message: WorkerToBrokerMessage<Payload>, _ actions: inout [Action]
    ) {
        switch message {
        case .jobStarted, .jobResult, .jobFailed, .jobCancelled, .jobSourceOpened, .jobDownload:
            counters.lateResultsDropped += 1
        case .ready, .heartbeat, .disconnect, .occupancy: break
        }
        actions.append(.sendToWorker(peer, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
    }

    mutating func workerSentMalformed(_ peer: PeerID, _ reason: String, _ actions: inout [Action]) {
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
        _ peer: PeerID, principal: Principal, _ ready: Enlarger_V1_Ready, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        if isShuttingDown {
            actions.append(.sendToWorker(peer, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
            return
        }
        guard (1...WireLimits.maxCapacity).contains(ready.capacity) else {
            workerSentMalformed(peer, "Ready.capacity must be 1 to \(WireLimits.maxCapacity), got \(ready.capacity)", &actions)
            return
        }
        guard ready.busyThreads <= ready.capacity else {
            workerSentMalformed(peer, "Ready.busy_threads (\(ready.busyThreads)) exceeds its capacity (\(ready.capacity))", &actions)
            return
        }
        guard ready.workerName.utf8.count <= WireLimits.maxWorkerNameBytes else {
            workerSentMalformed(peer, "Ready.worker_name is longer than \(WireLimits.maxWorkerNameBytes) bytes", &actions)
            return
        }
        if let index = workerIndex[peer] {
            // The same connection registering again: the worker started over (it judged the
            // broker gone, say, while the broker was paused). Its jobs run again, blamed on
            // none of them, and no worker was lost.
            loseWorker(at: index, reason: "registered again", charge: false, countsAsLost: false, now: now, &actions)
        }
        workerIndex[peer] = workers.count
        workers.append(
            Worker(id: peer, principal: principal, name: ready.workerName, pid: ready.pid, capacity: Int(ready.capacity),
                   lastSeen: now, busyThreads: Int(ready.busyThreads)))
        actions.append(.report(.workerRegistered(peer, name: ready.workerName, capacity: Int(ready.capacity))))
        dispatch(now: now, &actions)
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
        if let job = jobs[jobID] {
            if attempt > job.attempt {
                return .malformed("job \(jobID) attempt \(attempt) was never issued")
            }
            if attempt == job.attempt, let holder = job.worker, holder != worker.id {
                return .malformed("job \(jobID) attempt \(attempt) is held by another worker")
            }
        }
        return .late
    }

    private mutating func jobStarted(
        _ started: Enlarger_V1_JobStarted, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        switch classify(jobID: started.jobID, attempt: started.attempt, workerAt: index) {
        case .current:
            guard let job = jobs[started.jobID], job.startedAttempt < started.attempt else { return }
            jobs[started.jobID]!.startedAttempt = started.attempt
            for key in job.requests { tellStarted(key, attempt: started.attempt, &actions) }
        case .cancelled, .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
        _ = now
    }

    /// Tells a live request that `attempt` of its job has started, unless it knows already
    /// (or nothing has started: attempt 0).
    mutating func tellStarted(_ key: RequestKey, attempt: UInt32, _ actions: inout [Action]) {
        guard let request = requests[key], request.startedAttempt < attempt else { return }
        requests[key]!.startedAttempt = attempt
        send(.started(.with {
            $0.requestID = request.requestID
            $0.attempt = attempt
        }), to: request, &actions)
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
            guard let job = jobs[jobID] else { return }
            if !job.variants.isEmpty {
                variantResult(result, image: image, job: job, workerAt: index, now: now, &actions)
                return
            }
            guard let terminal = job.delivery.isTerminal(result.stage), terminal == result.terminal else {
                let reason = "job \(jobID): a \(result.stage) result with terminal=\(result.terminal) "
                    + "does not fit delivery \(job.delivery)"
                abandonBrokenJob(jobID, workerAt: index, reason: reason, now: now, &actions)
                return
            }
            if result.stage == .placeholder {
                // Informational, and only before any image: one that comes later, or again
                // from a retry, or one that is not what the contract says (an empty payload, a
                // hash of ThumbHash's size), is dropped rather than held against the worker.
                guard !job.placeholderSent, !job.degradedSent, image.count == 0, result.placeholder.count <= 64 else {
                    counters.lateResultsDropped += 1
                    return
                }
                jobs[jobID]!.placeholderSent = true
                var event = Enlarger_V1_Result()
                event.stage = .placeholder
                event.width = result.width
                event.height = result.height
                event.placeholder = result.placeholder
                for key in job.requests {
                    guard let request = requests[key], request.wantsPlaceholder else { continue }
                    event.requestID = request.requestID
                    send(.result(event, image: image), to: request, &actions)
                }
                return
            }
            if result.stage == .degraded {
                guard !job.degradedSent else {
                    abandonBrokenJob(jobID, workerAt: index, reason: "job \(jobID): a second degraded result", now: now, &actions)
                    return
                }
                jobs[jobID]!.degradedSent = true
            }
            var event = Self.clientResult(result)
            event.terminal = terminal
            if result.stage == .info { event.info = result.info }
            // The same frame goes to every request on the job (libzmq shares its buffer).
            for key in job.requests {
                guard let at = requests.index(forKey: key) else { continue }
                requests.values[at].bytesOut += image.count
                let request = requests.values[at]
                event.requestID = request.requestID
                send(.result(event, image: image), to: request, &actions)
            }
            if terminal {
                workers[index].jobs[jobID] = nil
                if let dispatched = job.lastDispatchedAt {
                    recentJobTime = recentJobTime * 0.9 + now.duration(since: dispatched) * 0.1
                }
                // Only a result whose worker checked the bytes against the digest may be
                // handed to requests that never sent those bytes.
                sharing.store(event, payload: image, key: job.shareKey, for: job.owner.principal,
                              verified: result.digestVerified)
                let job = removeJob(jobID)
                for key in job.requests where requests[key] != nil {
                    endRequest(key, .finished, job: job, now: now, &actions)
                }
                dispatch(now: now, &actions)
            }
        case .cancelled:
            counters.lateResultsDropped += 1
            if result.terminal { releaseTombstone(jobID, workerAt: index, now: now, &actions) }
        case .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    /// One variant's final: asked of this attempt and not yet sent, terminal exactly when it is
    /// the last of them; forwarded with its index, cached under its own key, and the job ends
    /// with the one that completes the set.
    private mutating func variantResult(
        _ result: Enlarger_V1_JobResult, image: Payload, job: Job, workerAt index: Int, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        let jobID = result.jobID
        let outstanding = job.variants.count - job.variantsSent.count
        guard result.stage == .final, job.variants.contains(where: { $0.index == result.variant }),
              !job.variantsSent.contains(result.variant), result.terminal == (outstanding == 1) else {
            let reason = "job \(jobID): a \(result.stage) result for variant \(result.variant) with terminal="
                + "\(result.terminal), \(outstanding) of \(job.variants.count) variants outstanding"
            abandonBrokenJob(jobID, workerAt: index, reason: reason, now: now, &actions)
            return
        }
        jobs[jobID]!.variantsSent.insert(result.variant)
        updateCost(of: jobID)
        var event = Self.clientResult(result)
        // Cached as a single output's final, which it also answers.
        event.terminal = true
        if Int(result.variant) < job.variantKeys.count {
            sharing.store(event, payload: image, key: job.variantKeys[Int(result.variant)], for: job.owner.principal,
                          verified: result.digestVerified)
        }
        // Its key is free from now: later requests find the result in the cache, or start anew.
        if Int(result.variant) < job.variantKeys.count { sharing.release(job.variantKeys[Int(result.variant)], heldBy: jobID) }
        // The set's requests get it tagged with its index; a request sharing only this variant
        // gets it as its own terminal final, untagged, and ends here.
        var single = event
        event.terminal = result.terminal
        event.variant = result.variant
        var served: [RequestKey] = []
        for key in job.requests {
            guard let request = requests[key] else { continue }
            if let only = request.onlyVariant {
                guard only == result.variant else { continue }
                single.requestID = request.requestID
                requests[key]!.bytesOut += image.count
                send(.result(single, image: image), to: request, &actions)
                served.append(key)
                continue
            }
            event.requestID = request.requestID
            requests[key]!.bytesOut += image.count
            send(.result(event, image: image), to: request, &actions)
        }
        guard result.terminal else {
            for key in served { endOneRequest(key, .finished, now: now, &actions) }
            // The set's last request may have been one of those: the job was then withdrawn.
            if jobs[jobID] == nil { dispatch(now: now, &actions) }
            return
        }
        workers[index].jobs[jobID] = nil
        if let dispatched = job.lastDispatchedAt {
            recentJobTime = recentJobTime * 0.9 + now.duration(since: dispatched) * 0.1
        }
        let ended = removeJob(jobID)
        for key in ended.requests where requests[key] != nil {
            endRequest(key, .finished, job: ended, now: now, &actions)
        }
        dispatch(now: now, &actions)
    }

    /// What the clients are told of a worker's image result (the same for every request on
    /// the job; the caller sets finality, the request id and the variant).
    static func clientResult(_ result: Enlarger_V1_JobResult) -> Enlarger_V1_Result {
        var event = Enlarger_V1_Result()
        event.stage = result.stage
        event.width = result.width
        event.height = result.height
        event.format = result.format
        event.contentType = result.contentType
        event.notes = result.notes
        return event
    }

    /// A worker broke the protocol about a job it holds: the worker may well consider the job
    /// done and never send its terminal frame, so the request must not wait for one. It ends
    /// with `Failed{INTERNAL}`, and the job becomes a tombstone on the worker (told to stop,
    /// its credit back once it acknowledges), like a cancelled one.
    mutating func abandonBrokenJob(
        _ jobID: UInt64, workerAt index: Int, reason: String, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        workerSentMalformed(workers[index].id, reason, &actions)
        counters.protocolBreaches += 1
        withdraw(jobID, now: now, &actions)
        failJob(jobID, .internal, "the worker broke the protocol: \(reason)", now: now, &actions)
    }

    private mutating func jobFailed(
        _ failure: Enlarger_V1_JobFailed, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        let jobID = failure.jobID
        switch classify(jobID: jobID, attempt: failure.attempt, workerAt: index) {
        case .current:
            workers[index].jobs[jobID] = nil
            if !Self.imageFailureCodes.contains(failure.code) { giveVariantSharersJobsOfTheirOwn(jobID) }
            if Self.workerFailureCodes.contains(failure.code) {
                failJob(jobID, failure.code, failure.message, now: now, &actions)
            } else {
                failJob(jobID, .internal, "the worker failed with code \(failure.code): \(failure.message)",
                        now: now, &actions)
            }
            dispatch(now: now, &actions)
        case .cancelled:
            counters.lateResultsDropped += 1
            releaseTombstone(jobID, workerAt: index, now: now, &actions)
        case .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    /// The codes a worker may end a job with, as the contract lists them. Anything else
    /// (DUPLICATE_ID, OVERLOADED, BROKER_SHUTDOWN, ...) would mean something else to the
    /// client, which must be able to treat every Failed as terminal: it becomes INTERNAL.
    static var workerFailureCodes: Set<Enlarger_V1_ErrorCode> {
        [.notJpeg, .empty, .truncated, .corrupt, .unsupported, .tooLarge, .tooManyScans, .invalidArgument,
         .encodeFailed, .internal, .digestMismatch, .sourceRefused, .sourceUnavailable]
    }

    /// Failures that come from the image itself (its bytes, its digest, its source), which any
    /// request for it meets alike; the others may come from one output's spec.
    static var imageFailureCodes: Set<Enlarger_V1_ErrorCode> {
        [.notJpeg, .empty, .truncated, .corrupt, .unsupported, .tooManyScans, .digestMismatch, .sourceRefused,
         .sourceUnavailable]
    }

    /// A set's job whose own requests have all left, with requests sharing its variants still
    /// on it: waiting again, it would make every variant for them; a job per variant they
    /// share makes only what they wait for.
    func leftOnlyToVariantSharers(_ jobID: UInt64) -> Bool {
        guard let job = jobs[jobID], !job.variants.isEmpty else { return false }
        return job.requests.allSatisfy { requests[$0]?.onlyVariant != nil }
    }

    /// A set's job failed for a reason that may be another variant's (too large an output, an
    /// encoder's failure, workers dying), or was left only to requests sharing its variants:
    /// the single-output requests sharing each variant still to come get one job for that
    /// variant, shared as any identical requests share one, instead of the set's failure. It
    /// waits at the front of its lane (its requests have waited their turn), or in quarantine
    /// when the set was there, and inherits the set's losses: a variant that may be what kills
    /// workers gets no fresh budget of crashes. So a set leaves at most one job per variant
    /// (`Submit.maxVariants`), whatever number of requests shared it. These jobs are not
    /// admitted again: their requests were, and refusing them now would end accepted work
    /// for what another request did. They count as their principals' waiting work (each in
    /// its first sharer's), so those principals' new Submits meet the limits with them in;
    /// a principal's waiting count passes its limit by at most one job for each of its
    /// requests that shared a variant, and no new image is held (they share the set's).
    mutating func giveVariantSharersJobsOfTheirOwn(_ jobID: UInt64) {
        guard let job = jobs[jobID], !job.variants.isEmpty else { return }
        var sharersByVariant: [(index: UInt32, requests: [RequestKey])] = []
        for key in job.requests {
            guard let only = requests[key]?.onlyVariant, job.variants.contains(where: { $0.index == only }) else { continue }
            if let at = sharersByVariant.firstIndex(where: { $0.index == only }) {
                sharersByVariant[at].requests.append(key)
            } else {
                sharersByVariant.append((only, [key]))
            }
        }
        for (index, sharers) in sharersByVariant {
            let variant = job.variants.first { $0.index == index }!
            let shareKey = Int(index) < job.variantKeys.count ? job.variantKeys[Int(index)] : nil
            let owner = requests[sharers[0]]!
            let newID = nextJobID
            nextJobID += 1
            var own = Job(spec: variant.spec, delivery: .final, image: job.image, source: job.source,
                          submittedKey: shareKey, shareKey: shareKey, requests: sharers,
                          lane: sharers.map { requests[$0]!.lane }.min()!)
            // Its attempts go on from what its clients were told.
            own.attempt = sharers.map { requests[$0]!.startedAttempt }.max()!
            own.losses = job.losses
            own.filesScope = job.filesScope
            own.quarantined = job.quarantined
            own.quarantinedAt = job.quarantinedAt
            jobs[newID] = own
            shareImage(job.imageHold, with: newID)
            sharing.release(shareKey, heldBy: jobID)
            sharing.claim(shareKey, by: newID)
            for key in sharers {
                requests[key]!.jobID = newID
                requests[key]!.onlyVariant = nil
            }
            if own.quarantined {
                waiting.quarantine(newID)
            } else {
                waiting.place(newID, lane: own.lane, principal: owner.key.principal, atFront: true)
            }
            jobs[jobID]!.requests.removeAll { sharers.contains($0) }
        }
    }

    private mutating func jobCancelled(
        _ cancelled: Enlarger_V1_JobCancelled, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        switch classify(jobID: cancelled.jobID, attempt: cancelled.attempt, workerAt: index) {
        case .cancelled:
            releaseTombstone(cancelled.jobID, workerAt: index, now: now, &actions)
        case .current:
            let reason = "job \(cancelled.jobID): JobCancelled for a job that was not cancelled"
            workerSentMalformed(workers[index].id, reason, &actions)
        case .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    private mutating func releaseTombstone(
        _ jobID: UInt64, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        workers[index].tombstones[jobID] = nil
        dispatch(now: now, &actions)
    }

    // MARK: Occupancy
    //
    // A worker's threads may be busy with more than the broker's live jobs: cancelled
    // attempts still in a stage that cannot be interrupted, and jobs it abandoned with an
    // earlier connection. Each Occupancy replaces the last: the abandoned count is taken
    // credit (so a worker that re-registers mid-encode is not overbooked), and naming a
    // tombstone restarts its cancel-ack timeout (so an honest worker is not retired).

    private mutating func occupied(
        _ occupancy: Enlarger_V1_Occupancy, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        let capacity = workers[index].capacity
        guard occupancy.busyThreads <= capacity, occupancy.stopping.count <= capacity else {
            let reason = "Occupancy names \(occupancy.busyThreads) busy threads and \(occupancy.stopping.count) "
                + "stopping attempts, over the capacity of \(capacity)"
            workerSentMalformed(workers[index].id, reason, &actions)
            return
        }
        workers[index].busyThreads = Int(occupancy.busyThreads)
        for attempt in occupancy.stopping where workers[index].tombstones[attempt.jobID]?.attempt == attempt.attempt {
            workers[index].tombstones[attempt.jobID]!.accountedAt = now
        }
        dispatch(now: now, &actions)
    }

    // MARK: Losing workers
    //
    // A worker leaves either gracefully (Disconnect: its jobs go back to the front of the
    // queue and the attempt does not count against the retry limit) or by being lost
    // (silence, an unreachable connection, a second Ready, a stuck cancel). Either way its
    // tombstones go with it, and the next dispatch gives each re-queued job a new attempt
    // number, so anything the old attempt still sends is recognised as late.
    //
    // Quarantine. A lost worker's death cannot be pinned on one of its jobs when it ran
    // several: one poison image would otherwise cost every job beside it an attempt. So a
    // loss counts against a job only when the job ran alone on that worker; jobs lost in
    // company are quarantined instead: they wait at the back, in their own queue, and each
    // then runs alone on an idle worker (which takes nothing else meanwhile). An innocent
    // job simply completes there; a poison one kills only the worker it runs on alone, and
    // after `maxRetries + 1` such deaths fails with WORKER_LOST. Healthy work keeps flowing
    // to the other workers throughout.

    mutating func loseWorker(
        at index: Int, reason: String, charge: Bool = true, countsAsLost: Bool = true, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        let worker = removeWorker(at: index)
        if countsAsLost { counters.workersLost += 1 } else { counters.workersDisconnected += 1 }
        // A job alone on a worker that died is the likely cause; none is when the worker
        // was not lost to a crash.
        let alone = charge && worker.inFlight == 1
        var requeued = 0
        var failed = 0
        for jobID in worker.jobs.keys.sorted() {
            guard var job = jobs[jobID] else { continue }
            job.worker = nil
            if let key = job.runningAs { running.remove(key) }
            job.runningAs = nil
            if alone { job.losses += 1 }
            if job.losses > configuration.maxRetries {
                jobs[jobID] = job
                // Another variant may be what kills workers: a request sharing one is tried alone.
                giveVariantSharersJobsOfTheirOwn(jobID)
                failed += 1
                failJob(jobID, .workerLost, "the worker died each of the \(job.losses) times this request ran alone on one",
                        now: now, &actions)
                continue
            }
            if !job.quarantined { counters.jobsQuarantined += 1 }
            job.quarantined = true
            job.quarantinedAt = now
            jobs[jobID] = job
            requeued += 1
            if leftOnlyToVariantSharers(jobID) {
                giveVariantSharersJobsOfTheirOwn(jobID)
                _ = removeJob(jobID)
                continue
            }
            waiting.quarantine(jobID)
        }
        counters.jobsRequeued += UInt64(requeued)
        actions.append(.report(.workerLost(worker.id, reason: reason, requeued: requeued, failed: failed)))
        dispatch(now: now, &actions)
    }

    private mutating func workerLeft(at index: Int, now: MonotonicInstant, _ actions: inout [Action]) {
        let worker = removeWorker(at: index)
        counters.workersDisconnected += 1
        for jobID in worker.jobs.keys.sorted(by: >) {
            guard let job = jobs[jobID] else { continue }
            jobs[jobID]!.worker = nil
            if let key = job.runningAs { running.remove(key) }
            jobs[jobID]!.runningAs = nil
            if leftOnlyToVariantSharers(jobID) {
                giveVariantSharersJobsOfTheirOwn(jobID)
                _ = removeJob(jobID)
            } else if job.quarantined {
                waiting.quarantine(jobID)
            } else {
                waiting.place(jobID, lane: job.lane, principal: job.owner.principal, atFront: true)
            }
        }
        counters.jobsRequeued += UInt64(worker.jobs.count)
        actions.append(.report(.workerLeft(worker.id, requeued: worker.jobs.count)))
        dispatch(now: now, &actions)
    }

    private mutating func removeWorker(at index: Int) -> Worker {
        let worker = workers.remove(at: index)
        workerIndex[worker.id] = nil
        for later in index..<workers.count { workerIndex[workers[later].id] = later }
        return worker
    }

    // MARK: Dispatch
    //
    // Credit-based, by lane, fair between principals: while some worker takes ordinary jobs,
    // the interactive lane goes first, then the bulk lane as long as bulk jobs leave the
    // interactive reserve free (`interactiveReserve` of the fleet's capacity, never the last
    // slot). Within a lane `waiting` picks the principal whose turn it is (weighted deficit
    // round robin), skipping principals at their running limit; the job goes to the worker
    // with the most free credits (the first registered among equals). A job whose client is
    // not reading its results is held back instead (it returns to the front of its lane once
    // a client of it has caught up), so a slow consumer's results wait at its own pace rather
    // than piling up in the broker. A shared job is held back only while none of its clients
    // reads: one slow client does not stall the others.
    // Quarantined jobs go, one each, to the idle workers fresh work leaves; one that waited longer than
    // `quarantineReservationDelay` reserves the least busy worker, which then takes no new
    // work until it is idle. Called after every event that can free credit or add work. A
    // retry of a request whose degraded result already reached the client asks for the
    // final result only.

    mutating func dispatch(now: MonotonicInstant, _ actions: inout [Action]) {
        // A worker kept free for a quarantined job gets it first; otherwise fresh work goes
        // first and quarantined jobs take the idle workers it leaves (a restarted worker is
        // idle: it must not be handed a suspect job while ordinary ones wait).
        dispatchQuarantined(reservedOnly: true, now: now, &actions)
        releaseNeedlessReservations()
        dispatchLanes(now: now, &actions)
        dispatchQuarantined(reservedOnly: false, now: now, &actions)
        if releaseNeedlessReservations() { dispatchLanes(now: now, &actions) }
    }

    /// A worker kept for a quarantined job that has gone (run elsewhere, ended) is free for
    /// ordinary work again. Returns whether one was.
    @discardableResult
    private mutating func releaseNeedlessReservations() -> Bool {
        guard waiting.quarantined.isEmpty else { return false }
        var released = false
        for index in workers.indices where workers[index].reserved {
            workers[index].reserved = false
            released = true
        }
        return released
    }

    private mutating func dispatchLanes(now: MonotonicInstant, _ actions: inout [Action]) {
        for lane in Lane.allCases {
            while waiting.count(in: lane) > 0, hasRoom(for: lane), let index = workerWithMostCredit() {
                guard let jobID = nextWaiting(in: lane) else { break }
                guard let job = jobs[jobID] else { continue }
                let noneReading = job.requests.allSatisfy { key in
                    requests[key].flatMap { clients[$0.client] }.map { $0.waitingBytes > 0 } ?? false
                }
                if noneReading, let owner = requests[job.owner]?.client {
                    waiting.refund(jobCosts[jobID] ?? 1, to: job.owner.principal, in: lane)
                    waiting.holdBack(jobID, for: owner, principal: job.owner.principal)
                    continue
                }
                send(jobID, toWorkerAt: index, now: now, &actions)
            }
        }
    }

    /// The job whose turn it is in `lane`, among principals under their running limit.
    private mutating func nextWaiting(in lane: Lane) -> UInt64? {
        let tenants = tenants
        let running = running
        let costs = jobCosts
        return waiting.next(in: lane, weight: { tenants.terms(for: $0).weight }, eligible: { principal in
            guard let limit = tenants.terms(for: principal).maxRunning else { return true }
            return running.count(of: principal) < limit
        }, cost: { costs[$0] ?? 1 })
    }

    /// What a job takes of its principal's fair share, in single outputs' worth: 1, or for a
    /// set, half its outputs still to make, rounded up (one decode serves them all: six
    /// outputs cost about three single requests' CPU, `Benchmarks/variants.sh`).
    static func fairShareCost(_ job: Job) -> Int {
        let outputs = job.variants.count - job.variantsSent.count
        return max(1, (outputs + 1) / 2)
    }

    /// Keeps `jobCosts` true to a set's job as its variants are made or found in the cache.
    mutating func updateCost(of jobID: UInt64) {
        guard let job = jobs[jobID], !job.variants.isEmpty else { return }
        let cost = Self.fairShareCost(job)
        jobCosts[jobID] = cost > 1 ? cost : nil
    }

    /// Whether a job of `lane` may take a slot now: a bulk one only outside the interactive
    /// reserve.
    func hasRoom(for lane: Lane) -> Bool {
        guard lane == .bulk else { return true }
        return running.count(in: .bulk) < bulkCapacity
    }

    /// The slots bulk jobs may hold: the fleet's capacity less the interactive reserve
    /// (rounded up), which never takes the last slot.
    var bulkCapacity: Int {
        let total = workers.reduce(0) { $0 + $1.capacity }
        let reserved = min(Int((Double(total) * configuration.interactiveReserve).rounded(.up)), total - 1)
        return total - max(reserved, 0)
    }

    /// Gives quarantined jobs idle workers (with `reservedOnly`, only workers reserved for
    /// them), and reserves one for the oldest once it waited long enough.
    private mutating func dispatchQuarantined(reservedOnly: Bool, now: MonotonicInstant, _ actions: inout [Action]) {
        while let jobID = waiting.quarantined.first {
            guard jobs[jobID] != nil else {
                _ = waiting.popQuarantined()
                continue
            }
            if let idle = workers.indices.first(where: { workers[$0].inFlight == 0 && (workers[$0].reserved || !reservedOnly) }) {
                _ = waiting.popQuarantined()
                workers[idle].reserved = false
                workers[idle].exclusiveJob = jobID
                jobs[jobID]?.quarantinedAt = nil
                send(jobID, toWorkerAt: idle, now: now, &actions)
                continue
            }
            let waited = jobs[jobID]!.quarantinedAt.map { now.duration(since: $0) } ?? .zero
            if waited >= configuration.quarantineReservationDelay, !workers.contains(where: \.reserved),
               let least = workers.indices.filter({ !workers[$0].isExclusive }).min(by: {
                   workers[$0].inFlight < workers[$1].inFlight
               }) {
                workers[least].reserved = true
            }
            return
        }
    }

    private mutating func send(_ jobID: UInt64, toWorkerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]) {
        guard var job = jobs[jobID] else { return }
        if job.firstDispatchedAt == nil { job.firstDispatchedAt = now }
        job.lastDispatchedAt = now
        let runningAs = RunningCounts.Key(lane: job.lane, principal: job.owner.principal)
        job.runningAs = runningAs
        running.add(runningAs)
        // A location or version stops finding the job (see Sharing).
        job.shareKey = sharing.dispatched(jobID, key: job.shareKey)
        job.attempt += 1
        job.worker = workers[index].id
        jobs[jobID] = job
        workers[index].jobs[jobID] = job.attempt

        var message = Enlarger_V1_Job()
        message.jobID = jobID
        message.attempt = job.attempt
        message.requestID = job.owner.id
        message.spec = job.spec
        message.delivery = job.degradedSent ? .final : job.delivery
        message.placeholder = job.placeholder && !job.placeholderSent && !job.degradedSent && job.delivery != .info
        // A retry asks only for the variants the client does not have.
        message.variants = job.variants.filter { !job.variantsSent.contains($0.index) }
        // An inline image's digest goes along only where results are shared or cached on the
        // strength of the worker's check of it; else the inline image needs no source at all.
        if job.source.namesPlace || (!job.source.inline.sha256.isEmpty && reliesOnDigests) { message.source = job.source }
        message.filesScope = job.filesScope
        // A URL's name lookups are bounded per principal at the worker.
        if case .url? = job.source.kind { message.principal = job.owner.principal.name }
        actions.append(.sendToWorker(workers[index].id, BrokerToWorkerMessage.job(message, image: job.image).encoded()))
    }

    private func workerWithMostCredit() -> Int? {
        var best: Int?
        var bestCredit = 0
        for index in workers.indices where workers[index].takesOrdinaryJobs && workers[index].freeCredit > bestCredit {
            best = index
            bestCredit = workers[index].freeCredit
        }
        return best
    }
}
