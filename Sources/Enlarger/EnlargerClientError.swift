import EnlargerProtocol
import ZeroMQ

/// Why a request, a cancel or a status call did not succeed.
public enum EnlargerClientError: Error, Equatable, Sendable {
    /// The broker ended the request with `Failed` (a bad image, a lost worker, …). Terminal.
    case failed(Code, String)
    /// The broker refused the Submit before accepting it (overloaded, invalid argument, too
    /// large, shutting down), or this client refused it for an invalid `ResizeOptions`.
    case rejected(Code, String)
    /// Another live request holds this request id: one submitted through this client (refused
    /// without asking the broker) or through another connection (the broker's `Failed{DUPLICATE_ID}`).
    case duplicateID(String)
    /// The request was cancelled through another connection. (A cancel through this client
    /// ends the request's events silently instead; see `RequestEvents`.)
    case cancelled
    /// The request id is not 1 to 64 bytes of UTF-8.
    case invalidRequestID(String)
    /// The message could not be handed to the broker within `missedHeartbeats` heartbeat
    /// intervals: no broker is listening at the endpoint.
    case brokerUnreachable
    /// The broker fell silent for `missedHeartbeats` heartbeat intervals while the request
    /// was live, or restarted and the request could not be submitted again.
    case brokerLost
    /// The client was closed before the request ended.
    case closed
    /// The client's socket failed; the client is closed. From `init`: libzmq cannot use the
    /// endpoint at all.
    case transport(ZMQError)
    /// From `init`: a `tcp://` endpoint without CURVE keys, refused (fail closed) unless the
    /// configuration allows insecure tcp. The message says what to give.
    case insecureEndpoint(String)
    /// A batch (`EnlargerClient.resize(batch:)`) failed: `reason` is how its item at `index`
    /// (request id `id`) failed, the first to fail; the other items were cancelled.
    indirect case batchFailed(index: Int, id: String, reason: EnlargerClientError)

    /// The broker's machine-readable reason, as in common.proto's `ErrorCode`.
    ///
    /// `deadlineExceeded` also comes from this client when it heard nothing final from the
    /// broker within the request's timeout; `requestLost` only from this client, when a Sync
    /// showed that the broker no longer holds a request it still waited for, or that the
    /// answer to a cancel was lost.
    public enum Code: String, Sendable, Equatable {
        case duplicateID, workerLost, overloaded, malformed, invalidArgument, unknownFormat, empty, truncated,
             corrupt, unsupported, tooLarge, tooManyScans, encodeFailed, `internal`, brokerShutdown,
             deadlineExceeded, clientSilent, requestLost, unauthorized, digestMismatch, batchEnded, sourceRefused,
             sourceUnavailable, clientNotReading
        /// A code this version of the library does not know.
        case unknown

        /// `unknownFormat`'s first name, from when JPEG was the only format read.
        @available(*, deprecated, renamed: "unknownFormat")
        public static var notJPEG: Code { .unknownFormat }
    }
}

extension EnlargerClientError.Code {
    /// The code's name in the contract (common.proto's `ErrorCode` without its prefix:
    /// `DEADLINE_EXCEEDED`, `UNKNOWN_FORMAT`), as logs, metrics and the Python client show it.
    /// Each case is its contract name in lower camel case (`duplicateID`, `DUPLICATE_ID`), so
    /// the name is spelt back from the case (a test holds every wire code to it).
    public var contractName: String {
        guard self != .unknown else { return "UNSPECIFIED" }
        var name = ""
        var afterLowercase = false
        for character in rawValue {
            if character.isUppercase && afterLowercase { name += "_" }
            name += character.uppercased()
            afterLowercase = character.isLowercase
        }
        return name
    }

    init(_ code: Enlarger_V1_ErrorCode) {
        switch code {
        case .duplicateID: self = .duplicateID
        case .workerLost: self = .workerLost
        case .overloaded: self = .overloaded
        case .malformed: self = .malformed
        case .invalidArgument: self = .invalidArgument
        case .unknownFormat: self = .unknownFormat
        case .empty: self = .empty
        case .truncated: self = .truncated
        case .corrupt: self = .corrupt
        case .unsupported: self = .unsupported
        case .tooLarge: self = .tooLarge
        case .tooManyScans: self = .tooManyScans
        case .encodeFailed: self = .encodeFailed
        case .internal: self = .internal
        case .brokerShutdown: self = .brokerShutdown
        case .deadlineExceeded: self = .deadlineExceeded
        case .clientSilent: self = .clientSilent
        case .requestLost: self = .requestLost
        case .unauthorized: self = .unauthorized
        case .digestMismatch: self = .digestMismatch
        case .batchEnded: self = .batchEnded
        case .sourceRefused: self = .sourceRefused
        case .sourceUnavailable: self = .sourceUnavailable
        case .clientNotReading: self = .clientNotReading
        case .unspecified, .UNRECOGNIZED: self = .unknown
        }
    }
}
