import CHEIF
import CJPEG
import CPNG
import CWebP
import ImageModel

public enum Encoder {
    /// The AV1 encoder's speed (0 slowest … 9 fastest): fast enough for a service, at a size
    /// still well below JPEG's for the same look.
    public static let avifSpeed = 8
    /// zlib's level for PNG output: its usual balance of size and time.
    public static let pngLevel = 6
    /// The largest ICC profile a JPEG holds: 255 APP2 markers (the count is one byte) of
    /// 65,519 bytes of profile each.
    public static let maxJPEGProfileBytes = 65519 * 255

    /// The profile `format` can embed, and a note when one has to be left out.
    static func embeddable(_ profile: [UInt8]?, in format: OutputFormat) -> (profile: [UInt8]?, note: String?) {
        guard let profile, format == .jpeg, profile.count > maxJPEGProfileBytes else { return (profile, nil) }
        return (nil, "the ICC profile (\(profile.count) bytes) is not kept: a JPEG holds at most "
                + "\(maxJPEGProfileBytes) bytes of profile")
    }

    /// Encodes grey, RGB or (PNG, WebP, AVIF) straight RGBA pixels. Output carries no
    /// metadata but the ICC profile given (orientation is already applied, so no tag is
    /// needed); PNM output is binary PGM (gray) or PPM (RGB). `cancel` is polled every few
    /// rows (JPEG, PNG), through libwebp's progress hook, before AV1 encoding or every few
    /// megabytes (PNM). The output of JPEG and PNM and libjpeg's large buffers come from
    /// `allocator`: running out of memory throws `.tooLarge`. The AV1 encoder cannot be
    /// interrupted once it runs, so an AVIF of more than `maxAVIFPixels` is refused (`.tooLarge`)
    /// before it starts: that bounds how long a cancelled job keeps its thread.
    public static func encode(_ image: PixelBuffer, format: OutputFormat, quality: Int = 80,
                              progressive: Bool = false, chroma444: Bool = false, lossless: Bool = false,
                              iccProfile: [UInt8]? = nil, cancel: CancellationFlag? = nil,
                              allocator: BufferAllocator = BufferAllocator(),
                              maxAVIFPixels: Int = .max) throws(ImagingError) -> EncodedImage {
        let memory: Allocation
        switch format {
        case .jpeg:
            memory = try jpegOutput(image, quality: quality, progressive: progressive, chroma444: chroma444,
                                    iccProfile: embeddable(iccProfile, in: .jpeg).profile, cancel: cancel,
                                    allocator: allocator)
        case .pnm:
            memory = try pnmOutput(image, cancel: cancel, allocator: allocator)
        case .png:
            memory = try adopt("PNG", image, iccProfile) { pixels, icc, iccLength, output, length, message in
                let status = ep_encode(pixels, UInt32(image.width), UInt32(image.height), Int32(image.channels),
                                       Int32(pngLevel), icc, iccLength, cancel?.storage, &output,
                                       &length, &message, message.count)
                return status == EP_OK ? .ok : status == EP_ERR_CANCELLED ? .cancelled
                    : status == EP_ERR_NO_MEMORY ? .noMemory : .failed
            }
        case .webp:
            memory = try adopt("WebP", image, iccProfile) { pixels, icc, iccLength, output, length, message in
                let status = ew_encode(pixels, Int32(image.width), Int32(image.height), Int32(image.channels),
                                       Int32(quality), lossless ? 1 : 0, icc, iccLength,
                                       cancel?.storage, &output, &length, &message, message.count)
                return status == EW_OK ? .ok : status == EW_ERR_CANCELLED ? .cancelled
                    : status == EW_ERR_NO_MEMORY ? .noMemory : .failed
            }
        case .avif:
            try checkAVIFSize(width: image.width, height: image.height, limit: maxAVIFPixels)
            memory = try adopt("AVIF", image, iccProfile) { pixels, icc, iccLength, output, length, message in
                let status = eh_encode_avif(pixels, Int32(image.width), Int32(image.height), Int32(image.channels),
                                            Int32(quality), Int32(avifSpeed), icc, iccLength,
                                            cancel?.storage, &output, &length, &message, message.count)
                return status == EH_OK ? .ok : status == EH_ERR_CANCELLED ? .cancelled
                    : status == EH_ERR_NO_MEMORY ? .noMemory : .failed
            }
        }
        // The image keeps the encoder's buffer alive and reads it in place.
        return EncodedImage(bytes: memory.bytes, keptAliveBy: memory, width: image.width, height: image.height, format: format)
    }

    /// Throws `.tooLarge` for an AVIF output over `limit` pixels (see `DecodeLimits.maxAVIFPixels`).
    public static func checkAVIFSize(width: Int, height: Int, limit: Int) throws(ImagingError) {
        guard width * height > limit else { return }
        throw ImagingError(.tooLarge, "an AVIF output of \(width)×\(height) is over this worker's limit of \(limit) "
                           + "pixels for AVIF (the AV1 encoder cannot be interrupted); ask for a smaller size or another format")
    }

    private enum Outcome { case ok, cancelled, noMemory, failed }

    /// Runs a C encoder that returns a malloc'd buffer, and adopts that buffer.
    private static func adopt(
        _ name: String, _ image: PixelBuffer, _ iccProfile: [UInt8]?,
        _ encode: (UnsafePointer<UInt8>, UnsafePointer<UInt8>?, Int, inout UnsafeMutablePointer<UInt8>?, inout Int,
                   inout [CChar]) -> Outcome
    ) throws(ImagingError) -> Allocation {
        var output: UnsafeMutablePointer<UInt8>?
        var length = 0
        var message = [CChar](repeating: 0, count: 256)
        let profile = iccProfile ?? []
        let outcome = image.withUnsafeBufferPointer { pixels in
            profile.withUnsafeBufferPointer { icc in
                encode(pixels.baseAddress!, icc.count > 0 ? icc.baseAddress : nil, icc.count, &output, &length, &message)
            }
        }
        let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        switch outcome {
        case .ok:
            guard let output else { throw ImagingError(.encodeFailed, "\(name) encoding produced nothing") }
            return Allocation(adopting: UnsafeMutableRawPointer(output), count: length)
        case .cancelled: throw ImagingError(.cancelled, "cancelled")
        case .noMemory: throw ImagingError(.tooLarge, "encoding \(image.width)×\(image.height) as \(name): \(text)")
        case .failed: throw ImagingError(.encodeFailed, "\(name) encoding failed: \(text)")
        }
    }

    public static func jpeg(_ image: PixelBuffer, quality: Int, progressive: Bool, chroma444: Bool,
                            cancel: CancellationFlag? = nil) throws(ImagingError) -> [UInt8] {
        try jpegOutput(image, quality: quality, progressive: progressive, chroma444: chroma444,
                       cancel: cancel, allocator: BufferAllocator()).copyBytes()
    }

    static func jpegOutput(_ image: PixelBuffer, quality: Int, progressive: Bool, chroma444: Bool,
                           iccProfile: [UInt8]? = nil, cancel: CancellationFlag?,
                           allocator: BufferAllocator) throws(ImagingError) -> Allocation {
        guard image.channels == 1 || image.channels == 3 else {
            throw ImagingError(.encodeFailed, "JPEG output needs 1 or 3 channels, not \(image.channels)")
        }
        var output: UnsafeMutablePointer<UInt8>?
        var length: UInt = 0
        var message = [CChar](repeating: 0, count: 256)
        let maxMemory = allocator.maxBytes == .max ? 0 : allocator.maxBytes
        let profile = iccProfile ?? []
        let status = image.withUnsafeBufferPointer { pixels in
            profile.withUnsafeBufferPointer { icc in
                ej_encode(pixels.baseAddress, Int32(image.width), Int32(image.height), Int32(image.channels),
                          Int32(quality), progressive ? 1 : 0, chroma444 ? 1 : 0, cancel?.storage, maxMemory,
                          icc.baseAddress, icc.count, &output, &length, &message, message.count)
            }
        }
        if status == EJ_ERR_CANCELLED { throw ImagingError(.cancelled, "cancelled") }
        let text = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        if status == EJ_ERR_NO_MEMORY {
            throw ImagingError(.tooLarge, "encoding \(image.width)×\(image.height): \(text)")
        }
        guard status == EJ_OK, let output else {
            throw ImagingError(.encodeFailed, text.isEmpty ? "JPEG encoding failed" : text)
        }
        // The shim's buffer comes from malloc: adopted as is, never copied.
        return Allocation(adopting: UnsafeMutableRawPointer(output), count: Int(length))
    }

    public static func pnm(_ image: PixelBuffer, cancel: CancellationFlag? = nil) throws(ImagingError) -> [UInt8] {
        try pnmOutput(image, cancel: cancel, allocator: BufferAllocator()).copyBytes()
    }

    static func pnmOutput(_ image: PixelBuffer, cancel: CancellationFlag?,
                          allocator: BufferAllocator) throws(ImagingError) -> Allocation {
        let magic: String
        switch image.channels {
        case 1: magic = "P5"
        case 3: magic = "P6"
        default: throw ImagingError(.encodeFailed, "PNM output needs 1 or 3 channels, not \(image.channels)")
        }
        let header = Array("\(magic)\n\(image.width) \(image.height)\n255\n".utf8)
        let memory = try allocator.allocate(header.count + image.byteCount, for: "the PNM output")
        let chunk = 4 << 20
        do throws(ImagingError) {
            try memory.withMemory(as: UInt8.self) { (out) throws(ImagingError) in
                _ = out.initialize(from: header)
                try image.withUnsafeBufferPointer { (pixels) throws(ImagingError) in
                    var done = 0
                    while done < pixels.count {
                        try cancel?.check()
                        let n = min(chunk, pixels.count - done)
                        (out.baseAddress! + header.count + done).initialize(from: pixels.baseAddress! + done, count: n)
                        done += n
                    }
                }
            }
        } catch {
            BufferReaper.release(memory)
            throw error
        }
        return memory
    }

    /// Parses a binary PGM/PPM (as written by `pnm`) back into pixels; used by tests and tools.
    public static func decodePNM(_ bytes: [UInt8]) throws(ImagingError) -> PixelBuffer {
        var fields: [String] = []
        var index = 0
        while fields.count < 4 && index < bytes.count {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
                index += 1
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "#") {
                while index < bytes.count, bytes[index] != 0x0A { index += 1 }
                continue
            }
            let start = index
            while index < bytes.count, !(bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09) {
                index += 1
            }
            fields.append(String(decoding: bytes[start..<index], as: UTF8.self))
        }
        index += 1  // the single whitespace byte before the raster
        guard fields.count == 4, let width = Int(fields[1]), let height = Int(fields[2]), fields[3] == "255",
              width > 0, height > 0 else {
            throw ImagingError(.corrupt, "not a binary 8-bit PNM")
        }
        let channels = fields[0] == "P5" ? 1 : fields[0] == "P6" ? 3 : 0
        guard channels > 0, bytes.count - index == width * height * channels else {
            throw ImagingError(.corrupt, "PNM raster size does not match its header")
        }
        return PixelBuffer(width: width, height: height, channels: channels, pixels: Array(bytes[index...]))
    }
}
