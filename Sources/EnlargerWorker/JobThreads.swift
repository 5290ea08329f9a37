import Dispatch
import EnlargerProtocol
import Fetching
import Foundation
import ImageModel
import Imaging
import Locking
import ZeroMQ

/// A job as handed from the I/O thread to a job thread.
struct JobTicket: @unchecked Sendable {
    // @unchecked: `start.image` is the received frame, handed over by the I/O thread, which
    // never touches it again; the pipeline reads the JPEG straight from it (no copy).
    let start: JobStart<Message>
}

/// One result of a job, with its image already in the frame the I/O thread will send.
struct StageFrame: @unchecked Sendable {
    // @unchecked: the job thread creates the frame and hands it over; only the I/O thread
    // uses it afterwards.
    let output: StageOutput<Message>

    /// Copies the encoded image into a frame; when that frame cannot be allocated, the job
    /// fails `TOO_LARGE` (the worker lives on).
    init(_ result: StageResult, variant: UInt32 = 0) throws(ImagingError) {
        let frame: Message
        do {
            frame = try result.image.withUnsafeBytes { bytes throws(ZMQError) in try Message.copy(of: bytes) }
        } catch {
            throw ImagingError(.tooLarge, "no memory for the \(result.image.byteCount)-byte encoded image: \(error)")
        }
        output = StageOutput(stage: result.stage, isTerminal: result.isTerminal, width: result.image.width,
                             height: result.image.height, format: result.image.format, image: frame,
                             notes: result.notes, variant: variant)
    }

    /// A placeholder: never terminal, an empty image frame.
    init(placeholder: Placeholder) {
        output = StageOutput(stage: .degraded, isTerminal: false, width: placeholder.width, height: placeholder.height,
                             format: .jpeg, image: Message(), placeholder: placeholder)
    }

    /// An info-only job's one result: the facts, and an empty image frame.
    init(info: ImageInfo) {
        output = StageOutput(stage: .final, isTerminal: true, width: 0, height: 0, format: .jpeg, image: Message(),
                             info: info)
    }
}

/// What the I/O thread's mailbox carries: what job threads learn and produce, and `stop`.
enum WorkerMail: Sendable {
    /// The job's file or URL was opened: the version it reads (empty when it has no name).
    case sourceOpened(JobToken, identity: Data)
    /// The job's file was read whole; `verified` when it still was the version opened.
    case sourceRead(JobToken, verified: Bool)
    case download(JobToken, DownloadProgress)
    /// The job is about to read up to this many bytes of its file or download, and waits
    /// until they are admitted against the memory budget (round 1 of its admission).
    case sourceWanted(JobToken, bytes: Int)
    /// The download's Content-Length: what was reserved beyond it is free.
    case sourceExpected(JobToken, bytes: Int)
    /// The job's header was read: its estimated peak memory. It now waits for admission.
    case estimated(JobToken, MemoryEstimate)
    case result(JobToken, StageFrame)
    case ended(JobToken, JobOutcome, JobFigures)
    /// The buffers the job's run handed to the reaper have been freed.
    case memoryFreed(JobToken)
    /// Someone asks the loop for its state (a scrape, a health check): wake up and answer.
    case probe
    case stop
}

/// A fixed set of threads that run the image pipeline, one job at a time each.
///
/// Job threads never call ZeroMQ: every estimate, result and ending is posted to the I/O
/// thread's mailbox, in order, and the I/O thread decides what is sent. A job allocates
/// pixel memory only once the I/O thread has admitted it (`JobControl`).
final class JobThreads: Sendable {
    private let queue: TicketQueue
    private let exited = DispatchGroup()

    init(count: Int, pipeline: ImagePipeline, sources: SourceAccess, mailbox: Mailbox<WorkerMail>) {
        queue = TicketQueue(consumers: count)
        for index in 0..<count {
            exited.enter()
            let thread = Thread { [queue, exited] in
                defer { exited.leave() }
                while let ticket = queue.pop() {
                    Self.execute(ticket.start, pipeline: pipeline, sources: sources, mailbox: mailbox)
                }
            }
            thread.name = "enlarger-job-\(index)"
            thread.start()
        }
    }

    /// Queues a job for the next free thread.
    func submit(_ start: JobStart<Message>) {
        queue.push(JobTicket(start: start))
    }

    /// Discards queued jobs, lets running ones return (their controls must be cancelled
    /// first) and waits until every thread has exited.
    func closeAndJoin() {
        queue.close()
        exited.wait()
    }

    private static func execute(
        _ job: JobStart<Message>, pipeline: ImagePipeline, sources: SourceAccess, mailbox: Mailbox<WorkerMail>
    ) {
        let clock = ContinuousClock()
        let start = clock.now
        var figures = JobFigures()
        let outcome: JobOutcome
        switch job.source {
        case .inline(let digest):
            figures.bytesIn = job.image.count
            outcome = job.image.withUnsafeBytes { input -> JobOutcome in
                if let digest {
                    guard let actual = Digest.sha256(input) else {
                        return .failed(ImagingError(.tooLarge, "no memory to compute the image's SHA-256"))
                    }
                    if actual != digest {
                        return .digestMismatch("the image's SHA-256 is not the digest its request named")
                    }
                }
                return run(job, input: input, pipeline: pipeline, mailbox: mailbox, figures: &figures)
                    ?? .failed(ImagingError(.invalidArgument, "an inline job was told to yield source bytes it does not hold"))
            }
        case .file(let path, let scope):
            outcome = readFile(path, scope: scope, job, pipeline: pipeline, sources: sources, mailbox: mailbox, figures: &figures)
        case .url(let url, let principal):
            outcome = download(url, principal: principal, job, pipeline: pipeline, sources: sources, mailbox: mailbox, figures: &figures)
        }
        figures.run = clock.now - start
        mailbox.post(.ended(job.token, outcome, figures))
        // Large buffers are freed off this thread; the job's memory counts until they are.
        let token = job.token
        BufferReaper.afterPendingFrees { mailbox.post(.memoryFreed(token)) }
    }

    /// The pipeline over the whole image: its estimate, the wait for memory, its results.
    /// `round`: the admission that lets it run (a file or URL job was admitted for its bytes
    /// first). Nil when the job, holding source bytes, was told to yield them (more than
    /// `yieldsSeen` times in all): its caller drops them and asks again.
    private static func run(
        _ job: JobStart<Message>, input: UnsafeRawBufferPointer, pipeline: ImagePipeline,
        mailbox: Mailbox<WorkerMail>, figures: inout JobFigures, round: Int = 1, yieldsSeen: Int = .max
    ) -> JobOutcome? {
        do throws(ImagingError) {
            if job.infoOnly {
                return try answerInfo(job, pipeline.info(of: input, failOn: job.options.failOn), mailbox: mailbox,
                                      round: round)
            }
            if !job.variants.isEmpty {
                return try runVariants(job, input: input, pipeline: pipeline, mailbox: mailbox, figures: &figures,
                                       round: round, yieldsSeen: yieldsSeen)
            }
            let prepared = try pipeline.prepare(input, options: job.options, delivery: job.delivery,
                                                cancel: job.control.flag, placeholder: job.placeholder)
            mailbox.post(.estimated(job.token, prepared.memoryEstimate))
            switch job.control.awaitAdmission(round: round, yieldsSeen: yieldsSeen) {
            case .admitted: break
            case .cancelled: throw ImagingError(.cancelled, "cancelled before it was admitted")
            case .yielded: return nil
            }
            if job.placeholder {
                prepared.onPlaceholder = { made in mailbox.post(.result(job.token, StageFrame(placeholder: made.placeholder))) }
            }
            try prepared.run { result throws(ImagingError) in
                figures.add(result.timings, bytesOut: result.image.byteCount)
                mailbox.post(.result(job.token, try StageFrame(result)))
            }
            return .completed
        } catch {
            return .failed(error)
        }
    }

    /// A job with variants: one decode, each variant's final as it is made.
    private static func runVariants(
        _ job: JobStart<Message>, input: UnsafeRawBufferPointer, pipeline: ImagePipeline,
        mailbox: Mailbox<WorkerMail>, figures: inout JobFigures, round: Int, yieldsSeen: Int
    ) throws(ImagingError) -> JobOutcome? {
        let prepared = try pipeline.prepareVariants(input, variants: job.variants.map(\.options), cancel: job.control.flag)
        mailbox.post(.estimated(job.token, prepared.memoryEstimate))
        switch job.control.awaitAdmission(round: round, yieldsSeen: yieldsSeen) {
        case .admitted: break
        case .cancelled: throw ImagingError(.cancelled, "cancelled before it was admitted")
        case .yielded: return nil
        }
        try prepared.run { position, result throws(ImagingError) in
            figures.add(result.timings, bytesOut: result.image.byteCount)
            mailbox.post(.result(job.token, try StageFrame(result, variant: job.variants[position].index)))
        }
        return .completed
    }

    /// An info-only job's one result. The header alone needs no pixel memory, so nothing is
    /// reserved, but admission still orders it with the other jobs and lets a cancel stop it.
    private static func answerInfo(
        _ job: JobStart<Message>, _ info: ImageInfo, mailbox: Mailbox<WorkerMail>, round: Int = 1
    ) throws(ImagingError) -> JobOutcome {
        mailbox.post(.estimated(job.token, MemoryEstimate(bytes: 0, coefficientBytes: 0, decodedBytes: 0)))
        guard job.control.waitForAdmission(round: round) else {
            throw ImagingError(.cancelled, "cancelled before it was admitted")
        }
        mailbox.post(.result(job.token, StageFrame(info: info)))
        return .completed
    }

    /// A file source: opened beneath the files root, its version reported, its bytes admitted
    /// against the memory budget, then read whole (or, for info, only as much of its
    /// beginning as the header needs).
    private static func readFile(
        _ path: String, scope: String, _ job: JobStart<Message>, pipeline: ImagePipeline, sources: SourceAccess,
        mailbox: Mailbox<WorkerMail>, figures: inout JobFigures
    ) -> JobOutcome {
        guard let root = sources.files else {
            return .sourceFailed(.refused("file sources are not enabled on this worker (it has no files root)"))
        }
        do throws(SourceFailure) {
            let file = try root.open(path, scope: scope)
            mailbox.post(.sourceOpened(job.token, identity: file.identity))
            if job.infoOnly {
                guard admitSource(min(file.size, sources.maxInputBytes), job, mailbox: mailbox) else {
                    return .failed(ImagingError(.cancelled, "cancelled before its source was admitted"))
                }
                return try readInfo(of: file, job, limit: sources.maxInputBytes, pipeline: pipeline, mailbox: mailbox,
                                    figures: &figures)
            }
            guard file.size <= sources.maxInputBytes else {
                return .failed(ImagingError(.tooLarge, "\(path) has \(file.size) bytes, over the limit of \(sources.maxInputBytes)"))
            }
            var admissions = 0
            var yields = 0
            while true {
                guard admitSource(file.size, job, round: admissions + 1, mailbox: mailbox) else {
                    return .failed(ImagingError(.cancelled, "cancelled before its source was admitted"))
                }
                admissions += 1
                let bytes = try file.read(upTo: file.size, cancel: job.control.flag)
                figures.bytesIn = bytes.count
                // A file rewritten while it was read may be neither this version nor the next:
                // its results are delivered, but not cached.
                mailbox.post(.sourceRead(job.token, verified: bytes.count == file.size && file.isUnchanged && file.isSettled))
                let outcome = bytes.withUnsafeBytes { input in
                    run(job, input: input, pipeline: pipeline, mailbox: mailbox, figures: &figures,
                        round: admissions + 1, yieldsSeen: yields)
                }
                if let outcome { return outcome }
                // Told to yield: the bytes go with this turn of the loop, then are asked for again.
                yields += 1
            }
        } catch {
            return .sourceFailed(error)
        }
    }

    /// Round 1 of a file or URL job's admission: nothing is read before `bytes` are admitted.
    /// Returns false when the job was cancelled (or refused) while it waited.
    private static func admitSource(
        _ bytes: Int, _ job: JobStart<Message>, round: Int = 1, mailbox: Mailbox<WorkerMail>
    ) -> Bool {
        guard !job.control.isCancelled else { return false }
        mailbox.post(.sourceWanted(job.token, bytes: bytes))
        return job.control.waitForAdmission(round: round)
    }

    /// The header's facts from as little of the file as they need: 64 KiB, then four times
    /// as much each time the header may reach past what was read (the prefix ends in the
    /// middle of it: truncated, or damaged where it was cut), never more than `limit`.
    private static func readInfo(
        of file: OpenedFile, _ job: JobStart<Message>, limit: Int, pipeline: ImagePipeline,
        mailbox: Mailbox<WorkerMail>, figures: inout JobFigures
    ) throws(SourceFailure) -> JobOutcome {
        let most = min(file.size, limit)
        var count = min(most, Self.infoPrefixBytes)
        while true {
            let bytes = try file.read(upTo: count, cancel: job.control.flag)
            figures.bytesIn = bytes.count
            let attempt = bytes.withUnsafeBytes { input in
                Result { () throws(ImagingError) in try pipeline.info(of: input, failOn: job.options.failOn) }
            }
            switch attempt {
            case .success(var info):
                info.byteSize = file.size
                do throws(ImagingError) {
                    return try answerInfo(job, info, mailbox: mailbox, round: 2)
                } catch {
                    return .failed(error)
                }
            case .failure(let error):
                // A prefix fails as truncated (or as damaged where it was cut); anything else
                // (not an image, over a limit) is the image's answer already.
                let mayGoOn = error.code == .truncated || error.code == .corrupt
                guard mayGoOn, bytes.count == count, count < most else {
                    if mayGoOn, count < file.size, count == limit {
                        return .failed(ImagingError(.tooLarge, "the header of \(file.path) goes on past \(limit) bytes"))
                    }
                    return .failed(error)
                }
                count = min(most, count * 4)
            }
        }
    }

    static let infoPrefixBytes = 64 << 10

    /// A URL source: downloaded by the `URLFetcher` (address policy, redirects, limits),
    /// its progress posted as it comes, its version (final URL and validator) reported once the
    /// response's head is in. For info, the download stops as soon as the header can be read.
    private static func download(
        _ url: String, principal: String, _ job: JobStart<Message>, pipeline: ImagePipeline, sources: SourceAccess,
        mailbox: Mailbox<WorkerMail>, figures: inout JobFigures
    ) -> JobOutcome {
        guard let fetcher = sources.urls else {
            return .sourceFailed(.refused("URL sources are not enabled on this worker"))
        }
        let token = job.token
        let expected = Lock<Int?>(nil)
        let events: @Sendable (FetchEvent) -> Void = { event in
            switch event {
            case .started(let head):
                expected.withLock { $0 = head.expectedBytes }
                if let length = head.expectedBytes { mailbox.post(.sourceExpected(token, bytes: length)) }
                mailbox.post(.sourceOpened(token, identity: Self.identity(of: head)))
                mailbox.post(.download(token, DownloadProgress(phase: .started, bytes: 0, expectedBytes: head.expectedBytes)))
            case .progress(let bytes, let expectedBytes):
                mailbox.post(.download(token, DownloadProgress(phase: .progress, bytes: bytes, expectedBytes: expectedBytes)))
            case .finished(let bytes):
                mailbox.post(.download(token, DownloadProgress(phase: .finished, bytes: bytes,
                                                               expectedBytes: expected.withLock { $0 })))
            }
        }
        let failOn = job.options.failOn
        // Info: try the header each time the prefix has grown fourfold since the last try.
        let nextTry = Lock(Self.infoPrefixBytes)
        let enough: (@Sendable ([UInt8]) -> Bool)?
        if job.infoOnly {
            enough = { (bytes: [UInt8]) -> Bool in
                guard bytes.count >= nextTry.withLock({ $0 }) else { return false }
                nextTry.withLock { $0 = bytes.count * 4 }
                return bytes.withUnsafeBytes { (input: UnsafeRawBufferPointer) -> Bool in
                    do throws(ImagingError) {
                        _ = try pipeline.info(of: input, failOn: failOn)
                        return true
                    } catch {
                        return false
                    }
                }
            }
        } else {
            enough = nil
        }
        // The whole input limit is reserved before connecting; the Content-Length, once known,
        // gives back the rest. A job told to yield its bytes downloads again later.
        var admissions = 0
        var yields = 0
        while true {
            guard admitSource(sources.maxInputBytes, job, round: admissions + 1, mailbox: mailbox) else {
                return .failed(ImagingError(.cancelled, "cancelled before its source was admitted"))
            }
            admissions += 1
            let body: FetchedBody
            do throws(FetchError) {
                body = try fetcher.fetch(url, for: principal, cancellation: job.control.download, events: events,
                                         enough: enough)
            } catch {
                return .sourceFailed(error: error)
            }
            figures.bytesIn = body.bytes.count
            if job.infoOnly {
                return body.bytes.withUnsafeBytes { input in
                    do throws(ImagingError) {
                        var info = try pipeline.info(of: input, failOn: failOn)
                        info.byteSize = body.complete ? body.bytes.count : (body.head.expectedBytes ?? body.bytes.count)
                        return try answerInfo(job, info, mailbox: mailbox, round: admissions + 1)
                    } catch {
                        return .failed(error)
                    }
                }
            }
            // A response with a validator names its version; only then may the result be cached.
            mailbox.post(.sourceRead(token, verified: body.complete && body.head.validator != nil))
            let outcome = body.bytes.withUnsafeBytes { input in
                run(job, input: input, pipeline: pipeline, mailbox: mailbox, figures: &figures,
                    round: admissions + 1, yieldsSeen: yields)
            }
            if let outcome { return outcome }
            yields += 1
        }
    }

    /// The broker's name for the response's version: the SHA-256 of its final URL and
    /// validator (a URL may be longer than the identity's limit); empty (no name, so no
    /// caching or sharing) without a validator.
    private static func identity(of head: FetchedHead) -> Data {
        guard let validator = head.validator,
              let digest = Digest.sha256(Data("\(head.finalURL)\u{0}\(validator)".utf8)) else { return Data() }
        return Data("url\u{0}".utf8) + digest
    }
}

extension JobOutcome {
    /// A failed download, as the job's end: the address or URL refused, or the source not
    /// to be had; over the byte limit is TOO_LARGE.
    static func sourceFailed(error: FetchError) -> JobOutcome {
        switch error {
        case .badURL, .refused: .sourceFailed(.refused(error.message))
        case .unavailable, .timedOut: .sourceFailed(.unavailable(error.message))
        case .tooLarge: .failed(ImagingError(.tooLarge, error.message))
        case .cancelled: .sourceFailed(.cancelled(error.message))
        }
    }
}

/// A blocking FIFO of tickets: `pop` waits for one, or returns `nil` once closed.
private final class TicketQueue: Sendable {
    private struct State {
        var tickets: [JobTicket] = []
        var closed = false
    }

    private let consumers: Int
    private let state = Lock(State())
    // One signal per queued ticket, plus one per consumer on close: so after each wait
    // the queue is either closed or holds a ticket.
    private let available = DispatchSemaphore(value: 0)

    init(consumers: Int) {
        self.consumers = consumers
    }

    func push(_ ticket: JobTicket) {
        let queued = state.withLock { state in
            guard !state.closed else { return false }
            state.tickets.append(ticket)
            return true
        }
        if queued { available.signal() }
    }

    func pop() -> JobTicket? {
        available.wait()
        return state.withLock { state in
            state.closed ? nil : state.tickets.removeFirst()
        }
    }

    func close() {
        state.withLock { state in
            state.closed = true
            state.tickets.removeAll()
        }
        for _ in 0..<consumers { available.signal() }
    }
}
