import CWebP
import ImageModel

/// One libwebp decode over bytes the caller keeps alive. libwebp scales while decoding, which
/// is WebP's shrink-on-load: the image is decoded straight to the reduced size.
final class WebPDecoder: RasterDecoder {
    private let data: UnsafeRawBufferPointer
    private let cancel: CancellationFlag?
    private let allocator: BufferAllocator
    let header: RasterHeader

    init(data: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?) throws(ImagingError) {
        self.data = data
        self.cancel = cancel
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        var info = ew_info()
        var message = [CChar](repeating: 0, count: 160)
        let status = ew_read_header(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, &info,
                                    &message, message.count)
        guard status == EW_OK else { throw Self.error(status, message) }
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
        return try RasterDecoders.decoded(width: width, height: height, channels: channels, allocator: allocator,
                                          what: "the decoded image", cancel: cancel) { (buffer) throws(ImagingError) in
            var message = [CChar](repeating: 0, count: 160)
            let status = ew_decode(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count,
                                   Int32(width), Int32(height), Int32(channels), buffer.baseAddress!, width * channels,
                                   buffer.count, cancel?.storage, &message, message.count)
            guard status == EW_OK else { throw Self.error(status, message) }
        }
    }

    private static func error(_ status: ew_status, _ message: [CChar]) -> ImagingError {
        let text = "WebP: " + String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return switch status {
        case EW_ERR_NOT_WEBP: ImagingError(.notJPEG, text)
        case EW_ERR_TRUNCATED: ImagingError(.truncated, text)
        case EW_ERR_UNSUPPORTED: ImagingError(.unsupported, text)
        case EW_ERR_NO_MEMORY: ImagingError(.tooLarge, text)
        case EW_ERR_CANCELLED: ImagingError(.cancelled, "cancelled")
        default: ImagingError(.corrupt, text)
        }
    }
}
