import ImageModel

// PNG, WebP, HEIC, AVIF, GIF and JPEG XL: decode (reduced while decoding where the format allows) →
// resample premultiplied → orient → straight alpha, colour to sRGB, flatten if the output
// format needs it → encode. The degraded result comes from a HEIF thumbnail item or from the
// decoded buffer, as for JPEG.

extension ImagePipeline {
    func prepareRaster(_ format: InputFormat, _ input: UnsafeRawBufferPointer, options: ResizeOptions,
                       delivery: Delivery, cancel: CancellationFlag?, colour managed: Bool,
                       releasingRead: Bool, placeholder: Bool) throws(ImagingError) -> PreparedResize {
        let decoder = try RasterDecoders.make(format, data: input, limits: limits, cancel: cancel, failOn: options.failOn,
                                              releasingRead: releasingRead)
        let header = decoder.header
        var plan = try ResizePlan.make(sourceWidth: header.width, sourceHeight: header.height,
                                       orientation: header.orientation, options: options, headroom: headroom)
        plan.scaleNumerator = 8
        if plan.outputWidth * plan.outputHeight > limits.maxPixels {
            throw ImagingError(.tooLarge, "the output would be \(plan.outputWidth)×\(plan.outputHeight), "
                               + "above the limit of \(limits.maxPixels) pixels")
        }
        let shrink = Self.rasterShrink(region: plan.region, outputWidth: plan.storedOutputWidth,
                                       outputHeight: plan.storedOutputHeight, headroom: headroom, maxShrink: decoder.maxShrink)
        var notes = header.notes
        // The transform is built now, for the channels the output will have (known only
        // after decoding for RGBA, which may turn out opaque): see `rasterColour`.
        if managed, !options.keepProfile, let profile = header.iccProfile {
            let channels = header.channels == 1 ? 1 : 3
            _ = Self.transform(profile, channels: channels, alpha: false, notes: &notes)
        }
        let estimate = MemoryEstimate(raster: header, plan: plan, shrink: shrink, options: options, delivery: delivery,
                                      inputBytes: input.count + header.inputCopyBytes, placeholder: placeholder)
        let prepared = PreparedResize(pipeline: self, source: .raster(decoder), plan: plan, options: options,
                                      delivery: delivery, cancel: cancel, estimate: estimate)
        prepared.shrink = shrink
        prepared.notes = notes
        prepared.colourManaged = managed
        return prepared
    }

    /// The largest whole reduction that keeps the decoded region `headroom` times the output
    /// on both axes (at most `maxShrink`).
    static func rasterShrink(region: PixelRect, outputWidth: Int, outputHeight: Int, headroom: Double,
                             maxShrink: Int) -> Int {
        let factor = min(Double(region.width) / (headroom * Double(outputWidth)),
                         Double(region.height) / (headroom * Double(outputHeight)))
        guard factor >= 2 else { return 1 }
        return min(maxShrink, Int(factor))
    }

    func runRaster(_ job: PreparedResize, decoder: any RasterDecoder, decoded: inout PixelBuffer?,
                   emit: (StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        var clock = Stopwatch()
        let header = decoder.header, delivery = job.delivery, cancel = job.cancel
        let oriented = header.orientedSize
        func result(_ stage: Stage, _ made: (image: EncodedImage, notes: [String]), _ source: DegradedSource?,
                    _ timings: StageTimings) -> StageResult {
            StageResult(stage: stage, isTerminal: stage == .final || delivery == .degraded, image: made.image,
                        degradedSource: source, timings: timings, sourceWidth: oriented.width,
                        sourceHeight: oriented.height, notes: job.notes + made.notes)
        }
        let wantsDegraded = delivery != .final
        var timings = StageTimings()
        var degradedSent = false
        let convert = { (image: PixelBuffer) throws(ImagingError) -> PixelBuffer in
            guard job.colourManaged, !job.options.keepProfile, let profile = header.iccProfile else { return image }
            var ignored: [String] = []  // said once, in `prepareRaster`
            guard let colour = Self.transform(profile, channels: image.channels, alpha: image.channels == 4,
                                              notes: &ignored) else { return image }
            return try colour.apply(image, allocator: self.allocator, cancel: cancel)
        }
        func offer(_ pixels: PixelBuffer, _ source: DegradedSource) throws(ImagingError) {
            try job.offerPlaceholder(pixels, sourceWidth: header.width, sourceHeight: header.height,
                                     orientation: header.orientation, source: source, convert: convert)
        }
        // A HEIF thumbnail, decoded once for the placeholder and the degraded result.
        var thumbnail = (wantsDegraded || job.onPlaceholder != nil) && header.hasThumbnail
            ? (try? decoder.decodeThumbnail()).flatMap { $0 }.flatMap { Self.sameAspect($0.pixels, header) ? $0 : nil } : nil
        if let thumbnail { try offer(thumbnail.pixels, .heifThumbnail) }

        if wantsDegraded, let thumbnail {
            var previewTimings = StageTimings(decodeMilliseconds: clock.lap())
            let made = try finishRaster(thumbnail, .degraded, job: job, header: header, thumbnail: true,
                                        timings: &previewTimings, clock: &clock)
            try cancel?.check()
            try emit(result(.degraded, made, .heifThumbnail, previewTimings))
            if delivery == .degraded { return }
            degradedSent = true
            clock.reset()
        }
        thumbnail = nil  // let go before the main decode
        var raster = try decoder.decode(shrink: job.shrink)
        // Declared but unused transparency costs a channel all the way: dropped here.
        if raster.pixels.channels == 4 && !raster.translucent {
            raster.pixels = try Alpha.droppingAlpha(raster.pixels, allocator: allocator)
        }
        decoded = raster.pixels
        timings.decodeMilliseconds = clock.lap()
        try offer(raster.pixels, .decodedBuffer)
        if wantsDegraded && !degradedSent {
            // The decode is the degraded result's: the final's timings count only what it adds.
            var previewTimings = timings
            let made = try finishRaster(raster, .degraded, job: job, header: header, thumbnail: false,
                                        timings: &previewTimings, clock: &clock)
            try cancel?.check()
            try emit(result(.degraded, made, .decodedBuffer, previewTimings))
            if delivery == .degraded { return }
            timings = StageTimings()
        }
        clock.reset()
        let made = try finishRaster(raster, .final, job: job, header: header, thumbnail: false, timings: &timings,
                                    clock: &clock)
        try cancel?.check()
        try emit(result(.final, made, nil, timings))
    }

    /// A thumbnail whose aspect ratio is the image's (within 2 %).
    static func sameAspect(_ thumbnail: PixelBuffer, _ header: RasterHeader) -> Bool {
        let aspect = Double(thumbnail.width) / Double(thumbnail.height)
        return abs(aspect / (Double(header.width) / Double(header.height)) - 1) < 0.02
    }

    /// Resamples the plan's region of `raster` for `stage`, orients it, makes its alpha
    /// straight (or flattens it), converts it to sRGB and encodes it.
    private func finishRaster(_ raster: DecodedRaster, _ stage: Stage, job: PreparedResize, header: RasterHeader,
                              thumbnail: Bool, timings: inout StageTimings,
                              clock: inout Stopwatch) throws(ImagingError) -> (image: EncodedImage, notes: [String]) {
        try finishRaster(raster, stage, plan: job.plan, options: job.options, colourManaged: job.colourManaged,
                         cancel: job.cancel, header: header, thumbnail: thumbnail, timings: &timings, clock: &clock)
    }

    /// As above, for one plan and options of several (variants).
    func finishRaster(_ raster: DecodedRaster, _ stage: Stage, plan: ResizePlan, options: ResizeOptions,
                      colourManaged: Bool, cancel: CancellationFlag?, header: RasterHeader, thumbnail: Bool,
                      timings: inout StageTimings,
                      clock: inout Stopwatch) throws(ImagingError) -> (image: EncodedImage, notes: [String]) {
        let source = raster.pixels
        let region = Self.scale(plan.region, fromWidth: header.width, fromHeight: header.height,
                                toWidth: source.width, toHeight: source.height)
        var width = plan.storedOutputWidth, height = plan.storedOutputHeight
        var filter = ResampleFilter.lanczos3
        if thumbnail {
            // Never enlarge a thumbnail: the degraded result may be smaller than the final.
            let factor = min(1, Double(region.width) / Double(width), Double(region.height) / Double(height))
            width = max(1, Int((Double(width) * factor).rounded()))
            height = max(1, Int((Double(height) * factor).rounded()))
        } else if stage == .degraded {
            filter = .triangle
            width = max(1, Int((Double(width) * Self.degradedScale).rounded()))
            height = max(1, Int((Double(height) * Self.degradedScale).rounded()))
        }
        var image: PixelBuffer
        if region == PixelRect(x: 0, y: 0, width: source.width, height: source.height)
            && source.width == width && source.height == height {
            image = source
        } else {
            image = try Resampler.resample(source, region: region, width: width, height: height, filter: filter,
                                           cancel: cancel, allocator: allocator)
        }
        image = try header.orientation.apply(to: image, allocator: allocator)
        var notes = raster.notes
        let translucent = raster.translucent && image.channels == 4
        let (format, flatten) = try options.outputFormat(hasAlpha: translucent)
        if image.channels == 4 && !translucent {
            image = try Alpha.droppingAlpha(image, allocator: allocator)
        } else if translucent {
            image = try Alpha.unpremultiplied(image, allocator: allocator)
        }
        if colourManaged, !options.keepProfile, let profile = header.iccProfile {
            // Translucent pixels are converted as RGBA (the alpha copied through), never as RGB.
            var ignored: [String] = []  // said once, in `prepareRaster`
            if let colour = Self.transform(profile, channels: image.channels, alpha: image.channels == 4, notes: &ignored) {
                image = try colour.apply(image, allocator: allocator, cancel: cancel)
            }
        }
        if flatten {
            image = try Alpha.flattened(image, onto: options.background, allocator: allocator)
            notes.append("transparency flattened onto \(options.background) for \(format.contentType)")
        }
        timings.resizeMilliseconds += clock.lap()
        try cancel?.check()
        let (kept, dropped) = Encoder.embeddable(options.keepProfile ? header.iccProfile : nil, in: format)
        if let dropped { notes.append(dropped) }
        let encoded = try Encoder.encode(image, format: format, quality: stage == .final ? options.quality : degradedQuality,
                                         progressive: stage == .final && options.progressive, chroma444: options.chroma444,
                                         lossless: options.lossless, iccProfile: format == .pnm ? nil : kept,
                                         cancel: cancel, allocator: allocator, maxAVIFPixels: limits.maxAVIFPixels)
        timings.encodeMilliseconds += clock.lap()
        return (encoded, notes)
    }
}
