/// A message from the broker to a worker (`ENL-W1`), decoded and validated.
public enum BrokerToWorkerMessage<Payload> {
    /// Carries the source JPEG.
    case job(Enlarger_V1_Job, image: Payload)
    case cancelJob(Enlarger_V1_CancelJob)
    case heartbeat
    case disconnect
    case error(Enlarger_V1_Error)

    @inlinable
    public func encoded() -> OutgoingMessage<Payload> {
        var header = Enlarger_V1_BrokerToWorker()
        var payload: Payload?
        switch self {
        case .job(let message, let image):
            header.job = message
            payload = image
        case .cancelJob(let message): header.cancelJob = message
        case .heartbeat: header.heartbeat = .init()
        case .disconnect: header.disconnect = .init()
        case .error(let message): header.error = message
        }
        return OutgoingMessage(tag: .worker, header: header, payload: payload)
    }
}

extension BrokerToWorkerMessage where Payload: FrameBytes {
    /// Decodes `[tag][header][payload?]` as received by a worker's DEALER.
    public init(frames: some RandomAccessCollection<Payload>) throws(FrameError) {
        let header = try FrameDecoding.header(Enlarger_V1_BrokerToWorker.self, tag: .worker, frames: frames)
        switch header.kind {
        case .job(let job)?:
            try FrameDecoding.checkRequestID(job.requestID)
            self = .job(job, image: try FrameDecoding.payload(of: "Job", in: frames, requestID: job.requestID))
        case .cancelJob(let cancel)?: self = try .checked(.cancelJob(cancel), frames)
        case .heartbeat?: self = try .checked(.heartbeat, frames)
        case .disconnect?: self = try .checked(.disconnect, frames)
        case .error(let error)?: self = try .checked(.error(error), frames)
        case nil: throw FrameDecoding.unknownKind(header)
        }
    }

    /// `message` once it is known that no payload frame came with it.
    private static func checked(
        _ message: Self, _ frames: some RandomAccessCollection<Payload>
    ) throws(FrameError) -> Self {
        try FrameDecoding.checkNoPayload(of: message.kindName, in: frames)
        return message
    }
}

extension BrokerToWorkerMessage {
    var kindName: String {
        switch self {
        case .job: "Job"
        case .cancelJob: "CancelJob"
        case .heartbeat: "Heartbeat"
        case .disconnect: "Disconnect"
        case .error: "Error"
        }
    }
}

extension BrokerToWorkerMessage: Equatable where Payload: Equatable {}
extension BrokerToWorkerMessage: Sendable where Payload: Sendable {}
