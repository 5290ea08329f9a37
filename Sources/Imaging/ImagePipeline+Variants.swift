import ImageModel

// Several outputs of one image from one decode (a responsive site's srcset: three widths in
// WebP and JPEG). The image is decoded once, at the scale its largest output needs; the outputs
// are made largest first, each resampled from the smallest buffer already made of the same part
// of the picture at twice the output's density (the headroom a single resize keeps after
// shrink-on-load, within 5 %), else from the decoded buffer; outputs of the same geometry share
// one resampled, oriented and converted buffer. Each is encoded and handed over as soon as it
// is made. Against the direct resize (Lanczos-3 from the full-size decode) every output of the
// photos in VariantTests is above 51 dB, most above what its own single resize reaches.

/// Several resizes of one image whose header has been read and whose plans and peak memory are
/// known, before any pixel memory is allocated (see `ImagePipeline.prepareVariants`). Single
/// use; the input must stay valid until `run` returns.
public final class PreparedVariants {
    /// One plan per variant, in the order given.
    public let plans: [ResizePlan]
    /// An upper bound of the memory `run` needs at its peak, the input included.
    public internal(set) var memoryEstimate: MemoryEstimate
    let pipeline: ImagePipeline
    let source: PreparedResize.Source
    let variants: [ResizeOptions]
    let cancel: CancellationFlag?
    /// JPEG: the conversion the embedded profile calls for (each variant may keep the profile).
    var colour: ColourTransform?
    /// Raster formats: the reduction while decoding, and whether the profile is applied.
    var shrink = 1
    var colourManaged = true
    /// Said in every variant's result.
    var notes: [String] = []
    /// JPEG: each variant's gain map, when it keeps or applies one, and the scale the map is
    /// decoded at, once for all of them: the largest any of them needs.
    var gainMaps: [PreparedGainMap?] = []
    var gainMapNumerator = 8
    /// How many times `run` decoded the gain map (at most once).
    private(set) var gainMapDecodes = 0
    private var hasRun = false

    init(pipeline: ImagePipeline, source: PreparedResize.Source, plans: [ResizePlan], variants: [ResizeOptions],
         cancel: CancellationFlag?, estimate: MemoryEstimate) {
        self.pipeline = pipeline
        self.source = source
        self.plans = plans
        self.variants = variants
        self.cancel = cancel
        memoryEstimate = estimate
    }

    /// Decodes once and makes every variant, calling `emit(index, result)` on this thread as
    /// each is encoded (largest first); the last call has `isTerminal == true`. Call it once.
    public func run(emit: (Int, StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        precondition(!hasRun, "prepared variants run once")
        hasRun = true
        var decoded: PixelBuffer?
        defer { BufferReaper.release(&decoded) }
        switch source {
        case .jpeg(let decoder): try pipeline.runVariants(self, decoder: decoder, decoded: &decoded, emit: emit)
        case .raster(let decoder): try pipeline.runRasterVariants(self, decoder: decoder, emit: emit)
        }
    }

    func countGainMapDecode() { gainMapDecodes += 1 }

    /// The order variants are made in: the most output pixels first (ties in the order given).
    var order: [Int] {
        plans.indices.sorted {
            let (a, b) = (plans[$0].storedOutputWidth * plans[$0].storedOutputHeight,
                          plans[$1].storedOutputWidth * plans[$1].storedOutputHeight)
            return a != b ? a > b : $0 < $1
        }
    }
}

extension ImagePipeline {
    /// The most outputs one request may name.
    public static let maxVariants = 8

    /// Reads the header once and plans every variant (1 to `maxVariants`); they must agree on
    /// the decode policy (`failOn`), since one decode serves them all.
    public func prepareVariants(_ input: UnsafeRawBufferPointer, variants: [ResizeOptions],
                                cancel: CancellationFlag? = nil) throws(ImagingError) -> PreparedVariants {
        guard (1...Self.maxVariants).contains(variants.count) else {
            throw ImagingError(.invalidArgument, "\(variants.count) variants: from 1 to \(Self.maxVariants) are allowed")
        }
        guard variants.allSatisfy({ $0.failOn == variants[0].failOn }) else {
            throw ImagingError(.invalidArgument, "the variants ask for different fail_on levels; one decode serves them all")
        }
        let format = try InputFormat.detect(input, limits: limits)
        if format != .jpeg { return try prepareRasterVariants(format, input, variants: variants, cancel: cancel) }
        let decoder = try JPEGDecoder(data: input, limits: limits, cancel: cancel, failOn: variants[0].failOn)
        var notes: [String] = []
        let colour = Self.colourTransform(for: decoder.header, notes: &notes)
        if colour?.inputChannels == 4 { decoder.keepCMYK() }
        let header = decoder.header
        var plans: [ResizePlan] = []
        for options in variants {
            let plan = try ResizePlan.make(sourceWidth: header.width, sourceHeight: header.height,
                                           orientation: header.orientation, options: options, headroom: headroom)
            try checkOutput(plan, options: options, hasAlpha: false)
            plans.append(plan)
        }
        // One decode, at the largest scale any variant needs.
        let scale = plans.map(\.scaleNumerator).max()!
        var estimates: [MemoryEstimate] = []
        var kept = 0
        for (plan, options) in zip(plans, variants) {
            var atScale = plan
            atScale.scaleNumerator = scale
            estimates.append(MemoryEstimate(header: header, thumbnail: nil, plan: atScale, options: options, delivery: .final,
                                            inputBytes: input.count))
            kept += Self.keptBytes(plan, channels: header.decodedChannels, profile: header.iccProfile, options: options)
        }
        var estimate = estimates.max { $0.bytes < $1.bytes }!
        estimate.bytes += kept
        let prepared = PreparedVariants(pipeline: self, source: .jpeg(decoder), plans: plans, variants: variants,
                                        cancel: cancel, estimate: estimate)
        prepared.colour = colour
        if let found = GainMapSource.find(in: input) {
            for (plan, options) in zip(plans, variants) {
                var gain: PreparedGainMap?
                if options.gainMap != .drop {
                    gain = prepareGainMap(found, input: input, header: header, plan: plan, options: options, cancel: cancel,
                                          notes: &notes)
                }
                prepared.gainMaps.append(gain)
                // Each variant's map counted with a decode of its own: one decode at the largest
                // scale, held for all of them, is one of those.
                prepared.memoryEstimate.bytes += gain?.memoryBytes ?? 0
            }
            prepared.gainMapNumerator = prepared.gainMaps.compactMap { $0?.plan.scaleNumerator }.max() ?? 8
        }
        prepared.notes = Array(Set(notes)).sorted()
        return prepared
    }

    /// Refuses an output over the pixel limit, or an AVIF over the AVIF limit, before decoding.
    func checkOutput(_ plan: ResizePlan, options: ResizeOptions, hasAlpha: Bool) throws(ImagingError) {
        if plan.outputWidth * plan.outputHeight > limits.maxPixels {
            throw ImagingError(.tooLarge, "the output would be \(plan.outputWidth)×\(plan.outputHeight), "
                               + "above the limit of \(limits.maxPixels) pixels")
        }
        if (try? options.outputFormat(hasAlpha: hasAlpha).format) == .avif {
            try Encoder.checkAVIFSize(width: plan.outputWidth, height: plan.outputHeight, limit: limits.maxAVIFPixels)
        }
    }

    /// What a variant leaves alive until the run ends: its resampled buffer (a source for the
    /// smaller ones), its oriented and converted copy (for others of its size) and its encoded
    /// output, at most as large as its pixels plus headers.
    static func keptBytes(_ plan: ResizePlan, channels: Int, profile: [UInt8]?, options: ResizeOptions) -> Int {
        let pixels = plan.storedOutputWidth * plan.storedOutputHeight * channels
        return 3 * pixels + (64 << 10) + (options.keepProfile ? profile?.count ?? 0 : 0)
    }

    func prepareRasterVariants(_ format: InputFormat, _ input: UnsafeRawBufferPointer, variants: [ResizeOptions],
                               cancel: CancellationFlag?) throws(ImagingError) -> PreparedVariants {
        let decoder = try RasterDecoders.make(format, data: input, limits: limits, cancel: cancel,
                                              failOn: variants[0].failOn, releasingRead: false)
        let header = decoder.header
        var plans: [ResizePlan] = []
        var shrink = decoder.maxShrink
        for options in variants {
            var plan = try ResizePlan.make(sourceWidth: header.width, sourceHeight: header.height,
                                           orientation: header.orientation, options: options, headroom: headroom)
            plan.scaleNumerator = 8
            try checkOutput(plan, options: options, hasAlpha: header.hasAlpha)
            plans.append(plan)
            shrink = min(shrink, Self.rasterShrink(region: plan.region, outputWidth: plan.storedOutputWidth,
                                                   outputHeight: plan.storedOutputHeight, headroom: headroom,
                                                   maxShrink: decoder.maxShrink))
        }
        var notes = header.notes
        if !variants.allSatisfy(\.keepProfile), let profile = header.iccProfile {
            _ = Self.transform(profile, channels: header.channels == 1 ? 1 : 3, alpha: false, notes: &notes)
        }
        var estimate = zip(plans, variants).map { plan, options in
            MemoryEstimate(raster: header, plan: plan, shrink: shrink, options: options, delivery: .final,
                           inputBytes: input.count + header.inputCopyBytes, placeholder: false)
        }.max { $0.bytes < $1.bytes }!
        estimate.bytes += zip(plans, variants).reduce(0) { $0 + Self.keptBytes($1.0, channels: 4, profile: header.iccProfile, options: $1.1) }
        let prepared = PreparedVariants(pipeline: self, source: .raster(decoder), plans: plans, variants: variants,
                                        cancel: cancel, estimate: estimate)
        prepared.shrink = shrink
        prepared.notes = notes
        return prepared
    }

    // MARK: Running

    func runVariants(_ job: PreparedVariants, decoder: JPEGDecoder, decoded: inout PixelBuffer?,
                     emit: (Int, StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        var clock = Stopwatch()
        let header = decoder.header, cancel = job.cancel
        let oriented = header.orientedSize
        let numerator = job.plans.map(\.scaleNumerator).max()!
        decoded = try decoder.decode(scaleNumerator: numerator)
        var timings = StageTimings(decodeMilliseconds: clock.lap())
        // Resampled buffers (stored orientation, the source's colours), with the part of the
        // stored image each holds: sources for the smaller variants.
        var made: [(region: PixelRect, pixels: PixelBuffer)] = []
        defer {
            while !made.isEmpty {
                var pixels: PixelBuffer? = made.removeLast().pixels
                BufferReaper.release(&pixels)
            }
        }
        // The gain map, decoded for the first variant that keeps or applies it, for all.
        var mapDecoded: PixelBuffer?
        defer { BufferReaper.release(&mapDecoded) }
        var ready: [Ready] = []
        defer {
            while !ready.isEmpty {
                var pixels: PixelBuffer? = ready.removeLast().pixels
                BufferReaper.release(&pixels)
            }
        }
        let order = job.order
        for (position, index) in order.enumerated() {
            let plan = job.plans[index], options = job.variants[index]
            let resized = try resampled(plan, made: made, decoded: decoded!, numerator: numerator,
                                        sourceWidth: header.width, sourceHeight: header.height, cancel: cancel)
            if !made.contains(where: { $0.pixels.sharesStorage(with: resized) }) { made.append((plan.region, resized)) }
            // Oriented and converted once per geometry and colour handling (a WebP and a JPEG of
            // one size share it). Buffers are shared by reference: releasing one another
            // variant still holds only drops this reference.
            let colour = options.keepProfile && job.colour?.inputChannels != 4 ? nil : job.colour
            let key = Ready.Key(region: plan.region, width: plan.storedOutputWidth, height: plan.storedOutputHeight,
                                converted: colour != nil)
            var upright: PixelBuffer?
            if let done = ready.first(where: { $0.key == key }) {
                upright = done.pixels
            } else {
                upright = try header.orientation.apply(to: resized, allocator: allocator)
                if let colour {
                    var converted: PixelBuffer? = try colour.apply(upright!, allocator: allocator, cancel: cancel)
                    swap(&upright, &converted)
                    BufferReaper.release(&converted)
                }
                ready.append(Ready(key: key, pixels: upright!))
            }
            defer { BufferReaper.release(&upright) }
            var notes = job.notes
            let prepared = job.gainMaps.isEmpty ? nil : job.gainMaps[index]
            let hadMap = mapDecoded != nil
            let gain = try prepared.flatMap { (prepared) throws(ImagingError) in
                try gainMapOutput(prepared, decoded: &mapDecoded, numerator: job.gainMapNumerator,
                                  orientation: header.orientation, quality: options.quality, cancel: cancel, notes: &notes)
            }
            if !hadMap && mapDecoded != nil { job.countGainMapDecode() }
            var image = try finishUpright(&upright, header: header, options: options, colour: nil,
                                          quality: options.quality, cancel: cancel, timings: &timings, clock: &clock,
                                          toneMap: gain?.toneMap)
            image = Self.attaching(gain, source: prepared?.source, to: image)
            if let format = try? options.outputFormat(hasAlpha: false).format,
               let dropped = Encoder.embeddable(Self.keptProfile(header, options), in: format).note {
                notes.append(dropped)
            }
            try cancel?.check()
            try emit(index, StageResult(stage: .final, isTerminal: position == order.count - 1, image: image,
                                        degradedSource: nil, timings: timings, sourceWidth: oriented.width,
                                        sourceHeight: oriented.height, notes: notes))
            timings = StageTimings()
            clock.reset()
        }
    }

    /// A variant's output oriented and converted, ready to encode, for the variants after it
    /// that have the same geometry and colour handling.
    struct Ready {
        struct Key: Equatable {
            var region: PixelRect
            var width: Int, height: Int
            var converted: Bool
        }
        var key: Key
        var pixels: PixelBuffer
    }

    /// The plan's output in stored orientation: resampled from the smallest buffer already made
    /// of its region with twice its pixel density, within 5 % (or is exactly it), else from the
    /// decoded buffer (made at `numerator`/8).
    func resampled(_ plan: ResizePlan, made: [(region: PixelRect, pixels: PixelBuffer)], decoded: PixelBuffer,
                   numerator: Int, sourceWidth: Int, sourceHeight: Int,
                   cancel: CancellationFlag?) throws(ImagingError) -> PixelBuffer {
        let (width, height) = (plan.storedOutputWidth, plan.storedOutputHeight)
        var source = decoded
        var (region, span) = Self.decodedWindow(plan.region, sourceWidth: sourceWidth, sourceHeight: sourceHeight,
                                                decoded: decoded, numerator: numerator)
        for candidate in made {
            if candidate.region == plan.region && candidate.pixels.width == width && candidate.pixels.height == height {
                return candidate.pixels
            }
            guard let inside = Self.cascadeRegion(plan, in: candidate.region, size: (candidate.pixels.width,
                                                                                    candidate.pixels.height),
                                                  headroom: headroom),
                  candidate.pixels.width * candidate.pixels.height < source.width * source.height else { continue }
            source = candidate.pixels
            region = inside
            span = nil
        }
        if region == PixelRect(x: 0, y: 0, width: source.width, height: source.height) && span == nil
            && source.width == width && source.height == height {
            return source
        }
        return try Resampler.resample(source, region: region, span: span, width: width, height: height,
                                      filter: .lanczos3, cancel: cancel, allocator: allocator)
    }

    /// The whole of a buffer of `size` pixels holding `held` of the stored image, when that is
    /// exactly the plan's region at `headroom` times the output's density on both axes; nil
    /// otherwise. Only the same region: another crop would start between the buffer's pixels,
    /// and the whole-pixel rectangle around it shifts the picture by up to a pixel of the
    /// buffer (measured: a 300×100 cover crop fell from 48 to 41 dB against the direct resize).
    static func cascadeRegion(_ plan: ResizePlan, in held: PixelRect, size: (width: Int, height: Int),
                              headroom: Double) -> PixelRect? {
        let r = plan.region
        guard r == held else { return nil }
        // Within 5 %: a 1280 px output is a source for a 640 px one even when rounding left it
        // a pixel short of exactly twice (the quality is the same; see VariantTests).
        let densityX = Double(size.width) / Double(held.width), densityY = Double(size.height) / Double(held.height)
        let needed = 0.95 * headroom
        guard densityX >= needed * Double(plan.storedOutputWidth) / Double(r.width),
              densityY >= needed * Double(plan.storedOutputHeight) / Double(r.height) else { return nil }
        return PixelRect(x: 0, y: 0, width: size.width, height: size.height)
    }

    func runRasterVariants(_ job: PreparedVariants, decoder: any RasterDecoder,
                           emit: (Int, StageResult) throws(ImagingError) -> Void) throws(ImagingError) {
        var clock = Stopwatch()
        let header = decoder.header
        let oriented = header.orientedSize
        var raster = try decoder.decode(shrink: job.shrink)
        if raster.pixels.channels == 4 && !raster.translucent {
            raster.pixels = try Alpha.droppingAlpha(raster.pixels, allocator: allocator)
        }
        defer {
            var pixels: PixelBuffer? = raster.pixels
            BufferReaper.release(&pixels)
        }
        var timings = StageTimings(decodeMilliseconds: clock.lap())
        let order = job.order
        for (position, index) in order.enumerated() {
            let made = try finishRaster(raster, .final, plan: job.plans[index], options: job.variants[index],
                                        colourManaged: job.colourManaged, cancel: job.cancel, header: header,
                                        thumbnail: false, timings: &timings, clock: &clock)
            try job.cancel?.check()
            try emit(index, StageResult(stage: .final, isTerminal: position == order.count - 1, image: made.image,
                                        degradedSource: nil, timings: timings, sourceWidth: oriented.width,
                                        sourceHeight: oriented.height, notes: job.notes + made.notes))
            timings = StageTimings()
            clock.reset()
        }
    }
}

extension PixelBuffer {
    /// Whether both are views of the same memory (a variant reusing another's buffer).
    func sharesStorage(with other: PixelBuffer) -> Bool {
        withUnsafeBufferPointer { a in other.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress } }
    }
}
