import Dispatch
import Foundation
import Imaging
import Locking
import ZeroMQ

/// A job as handed from the I/O thread to a job thread.
struct JobTicket: @unchecked Sendable {
    // @unchecked: `payload` is the received frame, handed over by the I/O thread, which never
    // touches it again; the pipeline reads the JPEG straight from it (no copy).
    let token: JobTable.Token
    let payload: Message
    let options: ResizeOptions
    let delivery: Imaging.Delivery
    let cancel: CancellationFlag
}

/// One result of a job, with its image already in the frame the I/O thread will send.
struct StageFrame: @unchecked Sendable {
    // @unchecked: the job thread creates `image` and hands it over; only the I/O thread
    // uses it afterwards.
    let stage: Imaging.Stage
    let isTerminal: Bool
    let width: Int
    let height: Int
    let format: OutputFormat
    let image: Message

    init(_ result: StageResult) {
        stage = result.stage
        isTerminal = result.isTerminal
        width = result.image.width
        height = result.image.height
        format = result.image.format
        image = Message(result.image.bytes)
    }
}

/// What the I/O thread's mailbox carries: job threads' results and endings, and `stop`.
enum WorkerMail: Sendable {
    case result(JobTable.Token, StageFrame)
    case ended(JobTable.Token, JobTable.Outcome)
    case stop
}

/// A fixed set of threads that run the image pipeline, one job at a time each.
///
/// Job threads never call ZeroMQ: every result and every ending is posted to the I/O
/// thread's mailbox, in order, and the I/O thread decides what is sent.
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
                    Self.execute(ticket, pipeline: pipeline, mailbox: mailbox)
                }
            }
            thread.name = "enlarger-job-\(index)"
            thread.start()
        }
    }

    /// Queues a job for the next free thread.
    func submit(_ ticket: JobTicket) {
        queue.push(ticket)
    }

    /// Discards queued jobs, lets running ones return (their flags must be set first) and
    /// waits until every thread has exited.
    func closeAndJoin() {
        queue.close()
        exited.wait()
    }

    private static func execute(_ ticket: JobTicket, pipeline: ImagePipeline, mailbox: Mailbox<WorkerMail>) {
        let outcome = ticket.payload.withUnsafeBytes { input -> JobTable.Outcome in
            do throws(ImagingError) {
                try pipeline.run(input, options: ticket.options, delivery: ticket.delivery, cancel: ticket.cancel) {
                    mailbox.post(.result(ticket.token, StageFrame($0)))
                }
                return .completed
            } catch {
                return .failed(error)
            }
        }
        mailbox.post(.ended(ticket.token, outcome))
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
