import CJXL
import ImageModel

/// One libjxl decode of a JPEG XL image's first frame over bytes the caller keeps alive. The
/// pixels come in their stored orientation, which the header reports like an EXIF one; a
/// lossy (XYB) image comes as sRGB, a lossless one in its own colour space with its profile. There
/// is no reduced decode (libjxl 0.7 has none to offer): the image is decoded whole, its
/// tasks run on the calling thread with cancellation looked at between them.
final class JXLDecoder: RasterDecoder {
    private let data: UnsafeRawBufferPointer
    private let cancel: CancellationFlag?
    private let allocator: BufferAllocator
    private let failOn: FailOn
    let header: RasterHeader

    init(data: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?,
         failOn: FailOn = .error) throws(ImagingError) {
        self.data = data
        self.cancel = cancel
        self.failOn = failOn
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        var info = ex_info()
        var message = [CChar](repeating: 0, count: 256)
        let status = ex_read_header(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, &info,
                                    &message, message.count)
        guard status == EX_OK else { throw Self.error(status, message) }
        defer { ex_free(&info) }
        let alpha = info.has_alpha != 0
        // Grey with alpha has no layout of its own here: it is decoded as RGBA.
        var header = RasterHeader(
            format: .jxl, width: Int(info.width), height: Int(info.height),
            channels: alpha ? 4 : Int(info.colour_channels), hasAlpha: alpha, bitDepth: Int(info.bits_per_sample),
            colorSpace: info.lossless == 0 ? "xyb" : info.colour_channels == 1 ? "gray" : "rgb")
        header.orientation = Orientation(rawValue: Int(info.orientation)) ?? .up
        header.animated = info.animated != 0
        header.extraPlanes = Int(info.extra_channels)
        // Every layer is decoded at its own size before it is cropped to the image: a few
        // bytes of flat colour can make a layer of gigapixels behind a tiny image.
        if info.layers_beyond_scan != 0 {
            throw ImagingError(.tooLarge, "JPEG XL: more than \(EX_MAX_LAYERS) layers make up the first frame")
        }
        header.largestLayerPixels = Int(info.largest_layer_width) * Int(info.largest_layer_height)
        if header.animated { header.notes.append("an animated JPEG XL: its first frame is used") }
        if let icc = info.icc, info.icc_length > 0 {
            if info.colour_channels == 1 && alpha {
                header.notes.append("the grey image's colour profile is not applied to its RGBA decode: its pixels are "
                                    + "taken as sRGB")
            } else {
                header.iccProfile = Array(UnsafeBufferPointer(start: icc, count: info.icc_length))
            }
        }
        self.header = header
    }

    var maxShrink: Int { 1 }

    func decode(shrink: Int) throws(ImagingError) -> DecodedRaster {
        let (width, height, channels) = (header.width, header.height, header.channels)
        var notes: [String] = []
        var raster = try RasterDecoders.decoded(width: width, height: height, channels: channels, allocator: allocator,
                                                what: "the decoded image", cancel: cancel) { (buffer) throws(ImagingError) in
            var message = [CChar](repeating: 0, count: 256)
            var partial: Int32 = 0
            let status = ex_decode(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, Int32(width),
                                   Int32(height), Int32(channels), buffer.baseAddress!, buffer.count,
                                   failOn == .none ? 1 : 0, &partial, cancel?.storage, &message, message.count)
            // A cut file fails unless nothing fails on truncation; then what libjxl could render
            // of the data there is is kept (the rest black), or the file fails after all.
            if status == EX_ERR_TRUNCATED, failOn == .none, partial != 0 {
                notes.append("the file is cut: the image is what libjxl could render of the data there is (the "
                             + "missing parts from its low-resolution data where it had that, else black; fail_on none)")
                return
            }
            guard status == EX_OK else { throw Self.error(status, message) }
        }
        raster.notes = notes
        return raster
    }

    private static func error(_ status: ex_status, _ message: [CChar]) -> ImagingError {
        let text = "JPEG XL: " + RasterDecoders.text(message)
        return switch status {
        case EX_ERR_NOT_JXL: ImagingError(.unknownFormat, text)
        case EX_ERR_TRUNCATED: ImagingError(.truncated, text)
        case EX_ERR_NO_MEMORY: ImagingError(.tooLarge, text)
        case EX_ERR_CANCELLED: ImagingError(.cancelled, "cancelled")
        case EX_ERR_UNSUPPORTED: ImagingError(.unsupported, text)
        default: ImagingError(.corrupt, text)
        }
    }
}
