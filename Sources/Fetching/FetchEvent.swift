/// The head of the response a body comes from (after any redirects).
public struct FetchedHead: Sendable, Equatable {
    public var finalURL: SourceURL
    /// What identifies this version of the source: `etag:<ETag>` when the server sent a
    /// strong ETag, else `last-modified:<Last-Modified>`, else nil.
    public var validator: String?
    /// The Content-Length, when the server declared one.
    public var expectedBytes: Int?

    public init(finalURL: SourceURL, validator: String?, expectedBytes: Int?) {
        self.finalURL = finalURL
        self.validator = validator
        self.expectedBytes = expectedBytes
    }
}

/// What a download reports while it runs, in this order: `started` once, `progress` at most
/// four times a second, `finished` once when the whole body has arrived. A fetch that fails,
/// is cancelled or is stopped by `enough` ends without `finished`.
public enum FetchEvent: Sendable, Equatable {
    case started(FetchedHead)
    case progress(bytes: Int, expectedBytes: Int?)
    case finished(bytes: Int)
}

/// A downloaded body.
public struct FetchedBody: Sendable {
    public var head: FetchedHead
    public var bytes: [UInt8]
    /// False when `enough` stopped the download: `bytes` is then a prefix of the body.
    public var complete: Bool

    public init(head: FetchedHead, bytes: [UInt8], complete: Bool) {
        self.head = head
        self.bytes = bytes
        self.complete = complete
    }
}
