import Foundation
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
    /// Tell a file or URL job waiting to grow its reservation to drop its source bytes and
    /// ask for them again (see `MemoryAdmission`).
    case yieldSource(JobControl)
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
    /// Only the header's facts are asked for (DELIVERY_INFO); `options` then only says fail_on.
    var infoOnly = false
    /// A placeholder result is sent before the others (Job.placeholder).
    var placeholder = false
    /// Where the image comes from: `image` itself (checked against the digest its source
    /// named, if any, before anything else is done with it), or a file or URL the job's
    /// thread reads (`image` is then empty).
    var source: JobSource = .inline(digest: nil)
    let control: JobControl
    /// Several outputs from one decode (Job.variants), each with its index; `options` is then
    /// the first's (for fail_on and the source's checks).
    var variants: [(index: UInt32, options: ResizeOptions)] = []
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
    /// A file or URL job drops the source bytes it holds, so that an older one can grow.
    case yieldingSource(JobKey, bytes: Int)
    /// A job's thread returned: how the job ended for the broker, and what it cost.
    case jobEnded(JobEnd)
}

/// A job's end, as the worker reports it (logs and metrics).
struct JobEnd: Equatable {
    enum Outcome: Equatable {
        /// Its terminal result was sent.
        case finished
        case failed(Enlarger_V1_ErrorCode)
        /// Cancelled by the broker, answered with JobCancelled.
        case cancelled
        /// Its connection was replaced: nothing was sent about its end.
        case abandoned

        var name: String {
            switch self {
            case .finished: "finished"
            case .failed: "failed"
            case .cancelled: "cancelled"
            case .abandoned: "abandoned"
            }
        }

        /// `OK` for a result delivered, the contract's name for a failure; `CANCELLED` and
        /// `ABANDONED` otherwise, so that a job that gave nothing is never counted as `OK`.
        var code: String {
            switch self {
            case .finished: "OK"
            case .failed(let code): code.contractName
            case .cancelled: "CANCELLED"
            case .abandoned: "ABANDONED"
            }
        }
    }

    var key: JobKey
    var requestID: String
    var outcome: Outcome
    var figures: JobFigures
}

/// What a job's run cost, measured on its thread.
struct JobFigures: Equatable, Sendable {
    /// Summed over the job's results (a degraded result and the final one).
    var decode: Duration = .zero
    var resize: Duration = .zero
    var encode: Duration = .zero
    /// From the thread taking the job to its return, memory wait included.
    var run: Duration = .zero
    var bytesIn = 0
    var bytesOut = 0

    mutating func add(_ timings: StageTimings, bytesOut: Int) {
        decode += .milliseconds(timings.decodeMilliseconds)
        resize += .milliseconds(timings.resizeMilliseconds)
        encode += .milliseconds(timings.encodeMilliseconds)
        self.bytesOut += bytesOut
    }
}

/// How a job thread's run of the pipeline ended.
enum JobOutcome: Sendable {
    /// The pipeline returned after emitting its terminal result.
    case completed
    case failed(ImagingError)
    /// The image is not the one its digest names (`DIGEST_MISMATCH`).
    case digestMismatch(String)
    /// Its file or URL could not be read (`SOURCE_REFUSED`, `SOURCE_UNAVAILABLE`).
    case sourceFailed(SourceFailure)
}

/// A URL source's download progress, as a job thread reports it.
struct DownloadProgress: Sendable, Equatable {
    var phase: Enlarger_V1_DownloadPhase
    var bytes: Int
    var expectedBytes: Int?
}

/// One result of a job, its image already in the frame type the loop sends.
struct StageOutput<Payload> {
    var stage: ImageModel.Stage
    var isTerminal: Bool
    var width: Int
    var height: Int
    var format: OutputFormat
    var image: Payload
    /// See `StageResult.notes`.
    var notes: [String] = []
    /// For an info-only job: the header's facts (the image is then empty), sent as STAGE_INFO.
    var info: ImageInfo?
    /// A placeholder (the image is then empty), sent as STAGE_PLACEHOLDER, never terminal.
    var placeholder: Placeholder?
    /// For a job with variants: the index of the variant this final is (JobResult.variant).
    var variant: UInt32 = 0
}
