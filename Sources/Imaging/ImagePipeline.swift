import ImageModel
/// Where a degraded result came from: the cheapest honest source available.
public enum DegradedSource: String, Sendable {
    /// The JPEG thumbnail embedded in the EXIF block (no decode of the main image needed).
    case exifThumbnail
    /// A HEIF thumbnail item (no decode of the main image needed).
    case heifThumbnail
    /// An output pass over the first scans of a progressive JPEG.
    case progressiveScans
    /// The buffer decoded for the final, with a cheap filter before the Lanczos pass.
    case decodedBuffer
}

/// Milliseconds spent per step on one result, since the result before it: the decode a
/// degraded result and the final share is counted once, with the first result it served, so
/// the timings of a run's results add up to no more than the run.
public struct StageTimings: Sendable, Equatable {
    public var decodeMilliseconds = 0.0
    public var resizeMilliseconds = 0.0
    public var encodeMilliseconds = 0.0
}

public struct StageResult: Sendable {
    public var stage: Stage
    /// The last result of the request: nothing follows it.
    public var isTerminal: Bool
    public var image: EncodedImage
    public var degradedSource: DegradedSource?
    public var timings: StageTimings
    /// The source image's displayed size.
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// What the user should know about how the result was made: an embedded profile that was
    /// ignored, transparency flattened onto a background.
    public var notes: [String] = []
}

/// decode → resize → encode for one JPEG, yielding a degraded result before the final when
/// asked. The JPEG is decoded once: the degraded result comes from the EXIF thumbnail, the
/// first progressive scans, or the very buffer the final is computed from.
public struct ImagePipeline: Sendable {
    public var limits: DecodeLimits
    /// See `ResizePlan.defaultHeadroom`.
    public var headroom: Double
    /// JPEG quality of degraded results (they are replaced soon; small and fast matters more).
    public var degradedQuality: Int
    /// Progressive scans shown in a degraded result (the DC scan and the first AC scan).
    public var previewScans = 2
    /// Largest EXIF thumbnail decoded for a degraded result.
    static let maxThumbnailPixels = 1 << 20

    public init(limits: DecodeLimits = DecodeLimits(), headroom: Double = ResizePlan.defaultHeadroom,
                degradedQuality: Int = 60) {
        self.limits = limits
        self.headroom = headroom
        self.degradedQuality = degradedQuality
    }

    /// Runs the pipeline on `input` (which must stay valid during the call). `emit` is
    /// called on the calling thread once per result, degraded first; the last call has
    /// `isTerminal == true`. Throws `ImagingError` (e.g. `.cancelled` once `cancel` is set).
    public func run(_ input: UnsafeRawBufferPointer, options: ResizeOptions, delivery: Delivery = .final,
                    cancel: CancellationFlag? = nil, emit: (StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        try prepare(input, options: options, delivery: delivery, cancel: cancel).run(emit: emit)
    }

    /// Reads the header, checks the limits and plans the resize, allocating nothing in
    /// proportion to the image; the result says how much memory running it will take
    /// (`PreparedResize.memoryEstimate`) before any pixel memory is committed. `input` must
    /// stay valid until the prepared resize has run (or been dropped).
    /// `placeholder`: the caller will ask for one (`PreparedResize.onPlaceholder`), so an
    /// embedded thumbnail is decoded whatever the delivery, and counted.
    public func prepare(_ input: UnsafeRawBufferPointer, options: ResizeOptions, delivery: Delivery = .final,
                        cancel: CancellationFlag? = nil, placeholder: Bool = false) throws(ImagingError) -> PreparedResize {
        try prepare(input, options: options, delivery: delivery, cancel: cancel, colour: true, placeholder: placeholder)
    }

    /// `colour: false` leaves the embedded profile unapplied (for comparisons in tests);
    /// `releasingRead`: the input is a `MappedFile`'s (see `run(_:options:...)` for files).
    func prepare(_ input: UnsafeRawBufferPointer, options: ResizeOptions, delivery: Delivery = .final,
                 cancel: CancellationFlag? = nil, colour managed: Bool,
                 releasingRead: Bool = false, placeholder: Bool = false) throws(ImagingError) -> PreparedResize {
        let format = try InputFormat.detect(input, limits: limits)
        if format != .jpeg {
            return try prepareRaster(format, input, options: options, delivery: delivery, cancel: cancel, colour: managed,
                                     releasingRead: releasingRead, placeholder: placeholder)
        }
        let decoder = try JPEGDecoder(data: input, limits: limits, cancel: cancel, failOn: options.failOn)
        var notes: [String] = []
        var colour = managed ? Self.colourTransform(for: decoder.header, notes: &notes) : nil
        // Keeping the profile leaves RGB and grey pixels as they are (CMYK must still become RGB).
        if options.keepProfile, colour?.inputChannels != 4 { colour = nil }
        // CMYK with a usable profile is decoded as CMYK and converted after resizing.
        if colour?.inputChannels == 4 { decoder.keepCMYK() }
        let header = decoder.header
        let plan = try ResizePlan.make(sourceWidth: header.width, sourceHeight: header.height,
                                       orientation: header.orientation, options: options, headroom: headroom)
        if plan.outputWidth * plan.outputHeight > limits.maxPixels {
            throw ImagingError(.tooLarge, "the output would be \(plan.outputWidth)×\(plan.outputHeight), "
                               + "above the limit of \(limits.maxPixels) pixels")
        }
        // A JPEG has no alpha: when its output is AVIF, an AVIF over the limit is refused now,
        // before any decoding (the encoder checks again, for every path).
        if (try? options.outputFormat(hasAlpha: false).format) == .avif {
            try Encoder.checkAVIFSize(width: plan.outputWidth, height: plan.outputHeight, limit: limits.maxAVIFPixels)
        }
        let wantsDegraded = delivery != .final
        // Only the thumbnail's header is read here, for the estimate.
        let thumbnail = wantsDegraded || placeholder ? decoder.thumbnail.flatMap { bytes in
            try? withBytes(bytes) { raw throws(ImagingError) in
                try JPEGDecoder(data: raw, limits: Self.thumbnailLimits(raw.count), cancel: nil).header
            }
        } : nil
        let estimate = MemoryEstimate(header: header, thumbnail: thumbnail, plan: plan, options: options,
                                      delivery: delivery, inputBytes: input.count)
        let prepared = PreparedResize(pipeline: self, source: .jpeg(decoder), plan: plan, options: options,
                                      delivery: delivery, cancel: cancel, estimate: estimate)
        if let format = try? options.outputFormat(hasAlpha: false).format,
           let dropped = Encoder.embeddable(Self.keptProfile(header, options), in: format).note {
            notes.append(dropped)
        }
        if delivery != .degraded, options.gainMap != .drop, let found = GainMapSource.find(in: input) {
            prepared.gainMap = prepareGainMap(found, input: input, header: header, plan: plan, options: options,
                                              cancel: cancel, notes: &notes)
            if let gain = prepared.gainMap { prepared.memoryEstimate.bytes += gain.memoryBytes }
        }
        prepared.colour = colour
        prepared.notes = notes
        return prepared
    }

    /// The conversion of the decoded pixels to sRGB that the embedded profile calls for, if
    /// any: grey, RGB, or (for CMYK and YCCK files) CMYK ink amounts. A profile that cannot be
    /// used is ignored: RGB and grey pixels are then taken as sRGB, and CMYK is converted to
    /// RGB by the decoder's plain formula, as for a CMYK file without a profile.
    static func colourTransform(for header: JPEGHeader, notes: inout [String]) -> ColourTransform? {
        guard let profile = header.iccProfile else { return nil }
        let channels = header.colorSpace == .gray ? 1 : header.colorSpace == .cmyk || header.colorSpace == .ycck ? 4 : 3
        return transform(profile, channels: channels, alpha: false, notes: &notes)
    }

    /// The cached transform, or nil with a note saying why the profile is ignored.
    static func transform(_ profile: [UInt8], channels: Int, alpha: Bool, notes: inout [String]) -> ColourTransform? {
        switch ColourTransforms.transform(for: profile, channels: channels, alpha: alpha) {
        case .success(let transform): return transform
        case .failure(let error):
            notes.append("the embedded ICC profile is ignored (\(error.message)): the pixels are taken as sRGB")
            return nil
        }
    }

    /// The source profile to embed in the output: with `keepProfile`, for RGB and grey sources.
    static func keptProfile(_ header: JPEGHeader, _ options: ResizeOptions) -> [UInt8]? {
        guard options.keepProfile, header.colorSpace != .cmyk, header.colorSpace != .ycck else { return nil }
        return header.iccProfile
    }

    static func thumbnailLimits(_ bytes: Int) -> DecodeLimits {
        DecodeLimits(maxPixels: maxThumbnailPixels, maxInputBytes: bytes, maxScans: 16)
    }

    var allocator: BufferAllocator { BufferAllocator(maxBytes: limits.maxBufferBytes) }

    fileprivate func run(_ job: PreparedResize, decoder: JPEGDecoder, decoded: inout PixelBuffer?,
                         emit: (StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        var clock = Stopwatch()
        let plan = job.plan, options = job.options, delivery = job.delivery, cancel = job.cancel
        let header = decoder.header
        let oriented = header.orientedSize
        func result(_ stage: Stage, _ image: EncodedImage, _ source: DegradedSource?, _ timings: StageTimings) -> StageResult {
            StageResult(stage: stage, isTerminal: stage == .final || delivery == .degraded, image: image,
                        degradedSource: source, timings: timings, sourceWidth: oriented.width, sourceHeight: oriented.height,
                        notes: job.notes)
        }
        let wantsDegraded = delivery != .final
        var timings = StageTimings()
        let convert = { (image: PixelBuffer) throws(ImagingError) -> PixelBuffer in
            guard let colour = job.colour, colour.inputChannels == image.channels else { return image }
            return try colour.apply(image, allocator: self.allocator, cancel: cancel)
        }
        func offer(_ pixels: PixelBuffer, _ source: DegradedSource) throws(ImagingError) {
            try job.offerPlaceholder(pixels, sourceWidth: header.width, sourceHeight: header.height,
                                     orientation: header.orientation, source: source, convert: convert)
        }
        // The EXIF thumbnail, decoded once for the placeholder and the degraded result, and
        // let go before the main decode.
        var thumbnail = wantsDegraded || job.onPlaceholder != nil
            ? decoder.thumbnail.flatMap { decodeThumbnail($0, header: header, cancel: cancel) } : nil
        if let thumbnail { try offer(thumbnail.pixels, .exifThumbnail) }
        let preview = wantsDegraded ? thumbnail.flatMap {
            thumbnailPreview($0, header: header, plan: plan, options: options, colour: job.colour, cancel: cancel)
        } : nil
        thumbnail = nil

        if let preview {
            try cancel?.check()
            try emit(result(.degraded, preview.image, .exifThumbnail, preview.timings))
            if delivery == .degraded { return }
            clock.reset()
            decoded = try decoder.decode(scaleNumerator: plan.scaleNumerator)
            timings.decodeMilliseconds = clock.lap()
            try offer(decoded!, .decodedBuffer)
        } else if wantsDegraded && header.progressive {
            let size = try decoder.startBuffered(scaleNumerator: plan.scaleNumerator)
            let complete = try decoder.consume(scans: previewScans)
            var early: PixelBuffer? = try decoder.outputPass(width: size.width, height: size.height,
                                                             channels: size.channels, fast: true)
            var previewTimings = StageTimings(decodeMilliseconds: clock.lap())
            try offer(early!, .progressiveScans)
            let image = try finish(early!, .degraded, plan: plan, header: header, options: options, colour: job.colour,
                                   quality: degradedQuality, cancel: cancel, timings: &previewTimings, clock: &clock)
            // Not alive during the final pass, which allocates a buffer of the same size.
            BufferReaper.release(&early)
            try emit(result(.degraded, image, .progressiveScans, previewTimings))
            if delivery == .degraded { return }
            clock.reset()
            if !complete { try decoder.consume(scans: 0) }
            decoded = try decoder.outputPass(width: size.width, height: size.height, channels: size.channels)
            try decoder.finishBuffered()
            timings.decodeMilliseconds = clock.lap()
        } else {
            decoded = try decoder.decode(scaleNumerator: plan.scaleNumerator)
            timings.decodeMilliseconds = clock.lap()
            try offer(decoded!, .decodedBuffer)
            if wantsDegraded {
                // The decode is the degraded result's: the final reuses the buffer, and its
                // timings count only what it adds.
                var previewTimings = timings
                let image = try finish(decoded!, .degraded, plan: plan, header: header, options: options, colour: job.colour,
                                       quality: degradedQuality, cancel: cancel, timings: &previewTimings, clock: &clock)
                try emit(result(.degraded, image, .decodedBuffer, previewTimings))
                if delivery == .degraded { return }
                timings = StageTimings()
                clock.reset()
            }
        }
        var mapDecoded: PixelBuffer?
        let gain = try job.gainMap.flatMap { (gain) throws(ImagingError) in
            try gainMapOutput(gain, decoded: &mapDecoded, numerator: gain.plan.scaleNumerator,
                              orientation: header.orientation, quality: options.quality, cancel: cancel,
                              notes: &job.notes)
        }
        BufferReaper.release(&mapDecoded)
        var image = try finish(decoded!, .final, plan: plan, header: header, options: options, colour: job.colour,
                               quality: options.quality, cancel: cancel, timings: &timings, clock: &clock,
                               toneMap: gain?.toneMap)
        image = Self.attaching(gain, source: job.gainMap?.source, to: image)
        try emit(result(.final, image, nil, timings))
    }

    /// Convenience: the final result only.
    public func resize(_ input: UnsafeRawBufferPointer, options: ResizeOptions,
                       cancel: CancellationFlag? = nil) throws(ImagingError) -> StageResult {
        var final: StageResult?
        try run(input, options: options, delivery: .final, cancel: cancel) { final = $0 }
        return final!
    }

    /// Resamples the plan's region of a decoded buffer, orients and encodes it.
    /// The degraded stage of a decoded buffer is made at this fraction of the final size
    /// (never below 1 px): it is replaced soon, and a quarter of the pixels to filter and
    /// encode is what makes it arrive clearly before the final.
    static let degradedScale = 0.5

    /// The final stage uses Lanczos-3 at the planned size; the degraded one a cheap filter at
    /// `degradedScale` of it.
    private func finish(_ decoded: PixelBuffer, _ stage: Stage, plan: ResizePlan, header: JPEGHeader, options: ResizeOptions,
                        colour: ColourTransform?,
                        quality: Int, cancel: CancellationFlag?,
                        timings: inout StageTimings, clock: inout Stopwatch,
                        toneMap: (parameters: GainMapParameters, map: PixelBuffer)? = nil) throws(ImagingError) -> EncodedImage {
        let (region, span) = Self.decodedWindow(plan.region, sourceWidth: header.width, sourceHeight: header.height,
                                                decoded: decoded, numerator: plan.scaleNumerator)
        let (filter, fraction) = stage == .final ? (ResampleFilter.lanczos3, 1.0) : (.triangle, Self.degradedScale)
        let width = max(1, Int((Double(plan.storedOutputWidth) * fraction).rounded()))
        let height = max(1, Int((Double(plan.storedOutputHeight) * fraction).rounded()))
        var upright: PixelBuffer?
        // Like the decoded buffer, a large output is freed off this thread.
        defer { BufferReaper.release(&upright) }
        if region == PixelRect(x: 0, y: 0, width: decoded.width, height: decoded.height) && span == nil
            && decoded.width == width && decoded.height == height {
            upright = try header.orientation.apply(to: decoded, allocator: allocator)
        } else {
            var resized: PixelBuffer? = try Resampler.resample(
                decoded, region: region, span: span, width: width, height: height, filter: filter, cancel: cancel,
                allocator: allocator)
            if header.orientation == .up {
                upright = resized
            } else {
                upright = try header.orientation.apply(to: resized!, allocator: allocator)
            }
            BufferReaper.release(&resized)
        }
        return try finishUpright(&upright, header: header, options: options, colour: colour, quality: quality,
                                 cancel: cancel, timings: &timings, clock: &clock, toneMap: toneMap)
    }

    /// The output in display orientation, converted to sRGB (and tone-mapped), then encoded.
    /// `upright` is replaced by the converted buffer; the caller releases it.
    func finishUpright(_ upright: inout PixelBuffer?, header: JPEGHeader, options: ResizeOptions,
                       colour: ColourTransform?, quality: Int, cancel: CancellationFlag?,
                       timings: inout StageTimings, clock: inout Stopwatch,
                       toneMap: (parameters: GainMapParameters, map: PixelBuffer)? = nil) throws(ImagingError) -> EncodedImage {
        // To sRGB from the embedded profile: on the small output, once per output pixel.
        if let colour {
            var converted: PixelBuffer? = try colour.apply(upright!, allocator: allocator, cancel: cancel)
            swap(&upright, &converted)
            BufferReaper.release(&converted)
        }
        if let toneMap {
            var mapped: PixelBuffer? = try toneMap.parameters.toneMapped(upright!, map: toneMap.map, allocator: allocator)
            swap(&upright, &mapped)
            BufferReaper.release(&mapped)
        }
        timings.resizeMilliseconds += clock.lap()
        try cancel?.check()
        let image = try Encoder.encode(upright!, format: options.outputFormat(hasAlpha: false).format, quality: quality,
                                       progressive: options.progressive, chroma444: options.chroma444,
                                       lossless: options.lossless, iccProfile: Self.keptProfile(header, options),
                                       cancel: cancel, allocator: allocator, maxAVIFPixels: limits.maxAVIFPixels)
        timings.encodeMilliseconds += clock.lap()
        return image
    }

    /// The EXIF thumbnail decoded, and how long that took; nil when it is unusable
    /// (undecodable, or its aspect ratio differs from the image's, as with letterboxed ones).
    private func decodeThumbnail(_ bytes: [UInt8], header: JPEGHeader,
                                 cancel: CancellationFlag?) -> (pixels: PixelBuffer, milliseconds: Double)? {
        var clock = Stopwatch()
        return try? withBytes(bytes) { raw throws(ImagingError) -> (pixels: PixelBuffer, milliseconds: Double)? in
            // A thumbnail is small by definition: one declaring more is not worth decoding.
            var limits = Self.thumbnailLimits(raw.count)
            limits.maxBufferBytes = self.limits.maxBufferBytes
            let thumb = try JPEGDecoder(data: raw, limits: limits, cancel: cancel)
            let (tw, th) = (thumb.header.width, thumb.header.height)
            let aspect = Double(tw) / Double(th), expected = Double(header.width) / Double(header.height)
            guard abs(aspect / expected - 1) < 0.02 else { return nil }
            return (try thumb.decode(scaleNumerator: 8), clock.lap())
        }
    }

    /// A degraded result from the decoded EXIF thumbnail, or nil when it cannot be made.
    private func thumbnailPreview(_ thumbnail: (pixels: PixelBuffer, milliseconds: Double), header: JPEGHeader,
                                  plan: ResizePlan, options: ResizeOptions, colour: ColourTransform?,
                                  cancel: CancellationFlag?) -> (image: EncodedImage, timings: StageTimings)? {
        var clock = Stopwatch()
        return try? { () throws(ImagingError) -> (image: EncodedImage, timings: StageTimings)? in
            let pixels = thumbnail.pixels
            let (tw, th) = (pixels.width, pixels.height)
            var timings = StageTimings(decodeMilliseconds: thumbnail.milliseconds)
            let region = Self.scale(plan.region, fromWidth: header.width, fromHeight: header.height, toWidth: tw, toHeight: th)
            // Never enlarge the thumbnail: the degraded result may be smaller than the final.
            let factor = min(1, Double(region.width) / Double(plan.storedOutputWidth),
                             Double(region.height) / Double(plan.storedOutputHeight))
            let width = max(1, Int((Double(plan.storedOutputWidth) * factor).rounded()))
            let height = max(1, Int((Double(plan.storedOutputHeight) * factor).rounded()))
            let resized = try Resampler.resample(pixels, region: region, width: width, height: height,
                                                 filter: .lanczos3, cancel: cancel, allocator: allocator)
            var upright = try header.orientation.apply(to: resized, allocator: allocator)
            // The thumbnail shares the image's colour space (an EXIF thumbnail has no profile
            // of its own).
            if let colour, colour.inputChannels == upright.channels {
                upright = try colour.apply(upright, allocator: allocator, cancel: cancel)
            }
            timings.resizeMilliseconds = clock.lap()
            let image = try Encoder.encode(upright, format: options.outputFormat(hasAlpha: false).format,
                                           quality: degradedQuality, progressive: false, chroma444: options.chroma444,
                                           lossless: options.lossless,
                                           iccProfile: upright.channels == header.decodedChannels
                                               ? Self.keptProfile(header, options) : nil,
                                           allocator: allocator, maxAVIFPixels: limits.maxAVIFPixels)
            timings.encodeMilliseconds = clock.lap()
            return (image, timings)
        }()
    }

    /// Where `r`, a rectangle of a `sourceWidth`×`sourceHeight` JPEG, lies on its decode at
    /// `numerator`/8 of `decoded` pixels: the decoded pixels it touches, and the exact span of
    /// the picture within them. libjpeg decodes `⌈size · numerator / 8⌉` pixels, pixel `j`
    /// covering source pixels `8j / numerator` to `8(j + 1) / numerator`, so the last one lies
    /// partly beyond the image, and taking the whole decode for the whole image would stretch
    /// the picture by that part (a fifth of an output pixel at the bottom of a 2403-row photo
    /// decoded at 1/2 and resized to 447 rows: 47.5 dB against an exact resize instead of
    /// 57.6). Without a reduction (or for a decode of another size), as `scale`.
    static func decodedWindow(_ r: PixelRect, sourceWidth: Int, sourceHeight: Int, decoded: PixelBuffer,
                              numerator: Int) -> (region: PixelRect, span: SourceSpan?) {
        guard numerator < 8,
              decoded.width == ResizePlan.scaledLength(sourceWidth, numerator: numerator),
              decoded.height == ResizePlan.scaledLength(sourceHeight, numerator: numerator) else {
            return (scale(r, fromWidth: sourceWidth, fromHeight: sourceHeight, toWidth: decoded.width,
                          toHeight: decoded.height), nil)
        }
        func axis(_ start: Int, _ length: Int, _ size: Int) -> (first: Int, count: Int, origin: Double, extent: Double) {
            let from = Double(start * numerator) / 8, to = Double((start + length) * numerator) / 8
            let first = Int(from.rounded(.down)), end = min(size, max(first + 1, Int(to.rounded(.up))))
            return (first, end - first, from - Double(first), min(to, Double(end)) - from)
        }
        let x = axis(r.x, r.width, decoded.width), y = axis(r.y, r.height, decoded.height)
        let region = PixelRect(x: x.first, y: y.first, width: x.count, height: y.count)
        let span = SourceSpan(x: x.origin, y: y.origin, width: x.extent, height: y.extent)
        let whole = SourceSpan(x: 0, y: 0, width: Double(x.count), height: Double(y.count))
        return (region, span == whole ? nil : span)
    }

    /// Maps a rectangle of a `fromWidth`×`fromHeight` image onto the same image at another
    /// size, rounding outwards and clamping to the bounds.
    static func scale(_ r: PixelRect, fromWidth: Int, fromHeight: Int, toWidth: Int, toHeight: Int) -> PixelRect {
        if fromWidth == toWidth && fromHeight == toHeight { return r }
        let x0 = r.x * toWidth / fromWidth, y0 = r.y * toHeight / fromHeight
        let x1 = min(toWidth, ((r.x + r.width) * toWidth + fromWidth - 1) / fromWidth)
        let y1 = min(toHeight, ((r.y + r.height) * toHeight + fromHeight - 1) / fromHeight)
        return PixelRect(x: x0, y: y0, width: max(1, x1 - x0), height: max(1, y1 - y0))
    }
}

extension ImagePipeline {
    /// `run` over a mapped file, whose pages a decoder reading it once (PNG) gives back as it
    /// goes.
    public func run(_ file: MappedFile, options: ResizeOptions, delivery: Delivery = .final,
                    cancel: CancellationFlag? = nil, emit: (StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        defer { withExtendedLifetime(file) {} }
        try prepare(file.bytes, options: options, delivery: delivery, cancel: cancel, colour: true, releasingRead: true)
            .run(emit: emit)
    }

    /// `run` over an array of bytes.
    public func run(_ input: [UInt8], options: ResizeOptions, delivery: Delivery = .final,
                    cancel: CancellationFlag? = nil, emit: (StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        try withBytes(input) { raw throws(ImagingError) in
            try run(raw, options: options, delivery: delivery, cancel: cancel, emit: emit)
        }
    }

    /// What the header says, without decoding a pixel: size, orientation, colour, profile,
    /// thumbnail. Checks the limits like a resize would.
    public func info(of input: UnsafeRawBufferPointer, failOn: FailOn = .error) throws(ImagingError) -> ImageInfo {
        let format = try InputFormat.detect(input, limits: limits)
        if format != .jpeg {
            let header = try RasterDecoders.make(format, data: input, limits: limits, cancel: nil, failOn: failOn).header
            let (width, height) = header.orientedSize
            return ImageInfo(
                format: format.rawValue, width: width, height: height, orientation: header.orientation.rawValue,
                channels: header.channels, hasAlpha: header.hasAlpha, bitDepth: header.bitDepth,
                colorSpace: header.colorSpace, profileDescription: header.iccProfile.map(ICCProfile.init)?.description,
                profileBytes: header.iccProfile?.count ?? 0, progressive: header.interlaced,
                hasEmbeddedThumbnail: header.hasThumbnail, byteSize: input.count)
        }
        let header = try header(of: input, failOn: failOn)
        let (width, height) = header.orientedSize
        let profile = header.iccProfile.map(ICCProfile.init)
        return ImageInfo(
            format: "jpeg", width: width, height: height, orientation: header.orientation.rawValue,
            channels: header.decodedChannels, hasAlpha: false, bitDepth: header.precision,
            colorSpace: header.colorSpace.rawValue, profileDescription: profile?.description,
            profileBytes: header.iccProfile?.count ?? 0, progressive: header.progressive,
            hasEmbeddedThumbnail: header.exif.thumbnail != nil, byteSize: input.count,
            hasGainMap: GainMapSource.find(in: input) != nil)
    }

    /// Reads only the header (and EXIF) of a JPEG, checking the limits; damage in the header
    /// fails as `failOn` says.
    public func header(of input: UnsafeRawBufferPointer, failOn: FailOn = .error) throws(ImagingError) -> JPEGHeader {
        try JPEGDecoder(data: input, limits: limits, cancel: nil, failOn: failOn).header
    }
}

/// One resize whose JPEG header has been read and whose plan and peak memory are known,
/// before any pixel memory has been allocated (see `ImagePipeline.prepare`).
///
/// Single use, on one thread at a time; it reads the input the pipeline was given, which
/// must stay valid until `run` returns or the value is dropped.
public final class PreparedResize {
    public let plan: ResizePlan
    /// An upper bound of the memory `run` will need at its peak, the input included.
    public internal(set) var memoryEstimate: MemoryEstimate
    let pipeline: ImagePipeline
    let source: Source
    let options: ResizeOptions
    let delivery: Delivery
    let cancel: CancellationFlag?
    /// Converts the output to sRGB from the embedded profile; nil when there is none to apply.
    var colour: ColourTransform?
    /// For a non-JPEG source: the reduction applied while decoding.
    var shrink = 1
    /// Said in every result (see `StageResult.notes`).
    var notes: [String] = []
    /// Whether the embedded profile is applied (tests compare with it off).
    var colourManaged = true
    /// The source's HDR gain map, to keep or apply in the final result.
    var gainMap: PreparedGainMap?
    /// Called on `run`'s thread, before any result, with the placeholder: at most once, and
    /// not at all when nil (the default: then none is made) or when the run fails first.
    public var onPlaceholder: ((MadePlaceholder) -> Void)?
    private var placeholderSent = false
    private var started = ContinuousClock.now
    private var hasRun = false

    enum Source {
        case jpeg(JPEGDecoder)
        case raster(any RasterDecoder)
    }

    init(pipeline: ImagePipeline, source: Source, plan: ResizePlan, options: ResizeOptions, delivery: Delivery,
         cancel: CancellationFlag?, estimate: MemoryEstimate) {
        self.pipeline = pipeline
        self.source = source
        self.plan = plan
        self.options = options
        self.delivery = delivery
        self.cancel = cancel
        memoryEstimate = estimate
    }

    /// The JPEG header, for a JPEG source.
    public var header: JPEGHeader? {
        if case .jpeg(let decoder) = source { return decoder.header }
        return nil
    }

    /// The header of a PNG, WebP or HEIF source.
    public var rasterHeader: RasterHeader? {
        if case .raster(let decoder) = source { return decoder.header }
        return nil
    }

    /// Decodes, resizes and encodes, calling `emit` on this thread once per result, degraded
    /// first; the last call has `isTerminal == true`. Call it once.
    public func run(emit: (StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        precondition(!hasRun, "a prepared resize runs once")
        hasRun = true
        started = .now
        // Owned here so that the big buffer is freed off this thread, whatever the outcome.
        var decoded: PixelBuffer?
        defer { BufferReaper.release(&decoded) }
        switch source {
        case .jpeg(let decoder): try pipeline.run(self, decoder: decoder, decoded: &decoded, emit: emit)
        case .raster(let decoder): try pipeline.runRaster(self, decoder: decoder, decoded: &decoded, emit: emit)
        }
    }
}

extension PreparedResize {
    /// Makes and hands over the placeholder from `pixels` (the whole image at another size,
    /// premultiplied when it has four channels), unless one was sent or none is wanted.
    func offerPlaceholder(_ pixels: PixelBuffer, sourceWidth: Int, sourceHeight: Int, orientation: Orientation,
                          source: DegradedSource,
                          convert: (PixelBuffer) throws(ImagingError) -> PixelBuffer) throws(ImagingError) {
        guard let onPlaceholder, !placeholderSent else { return }
        placeholderSent = true
        let region = ImagePipeline.scale(plan.region, fromWidth: sourceWidth, fromHeight: sourceHeight,
                                         toWidth: pixels.width, toHeight: pixels.height)
        // A placeholder that cannot be made (no memory for its small buffers, a profile that
        // fails) is left out: the results do not depend on it. A cancel still ends the run.
        let hash: [UInt8]
        do throws(ImagingError) {
            hash = try pipeline.thumbHash(pixels, region: region, orientation: orientation, cancel: cancel, convert: convert)
        } catch where error.code == .cancelled {
            throw error
        } catch {
            return
        }
        try cancel?.check()
        let elapsed = ContinuousClock.now - started
        let (seconds, attoseconds) = elapsed.components
        onPlaceholder(MadePlaceholder(placeholder: Placeholder(width: plan.outputWidth, height: plan.outputHeight,
                                                               thumbHash: hash),
                                      source: source, milliseconds: Double(seconds) * 1e3 + Double(attoseconds) * 1e-15))
    }
}

/// Monotonic lap timer.
struct Stopwatch {
    private var start = ContinuousClock.now

    mutating func reset() { start = .now }

    /// Milliseconds since the last lap (or reset), starting a new lap.
    mutating func lap() -> Double {
        let now = ContinuousClock.now
        let elapsed = now - start
        start = now
        let (seconds, attoseconds) = elapsed.components
        return Double(seconds) * 1e3 + Double(attoseconds) * 1e-15
    }
}

/// `Array.withUnsafeBytes` keeping the typed error.
func withBytes<R>(_ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(ImagingError) -> R) throws(ImagingError) -> R {
    var result: Result<R, ImagingError>?
    bytes.withUnsafeBytes { raw in result = Result { () throws(ImagingError) in try body(raw) } }
    return try result!.get()
}
