import CJPEG

/// Encoded output of one stage.
public struct EncodedImage: Sendable, Equatable {
    public var bytes: [UInt8]
    public var width: Int
    public var height: Int
    public var format: OutputFormat

    public init(bytes: [UInt8], width: Int, height: Int, format: OutputFormat) {
        self.bytes = bytes
        self.width = width
        self.height = height
        self.format = format
    }
}

public enum Encoder {
    /// Encodes gray or RGB pixels. JPEG output carries no metadata (orientation is already
    /// applied, so no tag is needed); PNM output is binary PGM (gray) or PPM (RGB).
    /// `cancel` is polled every few rows (JPEG) or megabytes (PNM).
    public static func encode(_ image: PixelBuffer, format: OutputFormat, quality: Int = 80,
                              progressive: Bool = false, chroma444: Bool = false,
                              cancel: CancellationFlag? = nil) throws(ImagingError) -> EncodedImage {
        switch format {
        case .jpeg:
            let bytes = try jpeg(image, quality: quality, progressive: progressive, chroma444: chroma444, cancel: cancel)
            return EncodedImage(bytes: bytes, width: image.width, height: image.height, format: .jpeg)
        case .pnm:
            return EncodedImage(bytes: try pnm(image, cancel: cancel), width: image.width, height: image.height, format: .pnm)
        }
    }

    public static func jpeg(_ image: PixelBuffer, quality: Int, progressive: Bool, chroma444: Bool,
                            cancel: CancellationFlag? = nil) throws(ImagingError) -> [UInt8] {
        guard image.channels == 1 || image.channels == 3 else {
            throw ImagingError(.encodeFailed, "JPEG output needs 1 or 3 channels, not \(image.channels)")
        }
        var output: UnsafeMutablePointer<UInt8>?
        var length: UInt = 0
        var message = [CChar](repeating: 0, count: 256)
        let status = image.pixels.withUnsafeBufferPointer { pixels in
            ej_encode(pixels.baseAddress, Int32(image.width), Int32(image.height), Int32(image.channels),
                      Int32(quality), progressive ? 1 : 0, chroma444 ? 1 : 0, cancel?.storage, &output, &length,
                      &message, message.count)
        }
        if status == EJ_ERR_CANCELLED { throw ImagingError(.cancelled, "cancelled") }
        guard status == EJ_OK, let output else {
            let text = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw ImagingError(.encodeFailed, text.isEmpty ? "JPEG encoding failed" : text)
        }
        defer { ej_free(output) }
        return Array(UnsafeBufferPointer(start: output, count: Int(length)))
    }

    public static func pnm(_ image: PixelBuffer, cancel: CancellationFlag? = nil) throws(ImagingError) -> [UInt8] {
        let magic: String
        switch image.channels {
        case 1: magic = "P5"
        case 3: magic = "P6"
        default: throw ImagingError(.encodeFailed, "PNM output needs 1 or 3 channels, not \(image.channels)")
        }
        let header = Array("\(magic)\n\(image.width) \(image.height)\n255\n".utf8)
        let chunk = 4 << 20
        var cancelled = false
        let bytes = [UInt8](unsafeUninitializedCapacity: header.count + image.pixels.count) { out, count in
            count = out.count
            _ = out.initialize(from: header)
            image.pixels.withUnsafeBufferPointer { pixels in
                var done = 0
                while done < pixels.count {
                    if cancel?.isCancelled == true {
                        cancelled = true
                        return
                    }
                    let n = min(chunk, pixels.count - done)
                    (out.baseAddress! + header.count + done).initialize(from: pixels.baseAddress! + done, count: n)
                    done += n
                }
            }
        }
        if cancelled { throw ImagingError(.cancelled, "cancelled") }
        return bytes
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
