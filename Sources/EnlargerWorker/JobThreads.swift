import Crypto
import Dispatch
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
    init(_ result: StageResult) throws(ImagingError) {
        let frame: Message
        do {
            frame = try result.image.withUnsafeBytes { bytes throws(ZMQError) in try Message.copy(of: bytes) }
        } catch {
            throw ImagingError(.tooLarge, "no memory for the \(result.image.byteCount)-byte encoded image: \(error)")
        }
        output = StageOutput(stage: result.stage, isTerminal: result.isTerminal, width: result.image.width,
                             height: result.image.height, format: result.image.format, image: frame,
                             notes: result.notes)
    }

    /// An info-only job's one result: the facts, and an empty image frame.
    init(info: ImageInfo) {
        output = StageOutput(stage: .final, isTerminal: true, width: 0, height: 0, format: .jpeg, image: Message(),
                             info: info)
    }
}

/// What the I/O thread's mailbox carries: what job threads learn and produce, and `stop`.
enum WorkerMail: Sendable {
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

    init(count: Int, pipeline: ImagePipeline, mailbox: Mailbox<WorkerMail>) {
        queue = TicketQueue(consumers: count)
        for index in 0..<count {
            exited.enter()
            let thread = Thread { [queue, exited] in
                defer { exited.leave() }
                while let ticket = queue.pop() {
                    Self.execute(ticket.start, pipeline: pipeline, mailbox: mailbox)
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

    private static func execute(_ job: JobStart<Message>, pipeline: ImagePipeline, mailbox: Mailbox<WorkerMail>) {
        let clock = ContinuousClock()
        let start = clock.now
        var figures = JobFigures()
        figures.bytesIn = job.image.count
        let outcome = job.image.withUnsafeBytes { input -> JobOutcome in
            if let digest = job.digest, !Data(SHA256.hash(data: input)).elementsEqual(digest) {
                return .digestMismatch("the image's SHA-256 is not the digest its request named")
            }
            do throws(ImagingError) {
                if job.infoOnly {
                    // The header only: no pixel memory, so nothing to reserve, but admission
                    // still orders it with the other jobs and lets a cancel stop it.
                    let info = try pipeline.info(of: input, failOn: job.options.failOn)
                    mailbox.post(.estimated(job.token, MemoryEstimate(bytes: 0, coefficientBytes: 0, decodedBytes: 0)))
                    guard job.control.waitForAdmission() else {
                        throw ImagingError(.cancelled, "cancelled before it was admitted")
                    }
                    mailbox.post(.result(job.token, StageFrame(info: info)))
                    return .completed
                }
                let prepared = try pipeline.prepare(input, options: job.options, delivery: job.delivery,
                                                    cancel: job.control.flag)
                mailbox.post(.estimated(job.token, prepared.memoryEstimate))
                guard job.control.waitForAdmission() else {
                    throw ImagingError(.cancelled, "cancelled before it was admitted")
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
        figures.run = clock.now - start
        mailbox.post(.ended(job.token, outcome, figures))
        // Large buffers are freed off this thread; the job's memory counts until they are.
        let token = job.token
        BufferReaper.afterPendingFrees { mailbox.post(.memoryFreed(token)) }
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
