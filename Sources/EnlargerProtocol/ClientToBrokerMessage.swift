/// A message from a client to the broker (`ENL-C1`), decoded and validated.
///
/// `Payload` is the frame type: the payload frame of a Submit is handed over as is.
public enum ClientToBrokerMessage<Payload> {
    /// Carries the source JPEG.
    case submit(Enlarger_V1_Submit, image: Payload)
    case cancel(Enlarger_V1_Cancel)
    case statusRequest
    case ping
    case sync(Enlarger_V1_Sync)

    public func encoded() -> OutgoingMessage<Payload> {
        var header = Enlarger_V1_ClientToBroker()
        var payload: Payload?
        switch self {
        case .submit(let submit, let image):
            header.submit = submit
            payload = image
        case .cancel(let cancel): header.cancel = cancel
        case .statusRequest: header.statusRequest = .init()
        case .ping: header.ping = .init()
        case .sync(let sync): header.sync = sync
        }
        return OutgoingMessage(tag: .client, header: header, payload: payload)
    }
}

extension ClientToBrokerMessage where Payload: FrameBytes {
    /// Decodes `[tag][header][payload?]` (without the routing id).
    ///
    /// Checks the framing and the request id. The Submit's spec is not checked here: see
    /// `Enlarger_V1_ResizeSpec.validate()`.
    public init(frames: some RandomAccessCollection<Payload>) throws(FrameError) {
        let header = try FrameDecoding.header(Enlarger_V1_ClientToBroker.self, tag: .client, frames: frames)
        switch header.kind {
        case .submit(let submit)?:
            try FrameDecoding.checkRequestID(submit.requestID)
            let image = try FrameDecoding.payload(of: "Submit", in: frames, requestID: submit.requestID)
            self = .submit(submit, image: image)
        case .cancel(let cancel)?:
            try FrameDecoding.checkRequestID(cancel.requestID)
            try FrameDecoding.checkNoPayload(of: "Cancel", in: frames)
            self = .cancel(cancel)
        case .statusRequest?:
            try FrameDecoding.checkNoPayload(of: "StatusRequest", in: frames)
            self = .statusRequest
        case .ping?:
            try FrameDecoding.checkNoPayload(of: "Ping", in: frames)
            self = .ping
        case .sync(let sync)?:
            try FrameDecoding.checkNoPayload(of: "Sync", in: frames)
            for requestID in sync.requestIds { try FrameDecoding.checkRequestID(requestID) }
            self = .sync(sync)
        case nil:
            throw FrameDecoding.unknownKind(header)
        }
    }
}

extension ClientToBrokerMessage: Equatable where Payload: Equatable {}
extension ClientToBrokerMessage: Sendable where Payload: Sendable {}
