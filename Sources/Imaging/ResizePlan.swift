import ImageModel
/// The geometry of one resize, computed before decoding: a pure function of the source
/// size, its orientation and the options (see `ResizePlan.make`).
///
/// Everything is planned in *stored* orientation: the resampler works on the pixels as
/// decoded and only the small output is rotated at the end.
public struct ResizePlan: Sendable, Equatable {
    /// The displayed output size.
    public var outputWidth: Int
    public var outputHeight: Int
    /// The part of the stored full-resolution image that maps to the output (cover crops it).
    public var region: PixelRect
    /// The resampler's output size, in stored orientation.
    public var storedOutputWidth: Int
    public var storedOutputHeight: Int
    /// libjpeg DCT scale numerator: the image is decoded at `scaleNumerator`/8.
    public var scaleNumerator: Int

    /// How much larger than the output the decoded region must stay (per axis) for the
    /// Lanczos pass to reach full quality after DCT shrink-on-load. A DCT shrink is a
    /// per-block filter: at 1.5 a detailed photo fell to 39 dB against an exact Lanczos
    /// reference, at 2.0 every corpus photo stays above 46 dB (Benchmarks/quality.sh).
    /// Odd scales (3/8, 5/8…) measured worse than powers of two and are not used.
    public static let defaultHeadroom = 2.0

    public static func make(sourceWidth: Int, sourceHeight: Int, orientation: Orientation,
                            options: ResizeOptions, headroom: Double = defaultHeadroom) throws(ImagingError) -> ResizePlan {
        try options.validate()
        let (ow, oh) = orientation.orientedSize(width: sourceWidth, height: sourceHeight)
        let box = outputBox(sourceWidth: ow, sourceHeight: oh, options: options)
        // The requested axis is capped by `validate`; the derived one (one axis given, with
        // `enlarge`, on an extreme aspect ratio) must be too, or a tiny input could ask for a
        // gigantic output.
        if box.width > ResizeOptions.maxDimension || box.height > ResizeOptions.maxDimension {
            throw ImagingError(.invalidArgument, "the output would be \(box.width)×\(box.height), "
                               + "above the limit of \(ResizeOptions.maxDimension) px per axis")
        }
        let storedRegion = orientation.storedRect(box.region, storedWidth: sourceWidth, storedHeight: sourceHeight)
        let (sw, sh) = orientation.swapsAxes ? (box.height, box.width) : (box.width, box.height)
        let scale = shrinkOnLoad(region: storedRegion, outputWidth: sw, outputHeight: sh, headroom: headroom)
        return ResizePlan(outputWidth: box.width, outputHeight: box.height, region: storedRegion,
                          storedOutputWidth: sw, storedOutputHeight: sh, scaleNumerator: scale)
    }

    /// The output size and source region for a displayed source of `sourceWidth`×`sourceHeight`.
    /// No axis ever rounds to 0 px.
    public static func outputBox(sourceWidth w: Int, sourceHeight h: Int,
                                 options: ResizeOptions) -> (width: Int, height: Int, region: PixelRect) {
        let whole = PixelRect(x: 0, y: 0, width: w, height: h)
        func scaled(_ length: Int, _ factor: Double) -> Int { max(1, Int((Double(length) * factor).rounded())) }
        let sx = options.width.map { Double($0) / Double(w) }
        let sy = options.height.map { Double($0) / Double(h) }

        guard let fx = sx, let fy = sy else {
            // One axis given: keep the aspect ratio, whatever the fit.
            let factor = sx ?? sy!
            if !options.enlarge && factor >= 1 { return (w, h, whole) }
            return sx != nil ? (options.width!, scaled(h, factor), whole) : (scaled(w, factor), options.height!, whole)
        }
        let tw = options.width!, th = options.height!
        switch options.fit {
        case .inside:
            let factor = min(fx, fy)
            if !options.enlarge && factor >= 1 { return (w, h, whole) }
            // The limiting axis lands exactly on the box; the other is rounded.
            return fx <= fy ? (tw, scaled(h, factor), whole) : (scaled(w, factor), th, whole)
        case .fill:
            return options.enlarge ? (tw, th, whole) : (min(tw, w), min(th, h), whole)
        case .cover:
            var factor = max(fx, fy)
            var (bw, bh) = (tw, th)
            if !options.enlarge && factor > 1 {
                // Never enlarge: crop the centre of the source to at most the box.
                factor = 1
                (bw, bh) = (min(tw, w), min(th, h))
            }
            let rw = min(w, max(1, Int((Double(bw) / factor).rounded())))
            let rh = min(h, max(1, Int((Double(bh) / factor).rounded())))
            return (bw, bh, PixelRect(x: (w - rw) / 2, y: (h - rh) / 2, width: rw, height: rh))
        }
    }

    /// The largest DCT shrink (8/8, 4/8, 2/8, 1/8) that keeps the decoded region at least
    /// `headroom` times the output on both axes.
    public static func shrinkOnLoad(region: PixelRect, outputWidth: Int, outputHeight: Int, headroom: Double) -> Int {
        for numerator in [1, 2, 4] {
            let rw = Double(region.width * numerator) / 8, rh = Double(region.height * numerator) / 8
            if rw >= headroom * Double(outputWidth) && rh >= headroom * Double(outputHeight) {
                return numerator
            }
        }
        return 8
    }

    /// The size libjpeg produces for a `length` px axis at `numerator`/8 (it rounds up).
    public static func scaledLength(_ length: Int, numerator: Int) -> Int {
        (length * numerator + 7) / 8
    }
}
