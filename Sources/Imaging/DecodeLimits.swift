/// Limits checked from the header before any pixel memory is allocated.
public struct DecodeLimits: Sendable, Equatable {
    /// Above the largest real photo in common use (99.6 MP), below decompression bombs.
    public var maxPixels = 1 << 27
    public var maxInputBytes = 64 << 20
    /// Bounds the work of progressive files with absurd scan counts.
    public var maxScans = 256
    /// Bounds libjpeg's whole-image buffers: a progressive file keeps all its coefficients
    /// (2 bytes per sample per component), up to ~0.8 GB at `maxPixels`.
    public var maxDecoderMemory = 1 << 30
    /// The largest single buffer the pipeline allocates (decoded pixels, resampler buffers,
    /// encoded output, libjpeg's whole-image buffers); an image that needs a larger one fails
    /// with `tooLarge`, as it does when memory runs out. No bound by default: the worker's
    /// memory budget is the real bound, this is a hard cap and a way to test allocation
    /// failure.
    public var maxBufferBytes = Int.max
    /// The largest AVIF output, in pixels. The AV1 encoder cannot be interrupted, so its
    /// time bounds how long a cancelled job may keep its thread: this bounds that time.
    public var maxAVIFPixels = DecodeLimits.defaultMaxAVIFPixels

    public static let defaultMaxAVIFPixels = 16_000_000

    public init(maxPixels: Int = 1 << 27, maxInputBytes: Int = 64 << 20, maxScans: Int = 256,
                maxDecoderMemory: Int = 1 << 30, maxBufferBytes: Int = .max,
                maxAVIFPixels: Int = DecodeLimits.defaultMaxAVIFPixels) {
        self.maxPixels = maxPixels
        self.maxInputBytes = maxInputBytes
        self.maxScans = maxScans
        self.maxDecoderMemory = maxDecoderMemory
        self.maxBufferBytes = maxBufferBytes
        self.maxAVIFPixels = maxAVIFPixels
    }
}
