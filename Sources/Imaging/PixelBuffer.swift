/// An 8-bit interleaved image in memory: `channels` samples per pixel (1 = gray, 3 = RGB,
/// 4 = RGBA), rows packed with no padding (`stride == width * channels`).
///
/// A value type; copies share storage until written (Swift arrays).
public struct PixelBuffer: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var channels: Int
    public var pixels: [UInt8]

    public init(width: Int, height: Int, channels: Int, pixels: [UInt8]) {
        precondition(width > 0 && height > 0, "a pixel buffer has at least one pixel")
        precondition(channels == 1 || channels == 3 || channels == 4, "1, 3 or 4 channels")
        precondition(pixels.count == width * height * channels, "pixel count does not match the size")
        self.width = width
        self.height = height
        self.channels = channels
        self.pixels = pixels
    }

    /// A buffer of the given size filled with zeros.
    public init(width: Int, height: Int, channels: Int) {
        self.init(width: width, height: height, channels: channels,
                  pixels: [UInt8](repeating: 0, count: width * height * channels))
    }

    public var stride: Int { width * channels }
}
