import CHEIF
import ImageModel

/// One libheif decode (HEIC or AVIF) over bytes the caller keeps alive. The image comes
/// upright (libheif applies the file's rotation and mirroring); its first embedded thumbnail,
/// when there is one, makes the degraded result. libheif decodes an image whole, and cannot
/// be interrupted inside that decode: cancellation is checked before and after it.
final class HEIFDecoder: RasterDecoder {
    private let handle: OpaquePointer
    private let cancel: CancellationFlag?
    private let allocator: BufferAllocator
    let header: RasterHeader

    /// A cut file padded at `fail_on none` (see `RasterDecoders.padded`): the bytes libheif reads.
    private let padded: Allocation?

    init(data original: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?,
         failOn: FailOn = .error) throws(ImagingError) {
        let padding = try RasterDecoders.padded(original, limits: limits, failOn: failOn)
        let data = padding?.bytes.bytes ?? original
        var status = EH_OK
        var message = [CChar](repeating: 0, count: 256)
        // libheif refuses a side above this from the header, before any pixel memory.
        let maxSide = Int32(clamping: min(limits.maxPixels, 1 << 18))
        guard let handle = eh_decoder_create(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, maxSide,
                                             &status, &message, message.count) else {
            throw Self.error(status, String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        var info = eh_info()
        eh_read_info(handle, &info)
        let items = HEIFStructure.items(data)
        do throws(ImagingError) {
            // Every check below reads an item's type from `iinf`: an id declared twice could
            // show them one item and libheif another (an overlay canvas, AV1 data). Found by
            // fuzzing: libheif then allocated 2.3 GB for a 1.2 KB file, or leaked.
            if let id = items.declaredTwice.first {
                throw ImagingError(.corrupt, "HEIF: item \(id) is declared twice")
            }
            if items.types.values.contains("av01") {
                throw ImagingError(.unsupported, "HEIF: AV1-coded items in a file that does not name itself AVIF "
                                   + "(no 'avif' brand) are not read")
            }
            if let primary = items.primary {
                try HEIFStructure.checkCanvas(data, items: items, item: primary, width: Int(info.width),
                                              height: Int(info.height), maxPixels: limits.maxPixels)
            }
            // Alpha, depth and other auxiliary images are decoded with the primary: none may be
            // larger than it. Items no decode reads are not limited.
            let bound = min(limits.maxPixels, Int(info.width) * Int(info.height))
            let decoded = items.primary.map { items.decoded(with: $0) } ?? Set(items.types.keys)
            for item in decoded.sorted() where item != items.primary && item != Int(info.thumbnail_id) {
                try HEIFStructure.checkCanvas(data, items: items, item: item, maxPixels: bound)
            }
        } catch {
            eh_decoder_destroy(handle)
            throw error
        }
        // A thumbnail is only a shortcut: one over 1 MP, or failing the same check, is left unused.
        let thumbnailPixels = Int(info.thumbnail_width) * Int(info.thumbnail_height)
        if thumbnailPixels > ImagePipeline.maxThumbnailPixels || info.thumbnail_id != 0 && (try? HEIFStructure.checkCanvas(
            data, items: items, item: Int(info.thumbnail_id), width: Int(info.thumbnail_width),
            height: Int(info.thumbnail_height), maxPixels: min(limits.maxPixels, ImagePipeline.maxThumbnailPixels))) == nil {
            eh_drop_thumbnail(handle)
            info.thumbnail_width = 0
            info.thumbnail_height = 0
        }
        self.handle = handle
        self.padded = padding?.bytes
        self.cancel = cancel
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        var header = RasterHeader(
            format: info.avif != 0 ? .avif : .heic, width: Int(info.width), height: Int(info.height),
            channels: info.has_alpha != 0 ? 4 : 3, hasAlpha: info.has_alpha != 0, bitDepth: Int(info.bit_depth),
            colorSpace: "ycbcr")
        if let icc = info.icc, info.icc_length > 0 { header.iccProfile = Array(UnsafeBufferPointer(start: icc, count: info.icc_length)) }
        if info.nclx != 0 {
            let xy = withUnsafeBytes(of: info.nclx_xy) { Array($0.bindMemory(to: Double.self)) }
            RasterDecoders.describeCodePoints(primaries: Int(info.nclx_primaries), transfer: Int(info.nclx_transfer),
                                              xy: xy, into: &header)
        }
        if let padding {
            header.notes.append(padding.note)
            header.inputCopyBytes = padding.bytes.count
        }
        header.thumbnailWidth = Int(info.thumbnail_width)
        header.thumbnailHeight = Int(info.thumbnail_height)
        self.header = header
    }

    deinit { eh_decoder_destroy(handle) }


    var maxShrink: Int { 1 }

    func decode(shrink: Int) throws(ImagingError) -> DecodedRaster {
        try decode(thumbnail: false, width: header.width, height: header.height)
    }

    func decodeThumbnail() throws(ImagingError) -> DecodedRaster? {
        guard header.hasThumbnail else { return nil }
        return try decode(thumbnail: true, width: header.thumbnailWidth, height: header.thumbnailHeight)
    }

    private func decode(thumbnail: Bool, width: Int, height: Int) throws(ImagingError) -> DecodedRaster {
        let channels = header.channels
        return try RasterDecoders.decoded(width: width, height: height, channels: channels, allocator: allocator,
                                          what: thumbnail ? "the decoded thumbnail" : "the decoded image",
                                          cancel: cancel) { (buffer) throws(ImagingError) in
            let status = eh_decode(handle, thumbnail ? 1 : 0, Int32(channels), Int32(width), Int32(height),
                                   buffer.baseAddress!, width * channels, padded == nil ? 1 : 0, cancel?.storage)
            guard status == EH_OK else { throw Self.error(status, String(cString: eh_message(handle))) }
        }
    }

    private static func error(_ status: eh_status, _ message: String) -> ImagingError {
        let text = "HEIF: " + message
        return switch status {
        case EH_ERR_NOT_HEIF: ImagingError(.unknownFormat, text)
        case EH_ERR_TRUNCATED: ImagingError(.truncated, text)
        case EH_ERR_UNSUPPORTED: ImagingError(.unsupported, text)
        case EH_ERR_TOO_LARGE, EH_ERR_NO_MEMORY: ImagingError(.tooLarge, text)
        case EH_ERR_CANCELLED: ImagingError(.cancelled, "cancelled")
        default: ImagingError(.corrupt, text)
        }
    }
}
