extension Enlarger_V1_ErrorCode {
    /// The code's name in the contract without its `ERROR_CODE_` prefix (`DEADLINE_EXCEEDED`),
    /// as logs and metric labels show it; `UNKNOWN_<n>` for a number the contract lacks.
    public var contractName: String {
        switch self {
        case .unspecified: "UNSPECIFIED"
        case .duplicateID: "DUPLICATE_ID"
        case .workerLost: "WORKER_LOST"
        case .overloaded: "OVERLOADED"
        case .malformed: "MALFORMED"
        case .invalidArgument: "INVALID_ARGUMENT"
        case .unknownFormat: "UNKNOWN_FORMAT"
        case .empty: "EMPTY"
        case .truncated: "TRUNCATED"
        case .corrupt: "CORRUPT"
        case .unsupported: "UNSUPPORTED"
        case .tooLarge: "TOO_LARGE"
        case .tooManyScans: "TOO_MANY_SCANS"
        case .encodeFailed: "ENCODE_FAILED"
        case .internal: "INTERNAL"
        case .brokerShutdown: "BROKER_SHUTDOWN"
        case .deadlineExceeded: "DEADLINE_EXCEEDED"
        case .clientSilent: "CLIENT_SILENT"
        case .requestLost: "REQUEST_LOST"
        case .unauthorized: "UNAUTHORIZED"
        case .digestMismatch: "DIGEST_MISMATCH"
        case .batchEnded: "BATCH_ENDED"
        case .sourceRefused: "SOURCE_REFUSED"
        case .sourceUnavailable: "SOURCE_UNAVAILABLE"
        case .clientNotReading: "CLIENT_NOT_READING"
        case .UNRECOGNIZED(let number): "UNKNOWN_\(number)"
        }
    }
}
