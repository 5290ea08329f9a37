import ImageModel

/// Transparency along the pipeline: RGBA is resampled premultiplied (colour times alpha), so
/// that the colour of invisible pixels never bleeds into visible ones (no dark fringes
/// where a transparent edge meets an opaque one), and made straight again, or flattened onto
/// a background, after resizing.
enum Alpha {
    /// `value × alpha / 255`, rounded to nearest.
    @inline(__always)
    static func multiply(_ value: UInt8, _ alpha: UInt8) -> UInt8 {
        let product = Int(value) * Int(alpha) + 128
        return UInt8((product + (product >> 8)) >> 8)
    }

    /// Premultiplies `count` RGBA pixels in place. Returns whether any pixel is less than
    /// fully opaque (real transparency).
    static func premultiply(_ pixels: UnsafeMutablePointer<UInt8>, count: Int) -> Bool {
        var translucent = false
        for i in 0..<count {
            let p = pixels + 4 * i
            let alpha = p[3]
            if alpha == 255 { continue }
            translucent = true
            p[0] = multiply(p[0], alpha)
            p[1] = multiply(p[1], alpha)
            p[2] = multiply(p[2], alpha)
        }
        return translucent
    }

    /// Straight RGBA from premultiplied RGBA. A colour above its alpha (Lanczos rings past
    /// the edges) is clamped; a fully transparent pixel is black.
    static func unpremultiplied(_ image: PixelBuffer, allocator: BufferAllocator) throws(ImagingError) -> PixelBuffer {
        precondition(image.channels == 4)
        return try PixelBuffer.make(width: image.width, height: image.height, channels: 4, allocator: allocator,
                                    what: "the unpremultiplied image") { out in
            image.withUnsafeBufferPointer { input in
                for i in 0..<(image.width * image.height) {
                    let s = input.baseAddress! + 4 * i, d = out.baseAddress! + 4 * i
                    let alpha = Int(s[3])
                    d[3] = s[3]
                    if alpha == 255 {
                        d[0] = s[0]; d[1] = s[1]; d[2] = s[2]
                    } else if alpha == 0 {
                        d[0] = 0; d[1] = 0; d[2] = 0
                    } else {
                        for k in 0..<3 { d[k] = UInt8(min(255, (Int(s[k]) * 255 + alpha / 2) / alpha)) }
                    }
                }
            }
        }
    }

    /// Three-channel RGB: straight RGBA composited over `background`.
    static func flattened(_ image: PixelBuffer, onto background: RGBColour,
                          allocator: BufferAllocator) throws(ImagingError) -> PixelBuffer {
        precondition(image.channels == 4)
        let fill = [background.red, background.green, background.blue]
        return try PixelBuffer.make(width: image.width, height: image.height, channels: 3, allocator: allocator,
                                    what: "the flattened image") { out in
            image.withUnsafeBufferPointer { input in
                for i in 0..<(image.width * image.height) {
                    let s = input.baseAddress! + 4 * i, d = out.baseAddress! + 3 * i
                    let alpha = s[3]
                    for k in 0..<3 { d[k] = UInt8(min(255, Int(multiply(s[k], alpha)) + Int(multiply(fill[k], 255 - alpha)))) }
                }
            }
        }
    }

    /// The colour channels of an RGBA image (its alpha dropped).
    static func droppingAlpha(_ image: PixelBuffer, allocator: BufferAllocator) throws(ImagingError) -> PixelBuffer {
        precondition(image.channels == 4)
        return try PixelBuffer.make(width: image.width, height: image.height, channels: 3, allocator: allocator,
                                    what: "the opaque image") { out in
            image.withUnsafeBufferPointer { input in
                for i in 0..<(image.width * image.height) {
                    let s = input.baseAddress! + 4 * i, d = out.baseAddress! + 3 * i
                    d[0] = s[0]; d[1] = s[1]; d[2] = s[2]
                }
            }
        }
    }
}
