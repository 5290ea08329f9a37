#if canImport(Glibc)
import Glibc
#endif
import CColour
import ImageModel

/// What a PNG, WebP, HEIF, GIF or JPEG XL decoder reads before decoding pixels.
public struct RasterHeader: Sendable, Equatable {
    public var format: InputFormat
    /// Size as stored, before orientation.
    public var width: Int
    public var height: Int
    /// From the file's EXIF (PNG, WebP) or codestream header (JPEG XL); HEIF's own rotation and mirroring are applied by
    /// the decoder, so its images come upright.
    public var orientation: Orientation = .up
    /// Channels of the decoded image: 1 grey, 3 RGB, 4 RGBA.
    public var channels: Int
    /// The file declares transparency (an alpha channel or a transparent colour).
    public var hasAlpha: Bool
    public var bitDepth: Int
    /// `gray`, `rgb` or `palette` (PNG), `ycbcr` (WebP lossy, HEIF), `argb` (WebP lossless),
    /// `palette` (GIF), `xyb` (JPEG XL lossy) or `rgb`/`gray` (JPEG XL lossless).
    public var colorSpace: String
    public var iccProfile: [UInt8]?
    /// PNG: Adam7 interlacing; GIF: the first image's rows stored in four passes.
    public var interlaced = false
    /// HEIF: the first embedded thumbnail's size.
    public var thumbnailWidth = 0
    public var thumbnailHeight = 0
    /// WebP, GIF, JPEG XL: an animation (its first frame is used). A GIF says so by its looping
    /// extension, read before the first image.
    public var animated = false
    /// What the decoder cannot honour, said in every result (see `StageResult.notes`).
    public var notes: [String] = []
    /// Bytes of copies of the input the decoder holds as long as the input (counted with it
    /// in the memory estimate): a cut HEIF or AVIF padded at `fail_on none`, an AVIF rewritten
    /// for libavif (its grid's tiles in order, its alpha tiles as a grid).
    public var inputCopyBytes = 0
    /// JPEG XL: extra channels besides alpha (depth, spot colours): decoded whole though not shown.
    public var extraPlanes = 0
    /// JPEG XL: the pixels of the largest layer that makes up the first frame. A layer may be
    /// larger than the image (it is cropped when blended), and libjxl decodes it whole.
    public var largestLayerPixels = 0

    public var orientedSize: (width: Int, height: Int) { orientation.orientedSize(width: width, height: height) }
    var hasThumbnail: Bool { thumbnailWidth > 0 && thumbnailHeight > 0 }
}

/// A decoded image: premultiplied when it has four channels.
struct DecodedRaster {
    var pixels: PixelBuffer
    /// Some pixel is less than fully opaque.
    var translucent: Bool
    /// What the result should say about the decode (rows a cut file did not have).
    var notes: [String] = []
}

/// A decoder of one non-JPEG image over bytes the caller keeps alive. Single use, one thread.
protocol RasterDecoder: AnyObject {
    var header: RasterHeader { get }
    /// The largest reduction `decode(shrink:)` performs while decoding (1: none).
    var maxShrink: Int { get }
    /// Decodes the image reduced `shrink` times on each axis (`ceil(size / shrink)` pixels),
    /// premultiplying RGBA. Checks `cancel` as the decoder allows.
    func decode(shrink: Int) throws(ImagingError) -> DecodedRaster
    /// Decodes the embedded thumbnail (HEIF), or nil when there is none.
    func decodeThumbnail() throws(ImagingError) -> DecodedRaster?
}

extension RasterDecoder {
    func decodeThumbnail() throws(ImagingError) -> DecodedRaster? { nil }
}

enum RasterDecoders {
    /// The decoder for `format`, its header read and its limits checked.
    static func make(_ format: InputFormat, data: UnsafeRawBufferPointer, limits: DecodeLimits,
                     cancel: CancellationFlag?, failOn: FailOn, releasingRead: Bool = false) throws(ImagingError) -> any RasterDecoder {
        let decoder: any RasterDecoder = switch format {
        case .png: try PNGDecoder(data: data, limits: limits, cancel: cancel, failOn: failOn, releasingRead: releasingRead)
        case .webp: try WebPDecoder(data: data, limits: limits, cancel: cancel, failOn: failOn)
        case .heic: try HEIFDecoder(data: data, limits: limits, cancel: cancel, failOn: failOn)
        case .avif: try AVIFDecoder(data: data, limits: limits, cancel: cancel, failOn: failOn)
        case .gif: try GIFDecoder(data: data, limits: limits, cancel: cancel, failOn: failOn)
        case .jxl: try JXLDecoder(data: data, limits: limits, cancel: cancel, failOn: failOn)
        case .jpeg: preconditionFailure("JPEG has its own decoder")
        }
        let header = decoder.header
        try checkPixels(header.width, header.height, limits: limits)
        if header.largestLayerPixels > limits.maxPixels {
            throw ImagingError(.tooLarge, "a layer of \(header.largestLayerPixels) pixels (the image is \(header.width)×"
                               + "\(header.height)) exceeds the limit of \(limits.maxPixels) pixels")
        }
        return decoder
    }

    static func checkPixels(_ width: Int, _ height: Int, limits: DecodeLimits) throws(ImagingError) {
        guard width > 0, height > 0 else {
            throw ImagingError(.corrupt, "the header gives an empty size (\(width)×\(height))")
        }
        let pixels = width.multipliedReportingOverflow(by: height)
        if pixels.overflow || pixels.partialValue > limits.maxPixels {
            throw ImagingError(.tooLarge, "\(width)×\(height) exceeds the limit of \(limits.maxPixels) pixels")
        }
    }

    /// How many times what a cut HEIF or AVIF has may be filled in with zeros (see `padded`).
    static let maxPaddingFactor = 4

    /// Colour given as code points (H.273, as in a HEIF `nclx` box or an AV1 sequence
    /// header): sRGB's (BT.709) primaries need nothing; others (Display P3, BT.2020, ...)
    /// become an ICC profile built from the chromaticities `xy` and the transfer curve,
    /// converted to sRGB like an embedded one. HDR transfers (PQ, HLG) have no such profile:
    /// the pixels are taken as sRGB, with a note.
    static func describeCodePoints(primaries: Int, transfer: Int, xy: [Double], into header: inout RasterHeader) {
        let names = [1: "BT.709", 9: "BT.2020", 11: "DCI-P3", 12: "Display P3"]
        let hdr = [16: "PQ", 18: "HLG"]
        if let curve = hdr[transfer] {
            header.notes.append("the image's \(curve) (HDR) transfer is not converted: its pixels are taken as sRGB")
            return
        }
        guard primaries != 1, primaries != 2 else { return }
        let description = "\(names[primaries] ?? "primaries \(primaries)") (nclx, transfer \(transfer))"
        var length = 0
        guard let bytes = ec_profile_from_primaries(xy, Int32(transfer), description, &length) else {
            header.notes.append("the image's colour code points (primaries \(primaries), transfer \(transfer)) are not "
                                + "converted: its pixels are taken as sRGB")
            return
        }
        header.iccProfile = Array(UnsafeBufferPointer(start: bytes, count: length))
        free(bytes)
    }

    /// A shim's message: the C string its fixed buffer holds.
    static func text(_ message: [CChar]) -> String {
        String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `ceil(length / shrink)`.
    static func shrunk(_ length: Int, _ shrink: Int) -> Int { (length + shrink - 1) / shrink }

    /// The EXIF orientation in a PNG `eXIf` or WebP `EXIF` chunk (a TIFF structure, sometimes
    /// behind an `Exif\0\0` header).
    static func orientation(exif: UnsafeRawBufferPointer) -> Orientation {
        var tiff = exif
        if tiff.starts(with: Array("Exif".utf8) + [0, 0]) { tiff = UnsafeRawBufferPointer(rebasing: tiff[6...]) }
        return EXIFMetadata(tiff: tiff).orientation
    }

    /// HEIC and AVIF at `fail_on none`: a cut file, padded with zeros to the length its boxes
    /// claim (at most the input limit), which libheif and libavif then read as whole; what
    /// the codec makes of the zeros is kept. Nil when the file is not cut or the level is
    /// stricter. The copy counts against the buffer limit.
    ///
    /// The copy is made while the header is read, before the worker admits the job's memory,
    /// so it is bounded by what is there: a file missing more than `maxPaddingFactor` times
    /// what it has (and more than 1 MiB) is refused as cut rather than grown to 64 MiB from a
    /// few bytes.
    static func padded(_ data: UnsafeRawBufferPointer, limits: DecodeLimits,
                       failOn: FailOn) throws(ImagingError) -> (bytes: Allocation, note: String)? {
        guard failOn == .none, let claimed = HEIFStructure.claimedLength(data), claimed > data.count,
              claimed <= limits.maxInputBytes else { return nil }
        guard claimed - data.count <= max(maxPaddingFactor * data.count, 1 << 20) else {
            throw ImagingError(.truncated, "the file is cut: \(data.count) of the \(claimed) bytes its boxes claim, "
                               + "too little to fill in with zeros (fail_on none fills in at most \(maxPaddingFactor) "
                               + "times what is there, or 1 MiB)")
        }
        let copy = try BufferAllocator(maxBytes: limits.maxBufferBytes).allocate(claimed, for: "the cut file, padded")
        let target = copy.mutableBytes
        target.copyMemory(from: data)
        (target.baseAddress! + data.count).initializeMemory(as: UInt8.self, repeating: 0, count: claimed - data.count)
        return (copy, "the file is cut: \(data.count) of the \(claimed) bytes its boxes claim; the image is what the "
                + "decoder made of it with zeros for the rest (fail_on none)")
    }

    /// What a lenient decode says when a cut file gave `rows` of `height` rows: the rest are
    /// left transparent black (zeros), as libvips and Pillow leave them.
    static func cutNote(rows: Int, height: Int) -> String {
        guard rows < height else { return "the file is cut, after the last row of the image (fail_on none)" }
        return "the file is cut: \(rows) of \(height) rows decoded, the \(height - rows) below filled with "
            + "transparent black (fail_on none)"
    }

    /// A buffer from `allocator` that `fill` decodes into (straight RGBA when `channels` is
    /// 4), premultiplied after it: what every decoder that writes a whole image returns.
    static func decoded(width: Int, height: Int, channels: Int, allocator: BufferAllocator, what: String,
                        cancel: CancellationFlag?,
                        fill: (UnsafeMutableBufferPointer<UInt8>) throws(ImagingError) -> Void) throws(ImagingError) -> DecodedRaster {
        var translucent = false
        let pixels = try PixelBuffer.make(width: width, height: height, channels: channels, allocator: allocator,
                                          what: what) { (buffer) throws(ImagingError) in
            try fill(buffer)
            if channels == 4 { translucent = try premultiply(buffer, cancel: cancel) }
        }
        return DecodedRaster(pixels: pixels, translucent: translucent)
    }

    /// Premultiplies a freshly decoded RGBA buffer in place, in bands between cancellation
    /// checks; returns whether it has real transparency.
    static func premultiply(_ buffer: UnsafeMutableBufferPointer<UInt8>, cancel: CancellationFlag?) throws(ImagingError) -> Bool {
        var translucent = false
        let pixels = buffer.count / 4, band = 1 << 18
        var start = 0
        while start < pixels {
            try cancel?.check()
            let count = min(band, pixels - start)
            if Alpha.premultiply(buffer.baseAddress! + 4 * start, count: count) { translucent = true }
            start += count
        }
        return translucent
    }
}
