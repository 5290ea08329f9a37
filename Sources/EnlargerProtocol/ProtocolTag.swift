/// The first frame of every message, naming the protocol and its version. The two sides of
/// the broker speak different protocols, so a message sent to the wrong endpoint is caught
/// by its tag before anything else is read.
public enum ProtocolTag: Sendable, CaseIterable {
    /// Between a client and the broker: `"ENL-C1"`.
    case client
    /// Between a worker and the broker: `"ENL-W1"`.
    case worker

    private static let clientBytes = Array("ENL-C1".utf8)
    private static let workerBytes = Array("ENL-W1".utf8)

    public var bytes: [UInt8] {
        switch self {
        case .client: Self.clientBytes
        case .worker: Self.workerBytes
        }
    }

    public var text: String { String(decoding: bytes, as: UTF8.self) }
}

/// Limits that are part of the wire contract (documented in the .proto files).
public enum WireLimits {
    /// Request ids are 1 to 64 bytes of UTF-8.
    public static let maxRequestIDBytes = 64
    /// The protobuf header frame.
    public static let maxHeaderBytes = 65_536
    /// `ResizeSpec.width` and `height`.
    public static let maxDimension: UInt32 = 16_384
    /// `Ready.capacity`.
    public static let maxCapacity: UInt32 = 1024
    /// `Ready.worker_name`.
    public static let maxWorkerNameBytes = 256
    /// `Sync.request_ids`: ids per Sync (a client with more sends several).
    public static let maxSyncRequestIDs = 512
    /// Items in one batch (BatchItem.size).
    public static let maxBatchSize: UInt32 = 1024
    /// `FileSource.path`, in bytes of UTF-8.
    public static let maxSourcePathBytes = 1024
    /// `URLSource.url`, in bytes.
    public static let maxSourceURLBytes = 2048
    /// `JobSourceOpened.identity`.
    public static let maxSourceIdentityBytes = 4096
    /// `ResizeSpec.quality` when it is 0.
    public static let defaultQuality: UInt32 = 80
}
