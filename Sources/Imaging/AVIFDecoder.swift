import CAVIF
import ImageModel

/// One libavif decode (AV1 through dav1d) over bytes the caller keeps alive. The file's
/// rotation and mirroring become the image's orientation, applied after resizing like EXIF's.
/// libavif decodes a frame whole: cancellation is checked before and after.
///
/// AVIF goes through libavif rather than libheif: libheif 1.15's AV1 decoder leaks its state
/// on damaged input (found by fuzzing), which a long-running worker cannot afford.
final class AVIFDecoder: RasterDecoder {
    private let handle: OpaquePointer
    /// Alpha stored per grid tile, which libavif 0.11 does not read: a second decoder over the
    /// file rewritten so that its grid lists the alpha tiles (see `HEIFStructure.alphaTilesAsGrid`).
    private let alphaHandle: OpaquePointer?
    private let alphaSource: Allocation?
    private let cancel: CancellationFlag?
    private let allocator: BufferAllocator
    let header: RasterHeader

    /// The bytes libavif reads when they are not the caller's: a cut file padded at
    /// `fail_on none` (see `RasterDecoders.padded`), or a grid's tiles listed in their layout
    /// order (see `HEIFStructure.tilesInGridOrder`).
    private let rewritten: Allocation?

    init(data original: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?,
         failOn: FailOn = .error) throws(ImagingError) {
        let padding = try RasterDecoders.padded(original, limits: limits, failOn: failOn)
        var rewritten = padding?.bytes
        var data = rewritten?.bytes ?? original
        // libavif 0.11 lays a grid's tiles out in the order the file first names them, not in
        // the order the grid lists them (its layout): such a file is given to it with its
        // tiles named in layout order, and refused only when that cannot be done.
        let items = HEIFStructure.items(data)
        let grid = HEIFStructure.gridIssues(items)
        if grid.tilesOutOfItemOrder {
            guard let reordered = HEIFStructure.tilesInGridOrder(data, items: items) else {
                throw ImagingError(.unsupported, "AVIF: the grid lists its tiles in another order than the file names "
                                   + "them, and the file cannot be read in the grid's order")
            }
            // A padded copy is ours to change; the caller's bytes are copied first.
            let copy = if let rewritten { rewritten } else { try Self.copy(data, limits: limits) }
            try Self.change(copy, reordered)
            rewritten = copy
            data = copy.bytes
        }
        var status = EA_OK
        var message = [CChar](repeating: 0, count: 256)
        guard let handle = ea_decoder_create(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count,
                                             UInt32(clamping: limits.maxPixels), &status, &message, message.count) else {
            throw Self.error(status, String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        self.handle = handle
        self.rewritten = rewritten
        var info = ea_info()
        ea_read_info(handle, &info)
        var alphaNote: String?
        if grid.auxiliaryPerTile && info.has_alpha == 0 {
            (alphaHandle, alphaSource, alphaNote) = Self.alphaPerTile(data, items: items, limits: limits)
        } else {
            (alphaHandle, alphaSource) = (nil, nil)
        }
        self.cancel = cancel
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        let alpha = info.has_alpha != 0 || alphaHandle != nil
        var header = RasterHeader(
            format: .avif, width: Int(info.width), height: Int(info.height), channels: alpha ? 4 : 3,
            hasAlpha: alpha, bitDepth: Int(info.depth), colorSpace: "ycbcr")
        header.orientation = Self.orientation(rotation: Int(info.rotation), mirror: Int(info.mirror))
        if let padding { header.notes.append(padding.note) }
        // The padded or reordered copy libavif reads, and the copy the alpha decoder reads.
        header.inputCopyBytes = (rewritten?.count ?? 0) + (alphaSource?.count ?? 0)
        if let alphaNote { header.notes.append(alphaNote) }
        if info.clean_aperture == 2 {
            header.notes.append("the image's clean aperture (a crop its file declares) is invalid and not applied")
        }
        if let icc = info.icc, info.icc_length > 0 {
            header.iccProfile = Array(UnsafeBufferPointer(start: icc, count: info.icc_length))
        } else {
            let xy = withUnsafeBytes(of: info.xy) { Array($0.bindMemory(to: Double.self)) }
            RasterDecoders.describeCodePoints(primaries: Int(info.primaries), transfer: Int(info.transfer), xy: xy,
                                              into: &header)
        }
        self.header = header
    }

    deinit {
        ea_decoder_destroy(handle)
        ea_decoder_destroy(alphaHandle)
    }

    /// A copy of `data`, from the decode's memory budget, to be rewritten.
    private static func copy(_ data: UnsafeRawBufferPointer, limits: DecodeLimits) throws(ImagingError) -> Allocation {
        let copy = try BufferAllocator(maxBytes: limits.maxBufferBytes).allocate(data.count, for: "the file, rewritten")
        copy.mutableBytes.copyMemory(from: data)
        return copy
    }

    /// Makes `change` in `file`: bytes replaced in place, never past the end.
    private static func change(_ file: Allocation, _ change: (range: Range<Int>, bytes: [UInt8])) throws(ImagingError) {
        guard change.range.lowerBound >= 0, change.range.upperBound <= file.count, change.bytes.count == change.range.count else {
            throw ImagingError(.corrupt, "AVIF: the file's boxes could not be rewritten in place")
        }
        change.bytes.withUnsafeBytes { bytes in
            (file.mutableBytes.baseAddress! + change.range.lowerBound).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        }
    }

    /// The decoder of a grid's alpha stored per tile, over the file rewritten so that the grid
    /// lists the alpha tiles (in the file's naming order too, see `tilesInGridOrder`); or
    /// nil and a note saying why the image comes out opaque.
    private static func alphaPerTile(_ data: UnsafeRawBufferPointer, items: HEIFStructure.Items, limits: DecodeLimits)
        -> (OpaquePointer?, Allocation?, String?) {
        let opaque = "the image's alpha is stored per grid tile"
        guard let alphaTiles = HEIFStructure.alphaTilesAsGrid(data, items: items),
              let alphaFile = try? copy(data, limits: limits), (try? change(alphaFile, alphaTiles)) != nil else {
            return (nil, nil, opaque + " in a way this build cannot read: it comes out opaque")
        }
        let alphaItems = HEIFStructure.items(alphaFile.bytes)
        if HEIFStructure.gridIssues(alphaItems).tilesOutOfItemOrder {
            guard let reordered = HEIFStructure.tilesInGridOrder(alphaFile.bytes, items: alphaItems),
                  (try? change(alphaFile, reordered)) != nil else {
                return (nil, nil, opaque + ", its tiles in an order this build cannot read: it comes out opaque")
            }
        }
        var status = EA_OK
        var message = [CChar](repeating: 0, count: 256)
        guard let handle = ea_decoder_create(alphaFile.base.assumingMemoryBound(to: UInt8.self), alphaFile.count,
                                             UInt32(clamping: limits.maxPixels), &status, &message, message.count) else {
            let reason = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return (nil, nil, opaque + ", which could not be read (\(reason)): it comes out opaque")
        }
        return (handle, alphaFile, nil)
    }

    var maxShrink: Int { 1 }

    /// HEIF's rotation (`irot`, quarter turns anticlockwise) then mirroring (`imir`: 0 top and
    /// bottom exchanged, 1 left and right), as the EXIF orientation that does the same.
    static func orientation(rotation: Int, mirror: Int) -> Orientation {
        let table: [[Orientation]] = [
            [.up, .upMirrored, .downMirrored],
            [.left, .rightMirrored, .leftMirrored],
            [.down, .downMirrored, .upMirrored],
            [.right, .leftMirrored, .rightMirrored],
        ]
        return table[rotation & 3][mirror == 1 ? 1 : mirror == 0 ? 2 : 0]
    }

    func decode(shrink: Int) throws(ImagingError) -> DecodedRaster {
        let (width, height, channels) = (header.width, header.height, header.channels)
        return try RasterDecoders.decoded(width: width, height: height, channels: channels, allocator: allocator,
                                          what: "the decoded image", cancel: cancel) { (buffer) throws(ImagingError) in
            let status = ea_decode(handle, Int32(channels), buffer.baseAddress!, width * channels, cancel?.storage)
            guard status == EA_OK else { throw Self.error(status, String(cString: ea_message(handle))) }
            if let alphaHandle {
                // The alpha tiles' luma into every fourth byte, over the opaque alpha libavif wrote.
                let status = ea_decode_luma(alphaHandle, buffer.baseAddress! + 3, width * 4, 4, UInt32(width), UInt32(height),
                                            cancel?.storage)
                guard status == EA_OK else { throw Self.error(status, "alpha: " + String(cString: ea_message(alphaHandle))) }
            }
        }
    }

    private static func error(_ status: ea_status, _ message: String) -> ImagingError {
        let text = "AVIF: " + message
        return switch status {
        case EA_ERR_TRUNCATED: ImagingError(.truncated, text)
        case EA_ERR_UNSUPPORTED: ImagingError(.unsupported, text)
        case EA_ERR_TOO_LARGE, EA_ERR_NO_MEMORY: ImagingError(.tooLarge, text)
        case EA_ERR_CANCELLED: ImagingError(.cancelled, "cancelled")
        default: ImagingError(.corrupt, text)
        }
    }
}
