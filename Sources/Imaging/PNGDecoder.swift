import CPNG
import ImageModel

/// One libspng decode over bytes the caller keeps alive. Rows are decoded one at a time and,
/// when the image is to be reduced, box-averaged into the reduced buffer as they come: a
/// large PNG never needs a buffer of its full size (except an interlaced one, whose passes
/// revisit every row).
final class PNGDecoder: RasterDecoder {
    private let handle: OpaquePointer
    private let cancel: CancellationFlag?
    private let allocator: BufferAllocator
    private let failOn: FailOn
    let header: RasterHeader

    /// `releasingRead`: `data` is a `MappedFile`'s, whose pages may be given back once read.
    init(data: UnsafeRawBufferPointer, limits: DecodeLimits, cancel: CancellationFlag?, failOn: FailOn,
         releasingRead: Bool = false) throws(ImagingError) {
        let level: Int32 = switch failOn {
        case .none: 0
        case .truncated: 1
        case .error: 2
        case .warning: 3
        }
        // No chunk of the file, nor all the ancillary chunks kept, decompressed, may exceed
        // the input's own size (and 16 MiB): an iCCP or zTXt bomb stops there.
        let maxChunk = min(max(data.count, 1 << 16), 16 << 20)
        guard let handle = ep_decoder_create(data.baseAddress!.assumingMemoryBound(to: UInt8.self), data.count,
                                             maxChunk, level, releasingRead ? 1 : 0) else {
            throw ImagingError(.tooLarge, "out of memory creating a PNG decoder")
        }
        self.handle = handle
        self.cancel = cancel
        self.failOn = failOn
        allocator = BufferAllocator(maxBytes: limits.maxBufferBytes)
        var info = ep_info()
        let status = ep_read_header(handle, &info)
        guard status == EP_OK else {
            let error = PNGDecoder.error(status, handle)
            ep_decoder_destroy(handle)
            throw error
        }
        let grey = info.color_type == 0 || info.color_type == 4
        let alpha = info.color_type == 4 || info.color_type == 6 || info.has_trns != 0
        var header = RasterHeader(
            format: .png, width: Int(info.width), height: Int(info.height),
            // Grey of any depth (16-bit reduced to 8) stays one channel.
            channels: alpha ? 4 : grey ? 1 : 3, hasAlpha: alpha,
            bitDepth: Int(info.bit_depth),
            colorSpace: info.color_type == 3 ? "palette" : grey ? "gray" : "rgb")
        header.interlaced = info.interlaced != 0
        if let icc = info.icc, info.icc_length > 0 { header.iccProfile = Array(UnsafeBufferPointer(start: icc, count: info.icc_length)) }
        if let exif = info.exif, info.exif_length > 0 {
            header.orientation = RasterDecoders.orientation(exif: UnsafeRawBufferPointer(start: exif, count: info.exif_length))
        }
        self.header = header
    }

    deinit { ep_decoder_destroy(handle) }

    var maxShrink: Int { header.interlaced ? 1 : .max }

    func decode(shrink: Int) throws(ImagingError) -> DecodedRaster {
        let channels = header.channels
        try check(ep_start(handle, Int32(channels)))
        if header.interlaced || shrink <= 1 { return try decodeWhole() }
        return try decodeReduced(shrink)
    }

    /// Every row straight into the full-size buffer (an interlaced image's passes land in
    /// their rows).
    private func decodeWhole() throws(ImagingError) -> DecodedRaster {
        let (width, height, channels) = (header.width, header.height, header.channels)
        let stride = width * channels
        var translucent = false
        var notes: [String] = []
        let pixels = try PixelBuffer.make(width: width, height: height, channels: channels, allocator: allocator,
                                          what: "the decoded image") { (buffer) throws(ImagingError) in
            // The passes of an interlaced image fill a row piecemeal: start from zeros.
            if header.interlaced { buffer.initialize(repeating: 0) }
            var delivered = 0
            do throws(ImagingError) {
                while let row = try nextRow() {
                    if delivered & 15 == 0 { try cancel?.check() }
                    guard row < height, header.interlaced || row == delivered, delivered < 7 * height else {
                        throw ImagingError(.corrupt, "PNG: the decoder announced row \(row) of \(height) out of order")
                    }
                    try check(ep_read_row(handle, buffer.baseAddress! + row * stride, stride))
                    delivered += 1
                }
            } catch where error.code == .truncated && recoversCut {
                let whole = header.interlaced ? height : delivered
                if !header.interlaced {
                    (buffer.baseAddress! + whole * stride).update(repeating: 0, count: (height - whole) * stride)
                    notes.append(RasterDecoders.cutNote(rows: whole, height: height))
                } else {
                    notes.append("the file is cut: the interlaced image's missing passes are left transparent black "
                                 + "(fail_on none)")
                }
                delivered = header.interlaced ? delivered : height
            }
            if !header.interlaced && delivered != height {
                throw ImagingError(.truncated, "PNG: \(delivered) of \(height) rows decoded")
            }
            if channels == 4 { translucent = try RasterDecoders.premultiply(buffer, cancel: cancel) }
        }
        return DecodedRaster(pixels: pixels, translucent: translucent, notes: notes)
    }

    /// A cut file gives back the rows before the cut (`fail_on none`).
    private var recoversCut: Bool { failOn == .none && ep_ran_out(handle) != 0 }

    /// The index of the row the decoder delivers next, or nil after the last one.
    private func nextRow() throws(ImagingError) -> Int? {
        var index: UInt32 = 0
        let status = ep_next_row(handle, &index)
        if status == EP_DONE { return nil }
        try check(status)
        return Int(index)
    }

    /// Rows averaged in `shrink`×`shrink` boxes as they are decoded (the boxes on the right
    /// and bottom edges are smaller), premultiplied first when there is alpha.
    private func decodeReduced(_ shrink: Int) throws(ImagingError) -> DecodedRaster {
        let (width, height, channels) = (header.width, header.height, header.channels)
        let outWidth = RasterDecoders.shrunk(width, shrink), outHeight = RasterDecoders.shrunk(height, shrink)
        let stride = width * channels, outStride = outWidth * channels
        // Working rows from the decode's budget (a Swift array that cannot be allocated ends the
        // process; these fail the request). 64-bit sums: a box may hold more than 2^32 / 255
        // samples (a reduction by thousands).
        let rowMemory = try allocator.allocate(stride, of: UInt8.self, for: "a decoded row")
        let sumMemory = try allocator.allocate(outStride, of: UInt64.self, for: "the reduced row's sums")
        let row = rowMemory.mutableBytes.bindMemory(to: UInt8.self)
        let sums = sumMemory.mutableBytes.bindMemory(to: UInt64.self)
        row.initialize(repeating: 0)
        sums.initialize(repeating: 0)
        defer { withExtendedLifetime((rowMemory, sumMemory)) {} }
        var translucent = false
        var notes: [String] = []
        let pixels = try PixelBuffer.make(width: outWidth, height: outHeight, channels: channels, allocator: allocator,
                                          what: "the reduced image") { (buffer) throws(ImagingError) in
            var rowsInBox = 0
            for y in 0..<height {
                if y & 15 == 0 { try cancel?.check() }
                let index: Int?
                var status = EP_OK
                do throws(ImagingError) {
                    index = try nextRow()
                    if index == y { status = ep_read_row(handle, row.baseAddress!, stride) }
                } catch where error.code == .truncated && recoversCut {
                    index = y
                    status = EP_ERR_TRUNCATED
                }
                if status == EP_ERR_TRUNCATED && recoversCut {
                    // The rows before the cut are kept; a box they only began is averaged
                    // over them, and the boxes below are transparent black.
                    if rowsInBox > 0 {
                        Self.emit(sums.baseAddress!, width: width, channels: channels, shrink: shrink, rows: rowsInBox,
                                  into: buffer.baseAddress! + (y / shrink) * outStride)
                    }
                    let kept = RasterDecoders.shrunk(y, shrink)
                    (buffer.baseAddress! + kept * outStride).update(repeating: 0, count: (outHeight - kept) * outStride)
                    notes.append(RasterDecoders.cutNote(rows: y, height: height))
                    break
                }
                guard let index else {
                    throw ImagingError(.truncated, "PNG: \(y) of \(height) rows decoded")
                }
                guard index == y else { throw ImagingError(.corrupt, "PNG: the decoder announced row \(index) for \(y)") }
                if status != EP_OK { throw PNGDecoder.error(status, handle) }
                if channels == 4, Alpha.premultiply(row.baseAddress!, count: width) { translucent = true }
                Self.accumulate(row.baseAddress!, width: width, channels: channels, shrink: shrink, into: sums.baseAddress!)
                rowsInBox += 1
                if rowsInBox == shrink || y == height - 1 {
                    Self.emit(sums.baseAddress!, width: width, channels: channels, shrink: shrink, rows: rowsInBox,
                              into: buffer.baseAddress! + (y / shrink) * outStride)
                    rowsInBox = 0
                }
            }
        }
        return DecodedRaster(pixels: pixels, translucent: translucent, notes: notes)
    }

    /// Adds a row's samples into the sums of the boxes they fall in.
    private static func accumulate(_ row: UnsafePointer<UInt8>, width: Int, channels: Int, shrink: Int,
                                   into sums: UnsafeMutablePointer<UInt64>) {
        var x = 0, box = 0
        while x < width {
            let end = min(width, x + shrink)
            let target = sums + box * channels
            for px in x..<end {
                let source = row + px * channels
                for c in 0..<channels { target[c] &+= UInt64(source[c]) }
            }
            x = end
            box += 1
        }
    }

    /// Writes the boxes' averages (rounded) as an output row and clears the sums.
    private static func emit(_ sums: UnsafeMutablePointer<UInt64>, width: Int, channels: Int, shrink: Int, rows: Int,
                             into output: UnsafeMutablePointer<UInt8>) {
        let boxes = RasterDecoders.shrunk(width, shrink)
        for box in 0..<boxes {
            let columns = min(shrink, width - box * shrink)
            let count = UInt64(columns * rows)
            for c in 0..<channels {
                let i = box * channels + c
                output[i] = UInt8((sums[i] + count / 2) / count)
                sums[i] = 0
            }
        }
    }

    private func check(_ status: ep_status) throws(ImagingError) {
        if status != EP_OK { throw Self.error(status, handle) }
    }

    private static func error(_ status: ep_status, _ handle: OpaquePointer) -> ImagingError {
        let message = "PNG: " + String(cString: ep_message(handle))
        return switch status {
        case EP_ERR_NOT_PNG: ImagingError(.unknownFormat, message)
        case EP_ERR_TRUNCATED: ImagingError(.truncated, message)
        case EP_ERR_UNSUPPORTED: ImagingError(.unsupported, message)
        case EP_ERR_TOO_LARGE, EP_ERR_NO_MEMORY: ImagingError(.tooLarge, message)
        case EP_ERR_CANCELLED: ImagingError(.cancelled, "cancelled")
        default: ImagingError(.corrupt, message)
        }
    }
}
