import ImageModel

/// A placeholder (the output's exact size and a ThumbHash of its picture, the crop,
/// orientation and sRGB conversion applied) as a run made it, from the smallest pixels the
/// run had: an embedded thumbnail (EXIF, or a HEIF thumbnail item), else the first pixels it
/// decoded (a progressive JPEG's first scans, or the buffer the results are made from).
public struct MadePlaceholder: Sendable, Equatable {
    public var placeholder: Placeholder
    /// Where its pixels came from.
    public var source: DegradedSource
    /// From the start of `PreparedResize.run` to the placeholder, in milliseconds.
    public var milliseconds: Double
}

extension ImagePipeline {
    /// The ThumbHash of `region` of `source` (premultiplied when it has four channels): reduced
    /// to at most `ThumbHash.maxSide` on its longer side, oriented, made straight, passed
    /// through `convert` (to sRGB) and spread to RGBA.
    func thumbHash(_ source: PixelBuffer, region: PixelRect, orientation: Orientation, cancel: CancellationFlag?,
                   convert: (PixelBuffer) throws(ImagingError) -> PixelBuffer) throws(ImagingError) -> [UInt8] {
        let longer = max(region.width, region.height)
        let scale = min(1, Double(ThumbHash.maxSide) / Double(longer))
        let width = max(1, min(ThumbHash.maxSide, Int((Double(region.width) * scale).rounded())))
        let height = max(1, min(ThumbHash.maxSide, Int((Double(region.height) * scale).rounded())))
        var small = try Resampler.resample(source, region: region, width: width, height: height, filter: .triangle,
                                           cancel: cancel, allocator: allocator)
        small = try orientation.apply(to: small, allocator: allocator)
        if small.channels == 4 { small = try Alpha.unpremultiplied(small, allocator: allocator) }
        small = try convert(small)
        let pixels = small.pixels, count = small.width * small.height
        var rgba = [UInt8](repeating: 255, count: count * 4)
        for index in 0..<count {
            switch small.channels {
            case 1:
                let grey = pixels[index]
                (rgba[4 * index], rgba[4 * index + 1], rgba[4 * index + 2]) = (grey, grey, grey)
            case 3:
                for c in 0..<3 { rgba[4 * index + c] = pixels[3 * index + c] }
            default:
                for c in 0..<4 { rgba[4 * index + c] = pixels[4 * index + c] }
            }
        }
        return ThumbHash.encode(width: small.width, height: small.height, rgba: rgba)
    }
}
