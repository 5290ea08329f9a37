import ImageModel
/// The eight EXIF orientations: how the stored pixels must be transformed to display upright.
public enum Orientation: Int, Sendable, CaseIterable {
    case up = 1, upMirrored, down, downMirrored, leftMirrored, right, rightMirrored, left

    /// Orientations 5–8 swap width and height.
    public var swapsAxes: Bool { rawValue >= 5 }

    /// The displayed size of a stored `width`×`height` image.
    public func orientedSize(width: Int, height: Int) -> (width: Int, height: Int) {
        swapsAxes ? (height, width) : (width, height)
    }

    /// Maps a rectangle of the displayed (oriented) image back to stored pixel coordinates.
    /// `width`×`height` is the stored size.
    public func storedRect(_ r: PixelRect, storedWidth w: Int, storedHeight h: Int) -> PixelRect {
        switch self {
        case .up: return r
        case .upMirrored: return PixelRect(x: w - r.x - r.width, y: r.y, width: r.width, height: r.height)
        case .down: return PixelRect(x: w - r.x - r.width, y: h - r.y - r.height, width: r.width, height: r.height)
        case .downMirrored: return PixelRect(x: r.x, y: h - r.y - r.height, width: r.width, height: r.height)
        case .leftMirrored: return PixelRect(x: r.y, y: r.x, width: r.height, height: r.width)
        case .right: return PixelRect(x: r.y, y: h - r.x - r.width, width: r.height, height: r.width)
        case .rightMirrored: return PixelRect(x: w - r.y - r.height, y: h - r.x - r.width, width: r.height, height: r.width)
        case .left: return PixelRect(x: w - r.y - r.height, y: r.x, width: r.height, height: r.width)
        }
    }

    /// Returns the image transformed to display upright. Done after resizing, where it is cheap.
    /// The new buffer comes from `allocator`.
    public func apply(to image: PixelBuffer,
                      allocator: BufferAllocator = BufferAllocator()) throws(ImagingError) -> PixelBuffer {
        if self == .up { return image }
        let w = image.width, h = image.height, c = image.channels
        let (ow, oh) = orientedSize(width: w, height: h)
        return try PixelBuffer.make(width: ow, height: oh, channels: c, allocator: allocator,
                                    what: "the oriented image") { dst in
            image.withUnsafeBufferPointer { src in
                for y in 0..<oh {
                    for x in 0..<ow {
                        // Source pixel of displayed (x, y); see the EXIF definitions of 1…8.
                        let (sx, sy): (Int, Int)
                        switch self {
                        case .up: (sx, sy) = (x, y)
                        case .upMirrored: (sx, sy) = (w - 1 - x, y)
                        case .down: (sx, sy) = (w - 1 - x, h - 1 - y)
                        case .downMirrored: (sx, sy) = (x, h - 1 - y)
                        case .leftMirrored: (sx, sy) = (y, x)
                        case .right: (sx, sy) = (y, h - 1 - x)
                        case .rightMirrored: (sx, sy) = (w - 1 - y, h - 1 - x)
                        case .left: (sx, sy) = (w - 1 - y, x)
                        }
                        let s = (sy * w + sx) * c, d = (y * ow + x) * c
                        for k in 0..<c { dst[d + k] = src[s + k] }
                    }
                }
            }
        }
    }
}
