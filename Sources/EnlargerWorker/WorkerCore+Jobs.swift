import EnlargerProtocol
import Foundation
import ImageModel
import Imaging

// Jobs: from the broker's Job to the one terminal frame. A job is `preparing` while its
// thread reads the header, `waitingForMemory` once estimated, `running` once admitted (a
// file or URL job first waits for its source bytes and is `reading` once they are), and
// then either sends its terminal result (`terminalSent`) or is cancelled (`cancelling`,
// answered with JobCancelled when its thread returns). Whatever the phase, the job is
// forgotten only when its thread returns (`jobEnded`). Its share of the budget is given back
// (and the next waiting jobs admitted) a little later, when the buffers its run handed to
// the reaper have really been freed (`jobMemoryFreed`).

extension WorkerCore {
    /// A file or URL job's thread is about to read up to `bytes` of its source: it waits until
    /// they are admitted, and fails at once when they can never be.
    mutating func jobSourceWanted(_ token: JobToken, bytes: Int) -> [Action] {
        guard let job = jobs[token], !job.abandoned, job.phase == .preparing || job.phase == .yielding else { return [] }
        var actions: [Action] = []
        if job.phase == .yielding {
            // Its bytes are dropped: what it held is free, and it queues again.
            admission.yielded(token)
            jobs[token]!.reserved = 0
        }
        guard admission.enqueue(token, bytes: bytes, source: true) else {
            refuseTooLarge(token, bytes: bytes, "its source may need \(ByteCount(bytes))", &actions)
            return actions
        }
        jobs[token]!.phase = .waitingForMemory
        admitWaitingJobs(&actions)
        if jobs[token]?.phase == .waitingForMemory {
            actions.append(.report(.waitingForMemory(job.key, bytes: bytes, inUse: admission.inUse)))
        }
        return actions
    }

    /// A download's length is known and below what was reserved for it: the rest is free.
    mutating func jobSourceExpected(_ token: JobToken, bytes: Int) -> [Action] {
        guard let job = jobs[token], job.phase == .reading, bytes < job.reserved else { return [] }
        admission.shrinkSource(token, to: bytes)
        jobs[token]!.reserved = bytes
        var actions: [Action] = []
        if !isStopped { admitWaitingJobs(&actions) }
        return actions
    }

    /// A job thread read the header: the job needs `estimate` at its peak (the source bytes
    /// it holds included).
    mutating func jobEstimated(_ token: JobToken, _ estimate: MemoryEstimate) -> [Action] {
        guard let job = jobs[token], !job.abandoned, job.phase == .preparing || job.phase == .reading else { return [] }
        var actions: [Action] = []
        if job.phase == .reading {
            switch admission.replace(token, with: estimate.bytes) {
            case .admitted:
                jobs[token]!.phase = .running
                jobs[token]!.reserved = estimate.bytes
                actions.append(.admit(job.control))
                admitWaitingJobs(&actions)
            case .waiting:
                jobs[token]!.phase = .waitingForMemory
                admitWaitingJobs(&actions)
                if jobs[token]?.phase == .waitingForMemory {
                    actions.append(.report(.waitingForMemory(job.key, bytes: estimate.bytes, inUse: admission.inUse)))
                }
            case .never:
                refuseTooLarge(token, bytes: estimate.bytes, "the image needs \(estimate)", &actions)
            }
            return actions
        }
        guard admission.enqueue(token, bytes: estimate.bytes) else {
            // It can never fit: fail it now, from its header, and release its thread.
            refuseTooLarge(token, bytes: estimate.bytes, "the image needs \(estimate)", &actions)
            return actions
        }
        jobs[token]!.phase = .waitingForMemory
        admitWaitingJobs(&actions)
        if jobs[token]?.phase == .waitingForMemory {
            actions.append(.report(.waitingForMemory(job.key, bytes: estimate.bytes, inUse: admission.inUse)))
        }
        return actions
    }

    /// A job thread posted a result. Sent only while the job runs and is not cancelled.
    mutating func jobResult(_ token: JobToken, _ output: StageOutput<Payload>) -> [Action] {
        guard let job = jobs[token], !job.abandoned, job.phase == .running else { return [] }
        if output.isTerminal {
            jobs[token]!.phase = .terminalSent
            jobs[token]!.ending = .finished
        }
        var result = Enlarger_V1_JobResult()
        result.jobID = job.key.jobID
        result.attempt = job.key.attempt
        if let info = output.info {
            result.stage = .info
            result.info = Enlarger_V1_ImageInfo(info)
        } else if let placeholder = output.placeholder {
            result.stage = .placeholder
            result.width = UInt32(clamping: placeholder.width)
            result.height = UInt32(clamping: placeholder.height)
            result.placeholder = Data(placeholder.thumbHash)
        } else {
            result.stage = Enlarger_V1_Stage(output.stage)
            result.width = UInt32(output.width)
            result.height = UInt32(output.height)
            result.format = Enlarger_V1_ImageFormat(output.format)
            result.contentType = output.format.contentType
            result.notes = output.notes
        }
        result.terminal = output.isTerminal
        result.variant = output.variant
        // A job thread checks the digest (or reads the whole file) before it produces anything.
        result.digestVerified = job.verified
        return [.send(.jobResult(result, image: output.image))]
    }

    /// A job thread returned: the job is forgotten and its terminal frame sent if it has not
    /// been yet. Its memory stays reserved until `jobMemoryFreed`.
    mutating func jobEnded(_ token: JobToken, _ outcome: JobOutcome, figures: JobFigures = JobFigures()) -> [Action] {
        guard let job = jobs.removeValue(forKey: token) else { return [] }
        var actions: [Action] = []
        if tokens[job.key] == token { tokens[job.key] = nil }
        admission.forget(token)
        if job.reserved > 0 { freeing[token] = job.reserved }
        // A terminal frame already sent stands even if the connection went afterwards.
        var ending = job.ending ?? .abandoned
        if !job.abandoned {
            switch (job.phase, outcome) {
            case (.terminalSent, _):
                break
            case (.cancelling, _):
                var cancelled = Enlarger_V1_JobCancelled()
                cancelled.jobID = job.key.jobID
                cancelled.attempt = job.key.attempt
                actions.append(.send(.jobCancelled(cancelled)))
                ending = .cancelled
            case (_, .failed(let error)):
                let code = Enlarger_V1_ErrorCode(error.code)
                sendFailed(job.key, code, error.message, &actions)
                ending = .failed(code)
            case (_, .digestMismatch(let message)):
                sendFailed(job.key, .digestMismatch, message, &actions)
                ending = .failed(.digestMismatch)
            case (_, .sourceFailed(let failure)):
                let code: Enlarger_V1_ErrorCode =
                    switch failure.kind {
                    case .refused: .sourceRefused
                    case .unavailable: .sourceUnavailable
                    case .cancelled: .internal
                    }
                sendFailed(job.key, code, failure.message, &actions)
                ending = .failed(code)
            case (_, .completed):
                sendFailed(job.key, .internal, "the pipeline ended without a terminal result", &actions)
                ending = .failed(.internal)
            }
        }
        actions.append(.report(.jobEnded(JobEnd(key: job.key, requestID: job.requestID, outcome: ending, figures: figures))))
        // A thread the broker counted as busy with an abandoned job is free: say so now
        // rather than at the next heartbeat, so its credit comes back at once.
        if job.abandoned, connection != nil, !isStopped { actions.append(.send(.occupancy(occupancy))) }
        if !isStopped { admitWaitingJobs(&actions) }
        return actions
    }

    /// What waits in the outbox toward the broker counts against the budget until it is sent
    /// (see `MemoryAdmission.outside`).
    mutating func outboxHolds(_ bytes: Int) -> [Action] {
        let freed = bytes < admission.outside
        admission.outside = bytes
        var actions: [Action] = []
        if freed, !isStopped { admitWaitingJobs(&actions) }
        return actions
    }

    /// Everything the job's run released has been freed: its share of the budget is free.
    mutating func jobMemoryFreed(_ token: JobToken) -> [Action] {
        guard let bytes = freeing.removeValue(forKey: token) else { return [] }
        admission.release(bytes)
        var actions: [Action] = []
        if !isStopped { admitWaitingJobs(&actions) }
        return actions
    }

    // MARK: - From the broker

    mutating func startJob(_ job: Enlarger_V1_Job, image: Payload, _ actions: inout [Action]) {
        let key = JobKey(jobID: job.jobID, attempt: job.attempt)
        guard tokens[key] == nil else {
            actions.append(.report(.duplicateJob(key)))
            return
        }
        var started = Enlarger_V1_JobStarted()
        started.jobID = key.jobID
        started.attempt = key.attempt
        actions.append(.send(.jobStarted(started)))
        let options: ResizeOptions, delivery: ImageModel.Delivery
        let infoOnly = job.delivery == .info
        let source: JobSource
        var variants: [(index: UInt32, options: ResizeOptions)] = []
        do throws(ImagingError) {
            for variant in job.variants { variants.append((variant.index, try ResizeOptions(wire: variant.spec))) }
            if let first = variants.first { options = first.options } else { options = try ResizeOptions(wire: job.spec) }
            delivery = infoOnly ? .final : try ImageModel.Delivery(job.delivery)
            source = try Self.source(of: job, image: image)
        } catch {
            let code = Enlarger_V1_ErrorCode(error.code)
            sendFailed(key, code, error.message, &actions)
            var figures = JobFigures()
            figures.bytesIn = image.count
            actions.append(.report(.jobEnded(JobEnd(key: key, requestID: job.requestID, outcome: .failed(code),
                                                    figures: figures))))
            return
        }
        lastToken += 1
        let control = JobControl()
        let verified = if case .inline(_?) = source { true } else { false }
        jobs[lastToken] = Job(key: key, requestID: job.requestID, control: control, verified: verified)
        tokens[key] = lastToken
        actions.append(.startJob(JobStart(token: lastToken, key: key, image: image, options: options,
                                          delivery: delivery, infoOnly: infoOnly,
                                          placeholder: job.placeholder && !infoOnly && variants.isEmpty,
                                          source: source, control: control, variants: variants)))
    }

    /// The Job's source as its thread reads it; a malformed one fails the job.
    private static func source(of job: Enlarger_V1_Job, image: Payload) throws(ImagingError) -> JobSource {
        switch job.source.kind {
        case .inline(let inline)?:
            let digest = inline.sha256
            guard digest.isEmpty || digest.count == 32 else {
                throw ImagingError(.invalidArgument, "the source digest must be 32 bytes (SHA-256), got \(digest.count)")
            }
            return .inline(digest: digest.isEmpty ? nil : digest)
        case .file(let file)?:
            guard image.count == 0 else { throw ImagingError(.invalidArgument, "a file source's Job carries an image") }
            return .file(path: file.path, scope: job.filesScope)
        case .url(let url)?:
            guard image.count == 0 else { throw ImagingError(.invalidArgument, "a URL source's Job carries an image") }
            return .url(url.url, principal: job.principal)
        case nil:
            return .inline(digest: nil)
        }
    }

    /// A job thread opened its file or URL: the broker hears which version, while the job is
    /// live and not cancelled.
    mutating func jobSourceOpened(_ token: JobToken, identity: Data) -> [Action] {
        guard let job = jobs[token], job.isSending else { return [] }
        // Once per attempt: a job that yielded its bytes and read again says nothing more, but
        // a different version then makes its results uncacheable.
        if let first = job.identity {
            if first != identity { jobs[token]!.identityChanged = true }
            return []
        }
        jobs[token]!.identity = identity
        var opened = Enlarger_V1_JobSourceOpened()
        opened.jobID = job.key.jobID
        opened.attempt = job.key.attempt
        opened.identity = identity
        return [.send(.jobSourceOpened(opened))]
    }

    /// A job thread read its whole file: its results may be cached only if the file did not
    /// change meanwhile.
    mutating func jobSourceRead(_ token: JobToken, verified: Bool) -> [Action] {
        guard let job = jobs[token] else { return [] }
        jobs[token]!.verified = verified && !job.identityChanged
        return []
    }

    mutating func jobDownload(_ token: JobToken, _ progress: DownloadProgress) -> [Action] {
        guard let job = jobs[token], job.isSending else { return [] }
        var download = Enlarger_V1_JobDownload()
        download.jobID = job.key.jobID
        download.attempt = job.key.attempt
        download.phase = progress.phase
        download.bytes = UInt64(progress.bytes)
        download.expectedBytes = UInt64(progress.expectedBytes ?? 0)
        return [.send(.jobDownload(download))]
    }

    /// `CancelJob`: stop the job and send nothing more for it but `JobCancelled`. Ignored for
    /// a job that is unknown, already cancelling, or whose terminal frame went out.
    mutating func cancelJob(_ key: JobKey, _ actions: inout [Action]) {
        guard let token = tokens[key], let job = jobs[token] else { return }
        switch job.phase {
        case .cancelling, .terminalSent:
            return
        case .waitingForMemory:
            admission.withdraw(token)
        case .preparing, .reading, .yielding, .running:
            break
        }
        jobs[token]!.phase = .cancelling
        actions.append(.cancel(job.control))
        actions.append(.report(.cancelling(key)))
        // Withdrawing the head of the queue may let the jobs behind it in.
        admitWaitingJobs(&actions)
    }

    // MARK: - Helpers

    private mutating func admitWaitingJobs(_ actions: inout [Action]) {
        let decided = admission.admitReady()
        for (token, bytes) in decided.admitted {
            // Admitted for its source bytes (it now reads them), or for its estimate.
            jobs[token]!.phase = admission.holders[token] != nil ? .reading : .running
            jobs[token]!.reserved = bytes
            actions.append(.admit(jobs[token]!.control))
        }
        for token in decided.yielding {
            jobs[token]!.phase = .yielding
            actions.append(.yieldSource(jobs[token]!.control))
            actions.append(.report(.yieldingSource(jobs[token]!.key, bytes: jobs[token]!.reserved)))
        }
    }

    /// Fails a job whose source or estimate exceeds the whole budget, from what it knows
    /// before reading or allocating, and releases its thread.
    private mutating func refuseTooLarge(_ token: JobToken, bytes: Int, _ what: String, _ actions: inout [Action]) {
        let job = jobs[token]!
        admission.withdraw(token)
        jobs[token]!.phase = .terminalSent
        jobs[token]!.ending = .failed(.tooLarge)
        let budget = ByteCount(configuration.memoryBudget)
        sendFailed(job.key, .tooLarge, "\(what), more than this worker's whole memory budget of \(budget), "
                   + "so it can never run here", &actions)
        actions.append(.cancel(job.control))
        actions.append(.report(.tooLargeForBudget(job.key, bytes: bytes)))
    }

    private func sendFailed(_ key: JobKey, _ code: Enlarger_V1_ErrorCode, _ message: String, _ actions: inout [Action]) {
        var failed = Enlarger_V1_JobFailed()
        failed.jobID = key.jobID
        failed.attempt = key.attempt
        failed.code = code
        failed.message = message
        actions.append(.send(.jobFailed(failed)))
    }
}
