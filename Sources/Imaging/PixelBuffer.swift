import ImageModel
/// An 8-bit interleaved image in memory: `channels` samples per pixel (1 = gray, 3 = RGB,
/// 4 = RGBA), rows packed with no padding (`stride == width * channels`).
///
/// A value type over immutable storage: copies share it. Buffers the pipeline makes come
/// from a `BufferAllocator` (so running out of memory is an error, not a crash); buffers
/// made from an array keep that array.
public struct PixelBuffer: Sendable, Equatable {
    public let width: Int
    public let height: Int
    public let channels: Int
    let storage: Storage

    enum Storage: Sendable {
        case array([UInt8])
        case allocated(Allocation)
    }

    public init(width: Int, height: Int, channels: Int, pixels: [UInt8]) {
        precondition(width > 0 && height > 0, "a pixel buffer has at least one pixel")
        precondition(channels == 1 || channels == 3 || channels == 4, "1, 3 or 4 channels")
        precondition(pixels.count == width * height * channels, "pixel count does not match the size")
        self.width = width
        self.height = height
        self.channels = channels
        storage = .array(pixels)
    }

    /// A buffer of the given size filled with zeros.
    public init(width: Int, height: Int, channels: Int) {
        self.init(width: width, height: height, channels: channels,
                  pixels: [UInt8](repeating: 0, count: width * height * channels))
    }

    /// A buffer from `allocator` whose every byte `fill` writes. On a throw from `fill` the
    /// memory is released (off this thread when large) and the error rethrown.
    static func make(
        width: Int, height: Int, channels: Int, allocator: BufferAllocator, what: @autoclosure () -> String,
        fill: (UnsafeMutableBufferPointer<UInt8>) throws(ImagingError) -> Void
    ) throws(ImagingError) -> PixelBuffer {
        precondition(width > 0 && height > 0 && (channels == 1 || channels == 3 || channels == 4))
        let (pixels, overflow) = width.multipliedReportingOverflow(by: height)
        guard !overflow else { throw ImagingError(.tooLarge, "\(what()) of \(width)×\(height) pixels is impossibly large") }
        let memory = try allocator.allocate(pixels, of: UInt8.self, times: channels,
                                            for: "\(what()) (\(width)×\(height)×\(channels))")
        do throws(ImagingError) {
            try memory.withMemory(as: UInt8.self, fill)
        } catch {
            BufferReaper.release(memory)
            throw error
        }
        return PixelBuffer(width: width, height: height, channels: channels, storage: .allocated(memory))
    }

    private init(width: Int, height: Int, channels: Int, storage: Storage) {
        self.width = width
        self.height = height
        self.channels = channels
        self.storage = storage
    }

    public var stride: Int { width * channels }

    /// The samples, row after row. A copy when the buffer was not made from an array: for
    /// tests and tools; the pipeline reads them in place with `withUnsafeBufferPointer`.
    public var pixels: [UInt8] {
        switch storage {
        case .array(let array): array
        case .allocated(let memory): memory.copyBytes()
        }
    }

    /// Calls `body` with the samples, valid only during the call.
    public func withUnsafeBufferPointer<R, E: Error>(
        _ body: (UnsafeBufferPointer<UInt8>) throws(E) -> R
    ) throws(E) -> R {
        switch storage {
        case .array(let array):
            var result: Result<R, E>?
            array.withUnsafeBufferPointer { samples in result = Result { () throws(E) in try body(samples) } }
            return try result!.get()
        case .allocated(let memory):
            return try body(memory.bytes.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// The memory this buffer keeps alive, in bytes.
    var byteCount: Int { width * height * channels }

    public static func == (lhs: PixelBuffer, rhs: PixelBuffer) -> Bool {
        guard lhs.width == rhs.width, lhs.height == rhs.height, lhs.channels == rhs.channels else { return false }
        return lhs.withUnsafeBufferPointer { a in rhs.withUnsafeBufferPointer { b in a.elementsEqual(b) } }
    }
}
