import CColour
import ImageModel
import Locking

/// A conversion of 8-bit grey or RGB pixels from an image's embedded ICC profile to sRGB
/// (Little CMS, perceptual intent). Immutable and without per-call state: one transform
/// serves every thread converting images with that profile.
final class ColourTransform: @unchecked Sendable {
    // @unchecked: the lcms transform is built with cmsFLAGS_NOCACHE and never changes after
    // creation, which makes concurrent cmsDoTransform calls safe.
    private let handle: OpaquePointer
    /// Channels of the pixels it converts (1 grey, 3 RGB, 4 CMYK or RGBA) and of its results
    /// (1, 3, or 4 for RGBA).
    let inputChannels: Int
    let outputChannels: Int
    /// Converts RGBA, copying the alpha, rather than CMYK.
    let alpha: Bool

    private init(handle: OpaquePointer, inputChannels: Int, alpha: Bool) {
        self.handle = handle
        self.inputChannels = inputChannels
        self.alpha = alpha
        outputChannels = inputChannels == 1 ? 1 : alpha ? 4 : 3
    }

    deinit { ec_transform_destroy(handle) }

    /// The transform for `profile` and pixels of `channels` (1 grey, 3 RGB, 4 CMYK, or RGBA
    /// with `alpha`), or why there is none (an unreadable profile, or one for another colour
    /// space).
    static func make(profile: [UInt8], channels: Int, alpha: Bool = false) -> Result<ColourTransform, ImagingError> {
        var status = EC_OK
        var message = [CChar](repeating: 0, count: 256)
        let pixels = channels == 1 ? EC_PIXELS_GRAY : channels == 4 ? (alpha ? EC_PIXELS_RGBA : EC_PIXELS_CMYK) : EC_PIXELS_RGB
        let handle = profile.withUnsafeBufferPointer { bytes in
            ec_transform_create(bytes.baseAddress, bytes.count, Int32(pixels.rawValue), &status, &message, message.count)
        }
        guard let handle else {
            let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return .failure(ImagingError(.unsupported, text))
        }
        return .success(ColourTransform(handle: handle, inputChannels: channels, alpha: alpha && channels == 4))
    }

    /// `image` converted to sRGB, in a new buffer from `allocator`; checks `cancel` between
    /// bands of rows.
    func apply(_ image: PixelBuffer, allocator: BufferAllocator, cancel: CancellationFlag?) throws(ImagingError) -> PixelBuffer {
        // A mismatch is a defect here, never a reason to stop the process: the request fails.
        guard image.channels == inputChannels else {
            throw ImagingError(.unsupported, "a \(inputChannels)-channel colour transform cannot convert "
                               + "\(image.channels)-channel pixels")
        }
        let outputStride = image.width * outputChannels
        return try PixelBuffer.make(width: image.width, height: image.height, channels: outputChannels, allocator: allocator,
                                    what: "the colour-converted image") { output throws(ImagingError) in
            try image.withUnsafeBufferPointer { (input) throws(ImagingError) in
                let band = max(1, (1 << 16) / max(1, image.stride))  // about 64 KiB of samples per call
                var row = 0
                while row < image.height {
                    try cancel?.check()
                    let rows = min(band, image.height - row)
                    ec_transform_apply(handle, input.baseAddress! + row * image.stride,
                                       output.baseAddress! + row * outputStride, rows * image.width)
                    row += rows
                }
            }
        }
    }
}

/// Transforms by profile: built once, kept for the next image with the same profile (photos
/// from one camera or phone share a handful). Bounded: at most `capacity` profiles.
enum ColourTransforms {
    private struct Key: Hashable {
        var channels: Int
        var alpha: Bool
        var profile: [UInt8]
    }

    private static let capacity = 64
    private static let cache = Lock<[Key: Result<ColourTransform, ImagingError>]>([:])

    /// The transform for `profile` and `channels`, or why there is none.
    static func transform(for profile: [UInt8], channels: Int, alpha: Bool = false) -> Result<ColourTransform, ImagingError> {
        let key = Key(channels: channels, alpha: alpha, profile: profile)
        if let known = cache.withLock({ $0[key] }) { return known }
        let made = ColourTransform.make(profile: profile, channels: channels, alpha: alpha)
        cache.withLock { cache in
            if cache.count >= capacity { cache.removeAll() }
            cache[key] = made
        }
        return made
    }
}
