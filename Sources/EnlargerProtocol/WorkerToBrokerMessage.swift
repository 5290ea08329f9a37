/// A message from a worker to the broker (`ENL-W1`), decoded and validated.
///
/// `Payload` is the frame type: a JobResult's image frame is handed over as is.
public enum WorkerToBrokerMessage<Payload> {
    case ready(Enlarger_V1_Ready)
    case heartbeat
    case jobStarted(Enlarger_V1_JobStarted)
    /// Carries the encoded output image.
    case jobResult(Enlarger_V1_JobResult, image: Payload)
    case jobFailed(Enlarger_V1_JobFailed)
    case jobCancelled(Enlarger_V1_JobCancelled)
    case disconnect
    /// A file or URL source's version, before its image is read.
    case jobSourceOpened(Enlarger_V1_JobSourceOpened)
    /// Progress of a URL source's download.
    case jobDownload(Enlarger_V1_JobDownload)
    /// Threads busy beyond the live jobs: cancelled attempts still stopping, abandoned jobs.
    case occupancy(Enlarger_V1_Occupancy)

    public func encoded() -> OutgoingMessage<Payload> {
        var header = Enlarger_V1_WorkerToBroker()
        var payload: Payload?
        switch self {
        case .ready(let message): header.ready = message
        case .heartbeat: header.heartbeat = .init()
        case .jobStarted(let message): header.jobStarted = message
        case .jobResult(let message, let image):
            header.jobResult = message
            payload = image
        case .jobFailed(let message): header.jobFailed = message
        case .jobCancelled(let message): header.jobCancelled = message
        case .disconnect: header.disconnect = .init()
        case .jobSourceOpened(let message): header.sourceOpened = message
        case .jobDownload(let message): header.download = message
        case .occupancy(let message): header.occupancy = message
        }
        return OutgoingMessage(tag: .worker, header: header, payload: payload)
    }
}

extension WorkerToBrokerMessage where Payload: FrameBytes {
    /// Decodes `[tag][header][payload?]` (without the routing id). Checks the framing only;
    /// whether the job and attempt make sense is the broker's business.
    public init(frames: some RandomAccessCollection<Payload>) throws(FrameError) {
        let header = try FrameDecoding.header(Enlarger_V1_WorkerToBroker.self, tag: .worker, frames: frames)
        do {
            self = try Self.decode(header, frames)
        } catch {
            // Name the job, so the broker can end it instead of waiting for a proper frame.
            throw FrameError(error.reason, error.message, requestID: error.requestID, job: header.jobReference)
        }
    }

    private static func decode(
        _ header: Enlarger_V1_WorkerToBroker, _ frames: some RandomAccessCollection<Payload>
    ) throws(FrameError) -> Self {
        let message: Self
        switch header.kind {
        case .jobResult(let result)?:
            message = .jobResult(result, image: try FrameDecoding.payload(of: "JobResult", in: frames))
        case .ready(let ready)?: message = try .checked(.ready(ready), frames)
        case .heartbeat?: message = try .checked(.heartbeat, frames)
        case .jobStarted(let started)?: message = try .checked(.jobStarted(started), frames)
        case .jobFailed(let failed)?: message = try .checked(.jobFailed(failed), frames)
        case .jobCancelled(let cancelled)?: message = try .checked(.jobCancelled(cancelled), frames)
        case .disconnect?: message = try .checked(.disconnect, frames)
        case .sourceOpened(let opened)?: message = try .checked(.jobSourceOpened(opened), frames)
        case .download(let download)?: message = try .checked(.jobDownload(download), frames)
        case .occupancy(let occupancy)?: message = try .checked(.occupancy(occupancy), frames)
        case nil: throw FrameDecoding.unknownKind(header)
        }
        return message
    }

    /// `message` once it is known that no payload frame came with it.
    private static func checked(
        _ message: Self, _ frames: some RandomAccessCollection<Payload>
    ) throws(FrameError) -> Self {
        try FrameDecoding.checkNoPayload(of: message.kindName, in: frames)
        return message
    }
}

extension Enlarger_V1_WorkerToBroker {
    /// The job a job frame names, whatever else is wrong with its message.
    var jobReference: FrameError.JobReference? {
        switch kind {
        case .jobStarted(let frame)?: FrameError.JobReference(jobID: frame.jobID, attempt: frame.attempt)
        case .jobResult(let frame)?: FrameError.JobReference(jobID: frame.jobID, attempt: frame.attempt)
        case .jobFailed(let frame)?: FrameError.JobReference(jobID: frame.jobID, attempt: frame.attempt)
        case .jobCancelled(let frame)?: FrameError.JobReference(jobID: frame.jobID, attempt: frame.attempt)
        case .sourceOpened(let frame)?: FrameError.JobReference(jobID: frame.jobID, attempt: frame.attempt)
        case .download(let frame)?: FrameError.JobReference(jobID: frame.jobID, attempt: frame.attempt)
        case .ready?, .heartbeat?, .disconnect?, .occupancy?, nil: nil
        }
    }
}

extension WorkerToBrokerMessage {
    var kindName: String {
        switch self {
        case .ready: "Ready"
        case .heartbeat: "Heartbeat"
        case .jobStarted: "JobStarted"
        case .jobResult: "JobResult"
        case .jobFailed: "JobFailed"
        case .jobCancelled: "JobCancelled"
        case .disconnect: "Disconnect"
        case .jobSourceOpened: "JobSourceOpened"
        case .jobDownload: "JobDownload"
        case .occupancy: "Occupancy"
        }
    }
}

extension WorkerToBrokerMessage: Equatable where Payload: Equatable {}
extension WorkerToBrokerMessage: Sendable where Payload: Sendable {}
