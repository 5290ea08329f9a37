/// A message from the broker to a client (`ENL-C1`), decoded and validated.
///
/// Finality is explicit: `.result` is terminal exactly when its `terminal` field is true;
/// `.failed` (except code DUPLICATE_ID), `.cancelled` and `.rejected` are always terminal.
public enum BrokerToClientMessage<Payload> {
    case accepted(Enlarger_V1_Accepted)
    case started(Enlarger_V1_Started)
    /// Carries the encoded output image.
    case result(Enlarger_V1_Result, image: Payload)
    case failed(Enlarger_V1_Failed)
    case cancelled(Enlarger_V1_Cancelled)
    case rejected(Enlarger_V1_Rejected)
    case cancelAck(Enlarger_V1_CancelAck)
    case statusReply(Enlarger_V1_StatusReply)
    case pong(Enlarger_V1_Pong)
    case error(Enlarger_V1_Error)
    case syncReply(Enlarger_V1_SyncReply)
    /// A batch's one terminal event; about no single request.
    case batchEnded(Enlarger_V1_BatchEnded)
    /// Progress of a URL source's download; not terminal.
    case download(Enlarger_V1_Download)

    /// The request the message is about; `nil` for status, pong and error.
    public var requestID: String? {
        switch self {
        case .accepted(let message): message.requestID
        case .started(let message): message.requestID
        case .result(let message, _): message.requestID
        case .failed(let message): message.requestID
        case .cancelled(let message): message.requestID
        case .rejected(let message): message.requestID
        case .cancelAck(let message): message.requestID
        case .download(let message): message.requestID
        case .statusReply, .pong, .error, .syncReply, .batchEnded: nil
        }
    }

    @inlinable
    public func encoded() -> OutgoingMessage<Payload> {
        var header = Enlarger_V1_BrokerToClient()
        var payload: Payload?
        switch self {
        case .accepted(let message): header.accepted = message
        case .started(let message): header.started = message
        case .result(let message, let image):
            header.result = message
            payload = image
        case .failed(let message): header.failed = message
        case .cancelled(let message): header.cancelled = message
        case .rejected(let message): header.rejected = message
        case .cancelAck(let message): header.cancelAck = message
        case .statusReply(let message): header.statusReply = message
        case .pong(let message): header.pong = message
        case .error(let message): header.error = message
        case .syncReply(let message): header.syncReply = message
        case .batchEnded(let message): header.batchEnded = message
        case .download(let message): header.download = message
        }
        return OutgoingMessage(tag: .client, header: header, payload: payload)
    }
}

extension BrokerToClientMessage where Payload: FrameBytes {
    /// Decodes `[tag][header][payload?]` as received by a client's DEALER.
    public init(frames: some RandomAccessCollection<Payload>) throws(FrameError) {
        let header = try FrameDecoding.header(Enlarger_V1_BrokerToClient.self, tag: .client, frames: frames)
        switch header.kind {
        case .result(let result)?:
            try FrameDecoding.checkRequestID(result.requestID)
            let image = try FrameDecoding.payload(of: "Result", in: frames, requestID: result.requestID)
            self = .result(result, image: image)
        case .accepted(let accepted)?: self = try .checked(.accepted(accepted), frames)
        case .started(let started)?: self = try .checked(.started(started), frames)
        case .failed(let failed)?: self = try .checked(.failed(failed), frames)
        case .cancelled(let cancelled)?: self = try .checked(.cancelled(cancelled), frames)
        case .rejected(let rejected)?: self = try .checked(.rejected(rejected), frames)
        case .cancelAck(let ack)?: self = try .checked(.cancelAck(ack), frames)
        case .statusReply(let reply)?: self = try .checked(.statusReply(reply), frames)
        case .pong(let pong)?: self = try .checked(.pong(pong), frames)
        case .error(let error)?: self = try .checked(.error(error), frames)
        case .syncReply(let reply)?: self = try .checked(.syncReply(reply), frames)
        case .download(let download)?: self = try .checked(.download(download), frames)
        case .batchEnded(let ended)?:
            try FrameDecoding.checkRequestID(ended.batchID)
            self = try .checked(.batchEnded(ended), frames)
        case nil: throw FrameDecoding.unknownKind(header)
        }
    }

    /// `message` once its request id (if any) is valid and no payload frame came with it.
    private static func checked(
        _ message: Self, _ frames: some RandomAccessCollection<Payload>
    ) throws(FrameError) -> Self {
        if let requestID = message.requestID { try FrameDecoding.checkRequestID(requestID) }
        try FrameDecoding.checkNoPayload(of: message.kindName, in: frames, requestID: message.requestID)
        return message
    }
}

extension BrokerToClientMessage {
    public var kindName: String {
        switch self {
        case .accepted: "Accepted"
        case .started: "Started"
        case .result: "Result"
        case .failed: "Failed"
        case .cancelled: "Cancelled"
        case .rejected: "Rejected"
        case .cancelAck: "CancelAck"
        case .statusReply: "StatusReply"
        case .pong: "Pong"
        case .error: "Error"
        case .syncReply: "SyncReply"
        case .batchEnded: "BatchEnded"
        case .download: "Download"
        }
    }
}

extension BrokerToClientMessage: Equatable where Payload: Equatable {}
extension BrokerToClientMessage: Sendable where Payload: Sendable {}
