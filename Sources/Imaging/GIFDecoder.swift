import CGIF
import ImageModel

/// The first image of a GIF (a still one, or an animation's first frame) over bytes the
/// caller keeps alive, drawn on its logical screen as browsers draw it: transparent where
/// the image is transparent or does not reach. GIF has no reduced decode: it is read whole,
/// a row at a time.
final class GIFDecoder: RasterDecoder {
    private let data: UnsafeRawBufferPointer
    private let cancel: CancellationFlag?
    private let allocator: BufferAllocator
    private let failOn: FailOn
    private let info: eg_info
    let header: RasterHeader

    init(data: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?,
         failOn: FailOn = .error) throws(ImagingError) {
        self.data = data
        self.cancel = cancel
        self.failOn = failOn
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        var info = eg_info()
        var message = [CChar](repeating: 0, count: 256)
        let status = eg_read_header(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, &info,
                                    &message, message.count)
        guard status == EG_OK else { throw Self.error(status, message) }
        self.info = info
        let alpha = info.has_alpha != 0
        var header = RasterHeader(format: .gif, width: Int(info.width), height: Int(info.height),
                                  channels: alpha ? 4 : 3, hasAlpha: alpha, bitDepth: 8, colorSpace: "palette")
        header.interlaced = info.interlaced != 0
        header.animated = info.animated != 0
        if header.animated { header.notes.append("an animated GIF: its first frame is used") }
        self.header = header
    }

    var maxShrink: Int { 1 }

    func decode(shrink: Int) throws(ImagingError) -> DecodedRaster {
        let (width, height, channels) = (header.width, header.height, header.channels)
        var notes: [String] = []
        var info = self.info
        var raster = try RasterDecoders.decoded(width: width, height: height, channels: channels, allocator: allocator,
                                                what: "the decoded image", cancel: cancel) { (buffer) throws(ImagingError) in
            var message = [CChar](repeating: 0, count: 256)
            var rows: Int32 = 0
            let status = eg_decode(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, &info,
                                   Int32(channels), buffer.baseAddress!, width * channels, buffer.count,
                                   cancel?.storage, &rows, &message, message.count)
            // A cut file fails unless nothing fails on truncation; then what decoded is kept,
            // the rest left transparent black (the shim cleared the canvas first).
            if status == EG_ERR_TRUNCATED, failOn == .none {
                notes.append(Self.cutNote(rows: Int(rows), of: Int(info.frame_height), interlaced: info.interlaced != 0))
                return
            }
            guard status == EG_OK else { throw Self.error(status, message) }
        }
        raster.notes = notes
        return raster
    }

    private static func cutNote(rows: Int, of height: Int, interlaced: Bool) -> String {
        guard interlaced else { return RasterDecoders.cutNote(rows: rows, height: height) }
        return "the file is cut: \(rows) of the \(height) rows of the interlaced image decoded (spread over it), the "
            + "others filled with transparent black (fail_on none)"
    }

    private static func error(_ status: eg_status, _ message: [CChar]) -> ImagingError {
        let text = "GIF: " + RasterDecoders.text(message)
        return switch status {
        case EG_ERR_NOT_GIF: ImagingError(.unknownFormat, text)
        case EG_ERR_TRUNCATED: ImagingError(.truncated, text)
        case EG_ERR_NO_MEMORY: ImagingError(.tooLarge, text)
        case EG_ERR_CANCELLED: ImagingError(.cancelled, "cancelled")
        default: ImagingError(.corrupt, text)
        }
    }
}
