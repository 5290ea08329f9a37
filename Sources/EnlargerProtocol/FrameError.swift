/// Why a multipart message could not be decoded. The broker answers it with
/// `Error{MALFORMED}` (or `Rejected{MALFORMED}` when `requestID` says which Submit it was).
public struct FrameError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Reason: String, Sendable {
        /// Fewer than two frames: no tag or no header.
        case missingHeader
        /// The first frame is not this protocol's tag.
        case wrongTag
        /// The header frame is larger than `WireLimits.maxHeaderBytes`.
        case oversizeHeader
        /// The header frame is not a valid protobuf encoding of the envelope.
        case undecodableHeader
        /// The envelope's `kind` is unset or a kind this version does not know.
        case unknownKind
        /// A request id that is empty, longer than 64 bytes or not UTF-8.
        case invalidRequestID
        /// The kind carries a payload frame and there is none.
        case missingPayload
        /// More frames than the kind carries.
        case extraFrames
    }

    public let reason: Reason
    /// Human-readable detail, suitable for the `message` of an Error reply.
    public let message: String
    /// The request id the header named, when the header decoded and the id was valid.
    public let requestID: String?
    /// The job a worker's frame named, when its header decoded as a job frame: the broker
    /// ends that job's request rather than let it wait for a frame that will never come.
    public let job: JobReference?

    public struct JobReference: Equatable, Sendable {
        public let jobID: UInt64
        public let attempt: UInt32
    }

    public init(_ reason: Reason, _ message: String, requestID: String? = nil, job: JobReference? = nil) {
        self.reason = reason
        self.message = message
        self.requestID = requestID
        self.job = job
    }

    public var description: String { "\(reason.rawValue): \(message)" }
}
