import ImageModel

// A JPEG's HDR gain map through a resize (see GainMap.swift): planned with the primary, from
// the same region and orientation; decoded, resampled and encoded just before the final, or
// applied to it. A gain map that cannot be read is left out with a note: the SDR image alone is
// still a correct result.

/// A gain map whose header has been read and whose resize is planned.
final class PreparedGainMap {
    let source: GainMapSource
    let decoder: JPEGDecoder
    let mode: GainMapMode
    /// In the map's own pixels: the region matching the primary's, the stored output size, and
    /// its DCT shrink.
    let plan: ResizePlan
    /// What the map adds to the run's peak memory.
    let memoryBytes: Int

    init(source: GainMapSource, decoder: JPEGDecoder, mode: GainMapMode, plan: ResizePlan, memoryBytes: Int) {
        self.source = source
        self.decoder = decoder
        self.mode = mode
        self.plan = plan
        self.memoryBytes = memoryBytes
    }
}

/// What the final result gets from the gain map.
struct GainMapOutput {
    /// `keep`: the resized map as a JPEG with its metadata, to append.
    var jpeg: [UInt8]?
    /// `apply` on an HDR base: the map at the output's size and orientation.
    var toneMap: (parameters: GainMapParameters, map: PixelBuffer)?
}

extension ImagePipeline {
    /// Plans the gain map's resize, or says (in `notes`) why it is left out.
    func prepareGainMap(_ source: GainMapSource, input: UnsafeRawBufferPointer, header: JPEGHeader, plan: ResizePlan,
                        options: ResizeOptions, cancel: CancellationFlag?, notes: inout [String]) -> PreparedGainMap? {
        let mode = options.gainMap
        if mode == .apply && source.parameters?.baseRenditionIsHDR != true {
            // The base of every UltraHDR from a phone: already the SDR rendition.
            notes.append("the HDR gain map is left out: the base image is already its SDR rendition")
            return nil
        }
        if mode == .keep, (try? options.outputFormat(hasAlpha: false).format) != .jpeg {
            notes.append("the HDR gain map is left out: only JPEG output carries one")
            return nil
        }
        // No larger than the primary, and within the limits like any image.
        var limits = limits
        limits.maxPixels = min(limits.maxPixels, header.width * header.height)
        let decoder: JPEGDecoder
        do throws(ImagingError) {
            decoder = try JPEGDecoder(data: UnsafeRawBufferPointer(rebasing: input[source.range]), limits: limits,
                                      cancel: cancel, failOn: options.failOn, metadata: false)
        } catch {
            notes.append("the HDR gain map is left out: it cannot be read (\(error.message))")
            return nil
        }
        let map = decoder.header
        guard map.decodedChannels == 1 || map.decodedChannels == 3 else {
            notes.append("the HDR gain map is left out: it has \(map.components) components, not 1 or 3")
            return nil
        }
        // The same part of the picture, at the map's scale; `apply` needs the map at the
        // output's size, `keep` keeps the map's proportion to the image.
        let region = Self.scale(plan.region, fromWidth: header.width, fromHeight: header.height,
                                toWidth: map.width, toHeight: map.height)
        var width = plan.storedOutputWidth, height = plan.storedOutputHeight
        if mode == .keep {
            width = max(1, Int((Double(width) * Double(map.width) / Double(header.width)).rounded()))
            height = max(1, Int((Double(height) * Double(map.height) / Double(header.height)).rounded()))
        }
        let shrink = ResizePlan.shrinkOnLoad(region: region, outputWidth: width, outputHeight: height, headroom: headroom)
        let (ow, oh) = header.orientation.orientedSize(width: width, height: height)
        let mapPlan = ResizePlan(outputWidth: ow, outputHeight: oh, region: region, storedOutputWidth: width,
                                 storedOutputHeight: height, scaleNumerator: shrink)
        var jpegOptions = options
        jpegOptions.format = .jpeg
        jpegOptions.accept = []
        // Kept, the output is written once more with the map after it, beside the encoder's buffer.
        let assembled = mode == .keep ? MemoryEstimate.encoding(.jpeg, width: plan.outputWidth, height: plan.outputHeight,
                                                                channels: header.decodedChannels, options: jpegOptions,
                                                                progressiveOutput: options.progressive).encoded : 0
        return PreparedGainMap(source: source, decoder: decoder, mode: mode, plan: mapPlan,
                               memoryBytes: assembled + MemoryEstimate.gainMapBytes(map, plan: mapPlan,
                                                                                   orientation: header.orientation,
                                                                                   options: jpegOptions))
    }

    /// Decodes and resizes the map for the final result, turned as the image is and encoded at
    /// `quality` (`keep`); nil, with a note, when it fails.
    /// `decoded` is the map decoded at `numerator`/8 (at least the plan's own scale): decoded
    /// here when nil and left there, so that the variants of one image decode their map once.
    func gainMapOutput(_ gain: PreparedGainMap, decoded: inout PixelBuffer?, numerator: Int, orientation: Orientation,
                       quality: Int, cancel: CancellationFlag?, notes: inout [String]) throws(ImagingError) -> GainMapOutput? {
        let plan = gain.plan
        do throws(ImagingError) {
            try cancel?.check()
            let header = gain.decoder.header
            if decoded == nil { decoded = try gain.decoder.decode(scaleNumerator: numerator) }
            let (region, span) = Self.decodedWindow(plan.region, sourceWidth: header.width, sourceHeight: header.height,
                                                    decoded: decoded!, numerator: numerator)
            var map = decoded!
            if region != PixelRect(x: 0, y: 0, width: map.width, height: map.height) || span != nil
                || map.width != plan.storedOutputWidth || map.height != plan.storedOutputHeight {
                map = try Resampler.resample(map, region: region, span: span, width: plan.storedOutputWidth,
                                             height: plan.storedOutputHeight, filter: .lanczos3, cancel: cancel,
                                             allocator: allocator)
            }
            // The primary's orientation: the map has none of its own.
            map = try orientation.apply(to: map, allocator: allocator)
            switch gain.mode {
            case .apply:
                return GainMapOutput(toneMap: (gain.source.parameters ?? GainMapParameters(), map))
            case .keep:
                let encoded = try Encoder.encode(map, format: .jpeg, quality: quality, chroma444: true,
                                                 cancel: cancel, allocator: allocator)
                return GainMapOutput(jpeg: GainMapContainer.gainMapJPEG(encoded.bytes, source: gain.source))
            case .drop:
                return nil
            }
        } catch where error.code == .cancelled {
            throw error
        } catch {
            notes.append("the HDR gain map is left out: \(error.message)")
            return nil
        }
    }

    /// The final JPEG with the kept map after it, indexed; the image itself otherwise.
    static func attaching(_ output: GainMapOutput?, source: GainMapSource?, to image: EncodedImage) -> EncodedImage {
        guard let map = output?.jpeg, let source else { return image }
        let bytes = image.withUnsafeBytes { GainMapContainer.assemble(primary: $0, gainMap: map, source: source) }
        return EncodedImage(bytes: bytes, width: image.width, height: image.height, format: image.format)
    }
}

extension MemoryEstimate {
    /// The gain map's decode, resize and encode, counted on top of the final stage's peak (it
    /// runs while the primary's decoded buffer is alive), and its output, held until the end.
    static func gainMapBytes(_ map: JPEGHeader, plan: ResizePlan, orientation: Orientation,
                             options: ResizeOptions) -> Int {
        let channels = map.decodedChannels
        let decodedWidth = ResizePlan.scaledLength(map.width, numerator: plan.scaleNumerator)
        let decodedHeight = ResizePlan.scaledLength(map.height, numerator: plan.scaleNumerator)
        let decoder = decoderWorking(map) + (map.multiScan ? map.coefficientBytes : 0)
        let (final, _) = stages(sourceWidth: map.width, sourceHeight: map.height, decodedWidth: decodedWidth,
                                decodedHeight: decodedHeight, channels: channels, orientation: orientation, plan: plan,
                                options: options)
        let peak = decoder + decodedWidth * decodedHeight * channels + final.peak + 2 * final.encodedOutput
        return peak + peak / 16
    }
}
