import EnlargerProtocol
import ImageModel
import Imaging

/// What the worker core asks its I/O loop to do after an event, in order.
enum WorkerAction<Payload> {
    /// Close the current connection, if any, discarding whatever it has not sent, and open a
    /// new one to the broker. The core sends `Ready` next.
    case connect
    /// Close the current connection, discarding whatever it has not sent, and open none.
    case closeConnection
    /// Send to the broker on the current connection; never lose a terminal frame, `Ready`
    /// or `Disconnect` while that connection lives.
    case send(WorkerToBrokerMessage<Payload>)
    /// Hand a job to the job threads. The thread prepares it, reports its memory estimate
    /// and waits for `admit` (or `cancel`) before allocating pixel memory.
    case startJob(JobStart<Payload>)
    /// Let a job that waited for memory run.
    case admit(JobControl)
    /// Set a job's cancellation flag; a job still waiting for memory stops waiting.
    case cancel(JobControl)
    /// Something an operator may want in the log. Nothing to do.
    case report(WorkerReport)
}

/// A job as the core hands it to the job threads.
struct JobStart<Payload> {
    let token: JobToken
    let key: JobKey
    let image: Payload
    let options: ResizeOptions
    let delivery: ImageModel.Delivery
    let control: JobControl
}

/// A job's identity on the wire: the broker's job id and the attempt.
struct JobKey: Hashable, Sendable, CustomStringConvertible {
    var jobID: UInt64
    var attempt: UInt32

    var description: String { "job \(jobID) attempt \(attempt)" }
}

/// The worker's own name for a job, never reused: a job abandoned on a lost connection is
/// never confused with a job of the same ids from a restarted broker.
typealias JobToken = UInt64

/// Notable things the core decided, for the I/O loop to log. The core never logs itself.
enum WorkerReport: Equatable {
    case registering(capacity: Int, memoryBudget: Int)
    case brokerSilent(Duration, abandoned: Int)
    case brokerDisconnected(abandoned: Int)
    case brokerError(Enlarger_V1_ErrorCode, String)
    case malformed(String)
    case duplicateJob(JobKey)
    case cancelling(JobKey)
    /// The job's estimate exceeds the whole budget: it failed with TOO_LARGE.
    case tooLargeForBudget(JobKey, bytes: Int)
    /// The job waits for memory held by others.
    case waitingForMemory(JobKey, bytes: Int, inUse: Int)
}

/// How a job thread's run of the pipeline ended.
enum JobOutcome: Sendable {
    /// The pipeline returned after emitting its terminal result.
    case completed
    case failed(ImagingError)
}

/// One result of a job, its image already in the frame type the loop sends.
struct StageOutput<Payload> {
    var stage: ImageModel.Stage
    var isTerminal: Bool
    var width: Int
    var height: Int
    var format: OutputFormat
    var image: Payload
}
