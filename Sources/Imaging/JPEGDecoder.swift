import CJPEG
import ImageModel

/// What a JPEG says about itself before any pixel is decoded.
public struct JPEGHeader: Sendable, Equatable {
    public enum ColorSpace: String, Sendable { case gray, ycbcr, rgb, cmyk, ycck }

    /// Size as stored in the frame header, before EXIF orientation.
    public var width: Int
    public var height: Int
    public var components: Int
    public var colorSpace: ColorSpace
    public var progressive: Bool
    public var arithmetic: Bool
    /// Whether the image comes in several scans (progressive, or sequential with components
    /// in separate scans): libjpeg then keeps every DCT coefficient of the image in memory.
    public var multiScan: Bool
    /// The size of that whole-image coefficient buffer, in bytes (needed only for multi-scan
    /// images, and for progressive previews).
    public var coefficientBytes: Int
    /// The largest sampling factors among the components: an MCU is 8 × these pixels.
    public var maxHorizontalSampling: Int
    public var maxVerticalSampling: Int
    public var exif: EXIFMetadata
    /// The embedded ICC profile, when there is one.
    public var iccProfile: [UInt8]?
    /// Bits per sample.
    public var precision = 8
    /// A CMYK or YCCK file decodes to 4-channel CMYK (for a colour-managed conversion)
    /// rather than to RGB.
    public var decodesToCMYK = false

    public var orientation: Orientation { exif.orientation }
    /// Displayed size, after orientation.
    public var orientedSize: (width: Int, height: Int) { orientation.orientedSize(width: width, height: height) }
    /// 1 for grayscale files (kept gray end to end), 4 for CMYK ones kept as CMYK for their
    /// profile, 3 for everything else (decoded as RGB).
    public var decodedChannels: Int { colorSpace == .gray ? 1 : decodesToCMYK ? 4 : 3 }
}

/// One libjpeg decompression over bytes the caller keeps alive. Not thread-safe; single use.
///
/// Every call goes through the setjmp-guarded C shim, which turns libjpeg errors *and
/// warnings* into `ImagingError`s and polls the cancellation flag between iMCU rows.
final class JPEGDecoder {
    private let handle: OpaquePointer
    private let data: UnsafeRawBufferPointer
    private let cancel: CancellationFlag?
    private let memoryLimit: Int
    private let allocator: BufferAllocator
    private(set) var header: JPEGHeader

    /// Rows decoded per shim call: the cancellation checkpoint granularity in Swift.
    private static let rowsPerChunk = 16

    /// Checks the cheap limits, then parses the header and checks the pixel limit, all
    /// before libjpeg allocates anything proportional to the image.
    ///
    /// `metadata` false reads neither EXIF nor an ICC profile: for an embedded image whose own
    /// are not used (a gain map), so that its decoder holds nothing of them.
    init(data: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?,
         failOn: FailOn = .warning, metadata: Bool = true) throws(ImagingError) {
        try JPEGDecoder.sniff(data, limits: limits)
        // libjpeg's whole-image buffers are one more large buffer: the per-buffer cap bounds them too.
        let memoryLimit = min(limits.maxDecoderMemory, limits.maxBufferBytes)
        let level: ej_fail_on = switch failOn {
        case .none: EJ_FAIL_ON_NONE
        case .truncated: EJ_FAIL_ON_TRUNCATED
        case .error: EJ_FAIL_ON_ERROR
        case .warning: EJ_FAIL_ON_WARNING
        }
        guard let handle = ej_decoder_create(cancel?.storage, Int32(clamping: limits.maxScans), memoryLimit,
                                             Int32(level.rawValue)) else {
            throw ImagingError(.tooLarge, "out of memory creating a decoder")
        }
        self.handle = handle
        self.memoryLimit = memoryLimit
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        self.data = data
        self.cancel = cancel
        if !metadata { ej_decoder_skip_metadata(handle) }
        var info = ej_info()
        let status = ej_read_header(handle, data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count, &info)
        header = JPEGHeader(width: 0, height: 0, components: 0, colorSpace: .gray, progressive: false,
                            arithmetic: false, multiScan: false, coefficientBytes: 0, maxHorizontalSampling: 1,
                            maxVerticalSampling: 1, exif: EXIFMetadata())
        try check(status)
        let exif = info.exif.map { EXIFMetadata(tiff: UnsafeRawBufferPointer(start: $0, count: info.exif_length)) }
        header = JPEGHeader(
            width: Int(info.width), height: Int(info.height), components: Int(info.components),
            colorSpace: JPEGDecoder.colorSpace(info.color), progressive: info.progressive != 0,
            arithmetic: info.arithmetic != 0, multiScan: info.multi_scan != 0,
            coefficientBytes: Int(info.coefficient_bytes), maxHorizontalSampling: Int(info.max_h_samp),
            maxVerticalSampling: Int(info.max_v_samp), exif: exif ?? EXIFMetadata())
        header.precision = Int(info.precision)
        if let icc = info.icc, info.icc_length > 0 {
            header.iccProfile = Array(UnsafeBufferPointer(start: icc, count: info.icc_length))
        }
        if let range = header.exif.thumbnail, let base = info.exif {
            thumbnail = Array(UnsafeBufferPointer(start: base + range.lowerBound, count: range.count))
        }
        let pixels = header.width.multipliedReportingOverflow(by: header.height)
        if pixels.overflow || pixels.partialValue > limits.maxPixels {
            throw ImagingError(.tooLarge, "\(header.width)×\(header.height) exceeds the limit of \(limits.maxPixels) pixels")
        }
    }

    deinit { ej_decoder_destroy(handle) }

    /// The embedded EXIF thumbnail (a small JPEG), copied at header time: libjpeg frees its
    /// saved markers when decompression finishes.
    private(set) var thumbnail: [UInt8]?

    /// For a CMYK or YCCK file: decode to CMYK ink amounts instead of RGB. Before decoding.
    func keepCMYK() {
        guard header.colorSpace == .cmyk || header.colorSpace == .ycck else { return }
        ej_set_keep_cmyk(handle, 1)
        header.decodesToCMYK = true
    }

    /// Decodes the whole image at `scaleNumerator`/8.
    func decode(scaleNumerator: Int) throws(ImagingError) -> PixelBuffer {
        var width: Int32 = 0, height: Int32 = 0, channels: Int32 = 0
        try check(ej_start(handle, Int32(scaleNumerator), &width, &height, &channels))
        let image = try readRows(width: Int(width), height: Int(height), channels: Int(channels))
        try check(ej_finish(handle))
        return image
    }

    // MARK: Buffered-image mode (progressive previews)

    /// Starts a progressive decode that can show early scans before the rest arrive.
    func startBuffered(scaleNumerator: Int) throws(ImagingError) -> (width: Int, height: Int, channels: Int) {
        var width: Int32 = 0, height: Int32 = 0, channels: Int32 = 0
        try check(ej_start_buffered(handle, Int32(scaleNumerator), &width, &height, &channels))
        return (Int(width), Int(height), Int(channels))
    }

    /// Consumes input until `scans` scans are complete (0: to the end). Returns whether the
    /// end of the image was reached.
    @discardableResult
    func consume(scans: Int) throws(ImagingError) -> Bool {
        var completed: Int32 = 0, eoi: Int32 = 0
        try check(ej_consume_scans(handle, Int32(scans), &completed, &eoi))
        return eoi != 0
    }

    /// Renders the scans consumed so far; `fast` trades IDCT accuracy for speed (previews).
    func outputPass(width: Int, height: Int, channels: Int, fast: Bool = false) throws(ImagingError) -> PixelBuffer {
        try check(ej_start_output_pass(handle, fast ? 1 : 0))
        let image = try readRows(width: width, height: height, channels: channels)
        try check(ej_finish_output_pass(handle))
        return image
    }

    func finishBuffered() throws(ImagingError) { try check(ej_finish(handle)) }

    // MARK: Internals

    private func readRows(width: Int, height: Int, channels: Int) throws(ImagingError) -> PixelBuffer {
        let stride = width * channels
        // Uninitialised: the decoder writes every byte, and zero-filling 300 MB costs real time.
        return try PixelBuffer.make(width: width, height: height, channels: channels, allocator: allocator,
                                    what: "the decoded image") { (buffer) throws(ImagingError) in
            var row = 0
            while row < height {
                try cancel?.check()
                var got: Int32 = 0
                let want = Int32(min(JPEGDecoder.rowsPerChunk, height - row))
                let status = ej_read_rows(handle, buffer.baseAddress! + row * stride, stride, want, &got)
                if status != EJ_OK { throw error(status) }
                if got == 0 { throw ImagingError(.truncated, "decoder produced no rows at row \(row) of \(height)") }
                row += Int(got)
            }
        }
    }

    private func check(_ status: ej_status) throws(ImagingError) {
        if status != EJ_OK { throw error(status) }
    }

    private func error(_ status: ej_status) -> ImagingError {
        let message = String(cString: ej_message(handle))
        let code: ImagingError.Code
        switch status {
        case EJ_ERR_NOT_JPEG: code = .unknownFormat
        case EJ_ERR_TRUNCATED: code = .truncated
        case EJ_ERR_UNSUPPORTED: code = .unsupported
        case EJ_ERR_NO_MEMORY:
            return ImagingError(.tooLarge, "decoding needs more memory than the limit of \(memoryLimit) bytes (\(message))")
        case EJ_ERR_TOO_LARGE: code = .tooLarge
        case EJ_ERR_TOO_MANY_SCANS: code = .tooManyScans
        case EJ_ERR_CANCELLED: code = .cancelled
        default: code = .corrupt
        }
        return ImagingError(code, message)
    }

    private static func colorSpace(_ color: Int32) -> JPEGHeader.ColorSpace {
        switch color {
        case Int32(EJ_COLOR_GRAY.rawValue): .gray
        case Int32(EJ_COLOR_RGB.rawValue): .rgb
        case Int32(EJ_COLOR_CMYK.rawValue): .cmyk
        case Int32(EJ_COLOR_YCCK.rawValue): .ycck
        default: .ycbcr
        }
    }

    /// Refuses what is plainly not a JPEG before libjpeg sees it, naming what it looks like.
    static func sniff(_ data: UnsafeRawBufferPointer, limits: DecodeLimits) throws(ImagingError) {
        if data.isEmpty { throw ImagingError(.empty, "the input is empty (0 bytes)") }
        if data.count > limits.maxInputBytes {
            throw ImagingError(.tooLarge, "\(data.count) bytes exceeds the input limit of \(limits.maxInputBytes) bytes")
        }
        if data.count >= 2 && data[0] == 0xFF && data[1] == 0xD8 { return }
        let signatures: [(prefix: [UInt8], name: String)] = [
            ([0x89, 0x50, 0x4E, 0x47], "a PNG image"), ([0x47, 0x49, 0x46, 0x38], "a GIF image"),
            ([0x49, 0x49, 0x2A, 0x00], "a TIFF image"), ([0x4D, 0x4D, 0x00, 0x2A], "a TIFF image"),
            ([0x52, 0x49, 0x46, 0x46], "a RIFF (WebP?) file"), ([0x42, 0x4D], "a BMP image"),
            ([0x25, 0x50, 0x44, 0x46], "a PDF document"),
        ]
        let looksLike = signatures.first { data.starts(with: $0.prefix) }?.name
        let head = data.prefix(2).map { "0x" + ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined(separator: " ")
        throw ImagingError(.unknownFormat, "not a JPEG: " + (looksLike ?? "starts with \(head)") + ", expected 0xff 0xd8")
    }
}
