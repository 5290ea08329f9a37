/// Encoded output of one stage.
///
/// Output the encoder makes stays in the memory it was encoded into (no copy); an image made
/// from an array keeps that array.
public struct EncodedImage: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var format: OutputFormat
    /// What to know about how it was made (a colour profile ignored, transparency flattened);
    /// not part of equality.
    public var notes: [String] = []
    /// The broker answered from its result cache: no worker ran for this request. Not part
    /// of equality.
    public var cached = false
    /// For a request with variants: which one this is (its index in the request's list). Not
    /// part of equality.
    public var variant = 0
    private let storage: Storage

    // @unchecked: the borrowed bytes are read-only from the moment the image is made, and
    // their owner (which is Sendable) keeps them alive as long as any copy of the image.
    private enum Storage: @unchecked Sendable {
        case array([UInt8])
        case borrowed(UnsafeRawBufferPointer, owner: any AnyObject & Sendable)
    }

    public init(bytes: [UInt8], width: Int, height: Int, format: OutputFormat) {
        storage = .array(bytes)
        self.width = width
        self.height = height
        self.format = format
    }

    /// An image whose bytes stay where they are: in memory that `owner` keeps alive and that
    /// nobody writes any more (the encoder's output buffer, handed over without a copy).
    package init(bytes: UnsafeRawBufferPointer, keptAliveBy owner: any AnyObject & Sendable,
                 width: Int, height: Int, format: OutputFormat) {
        storage = .borrowed(bytes, owner: owner)
        self.width = width
        self.height = height
        self.format = format
    }

    /// The encoded bytes; a copy unless the image was made from an array. To read them in
    /// place (to copy them into a frame, say), use `withUnsafeBytes`.
    public var bytes: [UInt8] {
        switch storage {
        case .array(let array): array
        case .borrowed(let bytes, let owner): withExtendedLifetime(owner) { Array(bytes) }
        }
    }

    public var byteCount: Int {
        switch storage {
        case .array(let array): array.count
        case .borrowed(let bytes, _): bytes.count
        }
    }

    /// Calls `body` with the encoded bytes, valid only during the call.
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        switch storage {
        case .array(let array):
            var result: Result<R, E>?
            array.withUnsafeBytes { bytes in result = Result { () throws(E) in try body(bytes) } }
            return try result!.get()
        case .borrowed(let bytes, let owner):
            defer { withExtendedLifetime(owner) {} }
            return try body(bytes)
        }
    }

    public static func == (lhs: EncodedImage, rhs: EncodedImage) -> Bool {
        guard lhs.width == rhs.width, lhs.height == rhs.height, lhs.format == rhs.format else { return false }
        return lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in a.elementsEqual(b) } }
    }
}
