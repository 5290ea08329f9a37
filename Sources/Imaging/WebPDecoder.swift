import CWebP
import ImageModel

/// One libwebp decode over bytes the caller keeps alive. libwebp scales while decoding, which
/// is WebP's shrink-on-load: the image is decoded straight to the reduced size.
final class WebPDecoder: RasterDecoder {
    private let data: UnsafeRawBufferPointer
    private let cancel: CancellationFlag?
    private let allocator: BufferAllocator
    private let failOn: FailOn
    /// Why the file is known to be cut before decoding (its RIFF size), or nil.
    private let cut: String?
    let header: RasterHeader

    init(data: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?,
         failOn: FailOn = .error) throws(ImagingError) {
        self.data = data
        self.cancel = cancel
        self.failOn = failOn
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        var info = ew_info()
        var message = [CChar](repeating: 0, count: 256)
        let status = ew_read_header(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, &info,
                                    &message, message.count)
        guard status == EW_OK else { throw Self.error(status, message) }
        cut = info.cut != 0 ? RasterDecoders.text(message) : nil
        var header = RasterHeader(
            format: .webp, width: Int(info.width), height: Int(info.height), channels: info.has_alpha != 0 ? 4 : 3,
            hasAlpha: info.has_alpha != 0, bitDepth: 8, colorSpace: info.lossless != 0 ? "argb" : "ycbcr")
        header.animated = info.has_animation != 0
        if let icc = info.icc, info.icc_length > 0 { header.iccProfile = Array(UnsafeBufferPointer(start: icc, count: info.icc_length)) }
        if let exif = info.exif, info.exif_length > 0 {
            header.orientation = RasterDecoders.orientation(exif: UnsafeRawBufferPointer(start: exif, count: info.exif_length))
        }
        self.header = header
    }

    var maxShrink: Int { header.animated ? 1 : .max }

    func decode(shrink: Int) throws(ImagingError) -> DecodedRaster {
        let shrink = min(shrink, maxShrink)
        let width = RasterDecoders.shrunk(header.width, shrink), height = RasterDecoders.shrunk(header.height, shrink)
        let channels = header.channels
        // A cut file fails unless nothing fails on truncation; then what decodes is kept.
        if let cut, failOn > .none { throw ImagingError(.truncated, "WebP: " + cut) }
        var notes: [String] = []
        var raster = try RasterDecoders.decoded(width: width, height: height, channels: channels, allocator: allocator,
                                                what: "the decoded image", cancel: cancel) { (buffer) throws(ImagingError) in
            var message = [CChar](repeating: 0, count: 256)
            var rows: Int32 = 0
            let status = ew_decode(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count,
                                   Int32(width), Int32(height), Int32(channels), buffer.baseAddress!, width * channels,
                                   buffer.count, cancel?.storage, &rows, &message, message.count)
            if status == EW_ERR_TRUNCATED, failOn == .none {
                let whole = max(0, min(Int(rows), height))
                // libwebp leaves the rows it has not finished as they were: zeros, like the rest.
                (buffer.baseAddress! + whole * width * channels).update(repeating: 0, count: (height - whole) * width * channels)
                notes.append(RasterDecoders.cutNote(rows: whole, height: height))
                return
            }
            guard status == EW_OK else { throw Self.error(status, message) }
            if cut != nil { notes.append(RasterDecoders.cutNote(rows: height, height: height)) }
        }
        raster.notes = notes
        return raster
    }

    private static func error(_ status: ew_status, _ message: [CChar]) -> ImagingError {
        let text = "WebP: " + RasterDecoders.text(message)
        return switch status {
        case EW_ERR_NOT_WEBP: ImagingError(.unknownFormat, text)
        case EW_ERR_TRUNCATED: ImagingError(.truncated, text)
        case EW_ERR_UNSUPPORTED: ImagingError(.unsupported, text)
        case EW_ERR_NO_MEMORY: ImagingError(.tooLarge, text)
        case EW_ERR_CANCELLED: ImagingError(.cancelled, "cancelled")
        default: ImagingError(.corrupt, text)
        }
    }
}
