import ImageModel
/// An upper bound of the memory one run of the pipeline needs at its peak, worked out from
/// the JPEG header and the resize plan before any pixel memory is allocated.
///
/// It follows the pipeline step by step and errs on the high side (plus 1/16 and 2 MiB of
/// slack for what allocators add): every buffer alive in a
/// phase is counted, buffers handed to `BufferReaper` stay counted until the run ends (they
/// are freed shortly after, off the thread), and the encoded output is bounded by the worst
/// case libjpeg-turbo itself allows for (`tjBufSize`), counted twice (the encoder's buffer
/// and the caller's copy of it into a frame). What it covers:
///
/// - the input bytes (the caller holds them for the whole run);
/// - libjpeg's decoder: fixed tables, strip buffers a few MCU rows high at full width and, for
///   multi-scan (progressive) files, the whole image's DCT coefficients, 2 bytes each;
/// - decoded buffers at the shrink-on-load scale (two for a progressive preview: the early
///   pass and the final one);
/// - per stage (EXIF thumbnail, degraded, final): the resampler's output, its intermediate
///   and filter tables (as `Resampler.workingBytes` works them out, choosing the pass order
///   the resampler will choose), the oriented copy, the encoder's working memory (whole-image
///   coefficients again for progressive output) and the encoded output.
///
/// Checked against the measured peak of real runs over the corpus in `MemoryEstimateTests`.
public struct MemoryEstimate: Sendable, Equatable, CustomStringConvertible {
    /// The peak, in bytes.
    public var bytes: Int
    /// The largest part of the peak (for messages): libjpeg's whole-image coefficients, or
    /// the decoded image.
    public var coefficientBytes: Int
    public var decodedBytes: Int

    public var description: String {
        var parts = ["about \(ByteCount(bytes)) at its peak"]
        if coefficientBytes > 0 { parts.append("\(ByteCount(coefficientBytes)) of JPEG coefficients") }
        parts.append("\(ByteCount(decodedBytes)) of decoded pixels")
        return parts.joined(separator: ", ")
    }

    public init(bytes: Int, coefficientBytes: Int, decodedBytes: Int) {
        self.bytes = bytes
        self.coefficientBytes = coefficientBytes
        self.decodedBytes = decodedBytes
    }

    /// Added to every estimate besides 1/16 of it: malloc's rounding and headers, page
    /// granularity, the small arrays and objects of a run (EXIF, tables, results).
    static let slack = 2 << 20
    /// libjpeg's fixed structures, tables and the markers it keeps; the EXIF thumbnail copy.
    static let decoderOverhead = 1 << 20
    /// The compressor's fixed structures and tables; the destination's first 64 KiB.
    static let encoderOverhead = 1 << 20
    public init(header: JPEGHeader, thumbnail: JPEGHeader?, plan: ResizePlan, options: ResizeOptions,
                delivery: Delivery, inputBytes: Int) {
        let channels = header.decodedChannels
        let decodedWidth = ResizePlan.scaledLength(header.width, numerator: plan.scaleNumerator)
        let decodedHeight = ResizePlan.scaledLength(header.height, numerator: plan.scaleNumerator)
        let decoded = decodedWidth * decodedHeight * channels
        let coefficients = header.multiScan ? header.coefficientBytes : 0
        let decoder = Self.decoderWorking(header) + coefficients
        let (final, degraded) = Self.stages(sourceWidth: header.width, sourceHeight: header.height,
                                            decodedWidth: decodedWidth, decodedHeight: decodedHeight, channels: channels,
                                            orientation: header.orientation, plan: plan, options: options)

        // Phases from the decoded buffer (or the progressive preview), as `ImagePipeline.run` goes.
        var phases: [Int] = []
        switch delivery {
        case .final:
            phases.append(decoder + decoded + final.peak)
        case .degraded, .progressive:
            phases.append(decoder + decoded + degraded.peak)
            // A progressive preview decodes twice: the early pass may still be being freed
            // when the final pass's buffer is allocated.
            let early = header.progressive ? decoded : 0
            if delivery == .progressive {
                phases.append(decoder + early + decoded + degraded.lingering + final.peak)
            }
        }
        // With a usable EXIF thumbnail, the degraded result (and a placeholder) comes from it
        // instead; whether it is usable is known only once it decodes, so both ways are
        // counted. The caller passes a thumbnail only when a run decodes it.
        if let thumbnail {
            let thumb = Self.thumbnailStage(thumbnail, header: header, plan: plan, options: options)
            phases.append(Self.decoderOverhead + thumb.peak)
            if delivery == .progressive {
                phases.append(decoder + decoded + thumb.lingering + final.peak)
            }
        }
        let peak = inputBytes + Self.profileBytes(header.iccProfile, options: options) + phases.max()!
        bytes = peak + peak / 16 + Self.slack
        coefficientBytes = coefficients
        decodedBytes = decoded
    }

    /// libjpeg's decoder without the whole-image coefficients: its fixed part and strip
    /// buffers (the coefficient, main, upsampling and colour-conversion rows), bounded by four
    /// full-resolution MCU rows of every component, plus a CMYK conversion row.
    static func decoderWorking(_ header: JPEGHeader) -> Int {
        let mcuWidth = 8 * max(1, header.maxHorizontalSampling)
        let mcuHeight = 8 * max(1, header.maxVerticalSampling)
        let paddedWidth = roundUp(header.width, mcuWidth)
        let cmykRow = header.colorSpace == .cmyk || header.colorSpace == .ycck ? header.width * 4 : 0
        return decoderOverhead + header.components * paddedWidth * mcuHeight * 4 + cmykRow
    }

    /// The degraded stage made from the EXIF thumbnail: its own decode, resize and encode.
    static func thumbnailStage(_ thumbnail: JPEGHeader, header: JPEGHeader, plan: ResizePlan,
                               options: ResizeOptions) -> (peak: Int, lingering: Int) {
        let (tw, th) = (thumbnail.width, thumbnail.height)
        let channels = thumbnail.decodedChannels
        let region = ImagePipeline.scale(plan.region, fromWidth: header.width, fromHeight: header.height,
                                         toWidth: tw, toHeight: th)
        let factor = min(1, Double(region.width) / Double(plan.storedOutputWidth),
                         Double(region.height) / Double(plan.storedOutputHeight))
        let width = max(1, Int((Double(plan.storedOutputWidth) * factor).rounded()))
        let height = max(1, Int((Double(plan.storedOutputHeight) * factor).rounded()))
        let source = Source(width: tw, height: th, channels: channels, region: region)
        let stage = Stage(source: source, width: width, height: height, filter: .lanczos3,
                          orientation: header.orientation, options: options, progressiveOutput: false,
                          resamplesAlways: true)
        let decoder = decoderWorking(thumbnail) + (thumbnail.multiScan ? thumbnail.coefficientBytes : 0)
        // Its buffers are freed in place when the preview is done; only the encoded result
        // (on its way out) outlives it.
        return (decoder + tw * th * channels + stage.peak, stage.encodedOutput)
    }

    /// The final and degraded stages made from a `sourceWidth`×`sourceHeight` image decoded
    /// at `decodedWidth`×`decodedHeight`, as the pipeline makes them.
    static func stages(sourceWidth: Int, sourceHeight: Int, decodedWidth: Int, decodedHeight: Int, channels: Int,
                       orientation: Orientation, plan: ResizePlan, options: ResizeOptions) -> (final: Stage, degraded: Stage) {
        let region = ImagePipeline.scale(plan.region, fromWidth: sourceWidth, fromHeight: sourceHeight,
                                         toWidth: decodedWidth, toHeight: decodedHeight)
        let source = Source(width: decodedWidth, height: decodedHeight, channels: channels, region: region)
        func stage(_ fraction: Double, _ filter: ResampleFilter) -> Stage {
            let width = max(1, Int((Double(plan.storedOutputWidth) * fraction).rounded()))
            let height = max(1, Int((Double(plan.storedOutputHeight) * fraction).rounded()))
            return Stage(source: source, width: width, height: height, filter: filter, orientation: orientation,
                         options: options, progressiveOutput: options.progressive)
        }
        return (stage(1, .lanczos3), stage(ImagePipeline.degradedScale, .triangle))
    }

    /// The decoded buffer a stage resizes, and the part of it that maps to the output.
    struct Source {
        var width: Int
        var height: Int
        var channels: Int
        var region: PixelRect
    }

    /// One stage: resize `source` to `width`×`height`, orient, encode.
    struct Stage {
        /// The stage's own buffers at their peak, the decoded source not included.
        var peak: Int
        /// What the stage leaves behind until the run ends: the encoded result on its way
        /// out and the resized image the reaper has not freed yet.
        var lingering: Int
        var encodedOutput: Int

        init(source: Source, width: Int, height: Int, filter: ResampleFilter, orientation: Orientation,
             options: ResizeOptions, progressiveOutput: Bool, resamplesAlways: Bool = false) {
            let channels = source.channels
            let output = width * height * channels
            let whole = PixelRect(x: 0, y: 0, width: source.width, height: source.height)
            let unchanged = source.region == whole && source.width == width && source.height == height
            var resize = 0
            if resamplesAlways || !unchanged {
                resize = output + Resampler.workingBytes(
                    regionWidth: source.region.width, regionHeight: source.region.height, width: width, height: height,
                    channels: channels, filter: filter)
            }
            let oriented = orientation == .up ? 0 : output
            // Whichever accepted format the image goes to: the costliest is counted.
            var encoded = 0, encoder = 0
            for format in options.accept.isEmpty ? [options.format] : options.accept {
                let cost = MemoryEstimate.encoding(format, width: width, height: height, channels: channels,
                                                   options: options, progressiveOutput: progressiveOutput)
                if cost.encoded + cost.working > encoded + encoder { (encoded, encoder) = (cost.encoded, cost.working) }
            }
            // RGBA is made straight, converted and flattened in new buffers before encoding.
            if channels == 4 { encoder += 2 * output }
            encodedOutput = encoded
            // The encoded bytes and the caller's copy of them into a frame.
            peak = resize + oriented + encoder + 2 * encoded
            lingering = encoded + (resize > 0 || oriented > 0 ? output : 0)
        }
    }

    /// The encoded output's bound and the encoder's working memory for one image.
    static func encoding(_ format: OutputFormat, width: Int, height: Int, channels: Int, options: ResizeOptions,
                         progressiveOutput: Bool) -> (encoded: Int, working: Int) {
        let pixels = width * height, raw = pixels * channels
        switch format {
        case .jpeg:
            let colour = min(channels, 3)
            var working = encoderOverhead + roundUp(width, 16) * colour * 16 * 4
            if progressiveOutput {
                working += jpegCoefficients(width: width, height: height, channels: colour, chroma444: options.chroma444)
            }
            return (jpegBound(width: width, height: height, channels: colour, chroma444: options.chroma444), working)
        case .pnm:
            return (raw + 32, encoderOverhead)
        case .png:
            // Deflate's worst case (stored blocks) over the filtered rows; zlib's state and
            // libspng's row buffers.
            let filtered = raw + height
            return (filtered + filtered / 1000 + 4096, encoderOverhead + 4 * width * channels + (1 << 19))
        case .webp:
            // libwebp's picture (ARGB or YUVA planes) and its encoder's per-picture state, and
            // the copy of the output made for the caller.
            return (raw + 4096, encoderOverhead + pixels * 12 + raw + 4096)
        case .avif:
            // libaom's frame buffers, look-ahead and tables, measured at well under this.
            return (raw + 4096, (16 << 20) + pixels * 24)
        }
    }

    /// The peak of a run over a PNG, WebP or HEIF source: the decoder's working memory, the
    /// decoded (reduced) buffer, and the stages as for JPEG; a HEIF thumbnail's stage too.
    public init(raster header: RasterHeader, plan: ResizePlan, shrink: Int, options: ResizeOptions, delivery: Delivery,
                inputBytes: Int, placeholder: Bool = false) {
        let channels = header.channels
        let decodedWidth = RasterDecoders.shrunk(header.width, shrink)
        let decodedHeight = RasterDecoders.shrunk(header.height, shrink)
        let decoded = decodedWidth * decodedHeight * channels
        let pixels = header.width * header.height
        let decoder: Int
        switch header.format {
        case .png:
            // Two rows in libspng, the row and box sums here, zlib's window.
            decoder = Self.decoderOverhead + header.width * channels * 8
        case .webp:
            // A lossless image is decoded whole as ARGB first; a lossy one by rows.
            decoder = Self.decoderOverhead + (header.colorSpace == "argb" || header.animated ? pixels * 8 : header.width * 96)
        case .gif:
            // giflib's state and LZW tables, one row of palette indices.
            decoder = Self.decoderOverhead + header.width
        case .jxl:
            // libjxl's planes in 32-bit floats (colour, alpha), its group caches and the
            // conversion to 8 bits: about 20 bytes a pixel, measured at under that. A lossy
            // (XYB) image with alpha takes libjxl 0.7's costliest path, measured at up to
            // 38 bytes a pixel, counted at 48. Each further extra channel is decoded too, as a
            // plane of its own and its copy. A layer larger than the image is decoded whole
            // before it is cropped: what it has beyond the image, measured at 2.4 to 3.6 bytes
            // a pixel lossy, up to 4.6 lossless, and 31 to 34 lossy with alpha; counted at 6
            // and 40.
            let lossyAlpha = header.colorSpace == "xyb" && header.hasAlpha
            let extra = 8 * header.extraPlanes
            let beyond = max(0, header.largestLayerPixels - pixels)
            decoder = (16 << 20) + pixels * ((lossyAlpha ? 48 : 24) + extra) + beyond * ((lossyAlpha ? 40 : 6) + extra)
        case .heic, .avif, .jpeg:
            // libheif's decoded planes (up to 16 bits), its RGB conversion and the codec's frames.
            decoder = (8 << 20) + pixels * (channels + 9)
        }
        let (final, degraded) = Self.stages(sourceWidth: header.width, sourceHeight: header.height,
                                            decodedWidth: decodedWidth, decodedHeight: decodedHeight, channels: channels,
                                            orientation: header.orientation, plan: plan, options: options)
        // An opaque RGBA image loses its alpha in a copy of the decoded buffer.
        let opaqueCopy = channels == 4 ? decodedWidth * decodedHeight * 3 : 0
        var phases = [decoder + decoded + opaqueCopy]
        switch delivery {
        case .final: phases.append(decoded + opaqueCopy + final.peak)
        case .degraded: phases.append(decoded + opaqueCopy + degraded.peak)
        case .progressive:
            phases.append(decoded + opaqueCopy + degraded.peak)
            phases.append(decoded + opaqueCopy + degraded.lingering + final.peak)
        }
        if delivery != .final || placeholder, header.hasThumbnail {
            let (tw, th) = (header.thumbnailWidth, header.thumbnailHeight)
            let thumbSource = Source(width: tw, height: th, channels: channels, region: ImagePipeline.scale(
                plan.region, fromWidth: header.width, fromHeight: header.height, toWidth: tw, toHeight: th))
            let thumb = Stage(source: thumbSource, width: plan.storedOutputWidth, height: plan.storedOutputHeight,
                              filter: .lanczos3, orientation: header.orientation, options: options,
                              progressiveOutput: false, resamplesAlways: true)
            phases.append((8 << 20) + tw * th * (2 * channels + 9) + thumb.peak)
            phases.append(thumb.lingering + decoder + decoded + opaqueCopy)
        }
        let peak = inputBytes + Self.profileBytes(header.iccProfile, options: options) + phases.max()!
        bytes = peak + peak / 16 + Self.slack
        coefficientBytes = 0
        decodedBytes = decoded
    }

    /// An embedded ICC profile (up to 16 MiB in a JPEG) through a run: the decoder's copy and
    /// the header's, the colour engine's parsed tables (a LUT profile's samples widened, up to
    /// four times the file), and when the output keeps it, the encoder's copy and the output's.
    static func profileBytes(_ profile: [UInt8]?, options: ResizeOptions) -> Int {
        let bytes = profile?.count ?? 0
        return bytes * (options.keepProfile ? 8 : 6)
    }

    /// The most bytes libjpeg-turbo's compressor can produce for an image (its `tjBufSize`):
    /// 2 bytes per sample of every component plane, padded to whole MCUs, plus 2 KiB.
    static func jpegBound(width: Int, height: Int, channels: Int, chroma444: Bool) -> Int {
        if channels == 1 { return roundUp(width, 8) * roundUp(height, 8) * 2 + 2048 }
        if chroma444 { return roundUp(width, 8) * roundUp(height, 8) * 6 + 2048 }
        return roundUp(width, 16) * roundUp(height, 16) * 3 + 2048
    }

    /// The compressor's whole-image coefficient buffer (progressive output), 2 bytes per
    /// sample of every component plane.
    static func jpegCoefficients(width: Int, height: Int, channels: Int, chroma444: Bool) -> Int {
        if channels == 1 { return roundUp(width, 8) * roundUp(height, 8) * 2 }
        if chroma444 { return roundUp(width, 8) * roundUp(height, 8) * 6 }
        return roundUp(width, 16) * roundUp(height, 16) * 3
    }

    static func roundUp(_ value: Int, _ multiple: Int) -> Int {
        (value + multiple - 1) / multiple * multiple
    }
}
