import EnlargerProtocol
import Foundation

// MARK: - File and URL sources
//
// A file or URL request names a place, not a version: the broker cannot know what it will
// read there. While it waits to be dispatched, a job shares by location only (identical
// requests join it; the cache is not asked); once dispatched, its worker may open the source
// before it can say so, and later requests no longer join by location (a request sent after
// the file changed must not get the old version). JobSourceOpened then names the version, and the
// job is treated as if it had been submitted with it:
// - a cached result for that version answers every request on the job at once, and the job
//   is withdrawn (its worker stops reading);
// - a live job already reading that version takes its requests over (each request keeps
//   its id, events and terminal event), and this one is withdrawn;
// - otherwise it registers under the version, for later requests to find and for its
//   result to be cached.
// A changed file or a changed validator is another version: nothing stale is ever answered.

extension BrokerCore {
    mutating func sourceOpened(
        _ opened: Enlarger_V1_JobSourceOpened, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        let jobID = opened.jobID
        switch classify(jobID: jobID, attempt: opened.attempt, workerAt: index) {
        case .current:
            guard let job = jobs[jobID] else { return }
            guard job.source.namesPlace else {
                abandonBrokenJob(jobID, workerAt: index, reason: "job \(jobID): JobSourceOpened for an inline source",
                                 now: now, &actions)
                return
            }
            guard opened.identity.count <= WireLimits.maxSourceIdentityBytes else {
                abandonBrokenJob(jobID, workerAt: index,
                                 reason: "job \(jobID): JobSourceOpened.identity is longer than \(WireLimits.maxSourceIdentityBytes) bytes",
                                 now: now, &actions)
                return
            }
            // The key is made from what the Submit asked for (scope, spec, delivery), so a
            // no_share request (no key) stays unshared.
            let versionKey = opened.identity.isEmpty ? nil : job.submittedKey?.withVersion(opened.identity)
            guard job.shareKey != versionKey else { return }
            sharing.release(job.shareKey, heldBy: jobID)
            jobs[jobID]!.shareKey = nil
            guard let versionKey else { return }

            if let hit = sharing.cached(versionKey, for: job.owner.principal) {
                withdraw(jobID, now: now, &actions)
                answerJobFromCache(jobID, hit, now: now, &actions)
                dispatch(now: now, &actions)
                return
            }
            if job.attempt == 1 { for key in job.requests where requests[key] != nil { tally(key.principal, .cacheMisses) } }
            jobs[jobID]!.shareKey = versionKey
            if let other = sharing.joinable(versionKey), other != jobID, let target = jobs[other] {
                // Merging moves requests onto a job that runs now and has sent them nothing
                // this one has not: a first attempt with no degraded result yet, into a job a
                // worker holds. Otherwise this job keeps its requests and takes the key over.
                if job.attempt == 1, !job.degradedSent, target.worker != nil {
                    withdraw(jobID, now: now, &actions)
                    merge(jobID, into: other, &actions)
                    dispatch(now: now, &actions)
                    return
                }
            }
            sharing.takeOver(versionKey, by: jobID)
        case .cancelled, .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }

    /// Every request on the job ends with the cached result, as if it had hit at Submit.
    private mutating func answerJobFromCache(
        _ jobID: UInt64, _ hit: ResultCache<Payload>.Hit, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        let job = removeJob(jobID)
        var result = hit.result
        result.cached = true
        for key in job.requests {
            guard let request = requests[key] else { continue }
            tally(key.principal, .cacheHits)
            result.requestID = request.requestID
            requests[key]!.bytesOut += hit.payload.count
            send(.result(result, image: hit.payload), to: request, &actions)
            endRequest(key, .finished, job: job, now: now, &actions)
        }
    }

    /// Moves the requests of `jobID` (already withdrawn) onto `target`, which reads the same
    /// version; `jobID` is gone afterwards. Each moved request hears of the target's attempt
    /// if it has started, and gets the target's events still to come.
    private mutating func merge(_ jobID: UInt64, into target: UInt64, _ actions: inout [Action]) {
        let job = removeJob(jobID)
        let startedAttempt = jobs[target]!.startedAttempt
        if job.lane < jobs[target]!.lane {
            jobs[target]!.lane = job.lane
            waiting.move(target, to: job.lane)
        }
        var someoneReads = false
        for key in job.requests {
            guard let request = requests[key] else { continue }
            if !request.sharedWork {
                tally(key.principal, .jobsShared)
                requests[key]!.sharedWork = true
            }
            requests[key]!.jobID = target
            jobs[target]!.requests.append(key)
            tellStarted(key, attempt: startedAttempt, &actions)
            if (clients[request.client]?.waitingBytes ?? 0) == 0 { someoneReads = true }
        }
        if waiting.isHeldBack(target), someoneReads { releaseHeldJobs([target]) }
    }

    /// Download progress goes to every request on the job; it ends none of them.
    mutating func jobDownload(
        _ download: Enlarger_V1_JobDownload, workerAt index: Int, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        switch classify(jobID: download.jobID, attempt: download.attempt, workerAt: index) {
        case .current:
            guard let job = jobs[download.jobID] else { return }
            let isStep = switch download.phase {
            case .started, .progress, .finished: true
            case .unspecified, .UNRECOGNIZED: false
            }
            guard isStep, job.source.namesPlace else {
                abandonBrokenJob(download.jobID, workerAt: index,
                                 reason: "job \(download.jobID): JobDownload with phase \(download.phase) for this source",
                                 now: now, &actions)
                return
            }
            var event = Enlarger_V1_Download()
            event.phase = download.phase
            event.bytes = download.bytes
            event.expectedBytes = download.expectedBytes
            for key in job.requests {
                guard let request = requests[key] else { continue }
                event.requestID = request.requestID
                send(.download(event), to: request, &actions)
            }
        case .cancelled, .late:
            counters.lateResultsDropped += 1
        case .malformed(let reason):
            workerSentMalformed(workers[index].id, reason, &actions)
        }
    }
}
