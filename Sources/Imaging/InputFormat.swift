import ImageModel

/// The formats Enlarger decodes, told apart by their first bytes (never by a file name).
public enum InputFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp, heic, avif, gif, jxl

    /// The format of `bytes`, or `.unknownFormat` (or `.empty`) naming what they look like instead.
    public static func of(_ bytes: [UInt8]) throws(ImagingError) -> InputFormat {
        try withBytes(bytes) { raw throws(ImagingError) in try detect(raw, limits: DecodeLimits(maxInputBytes: .max)) }
    }

    /// The format of `data`, or `.unknownFormat` naming what it looks like instead. Checks the
    /// input limits first.
    static func detect(_ data: UnsafeRawBufferPointer, limits: DecodeLimits) throws(ImagingError) -> InputFormat {
        if data.isEmpty { throw ImagingError(.empty, "the input is empty (0 bytes)") }
        if data.count > limits.maxInputBytes {
            throw ImagingError(.tooLarge, "\(data.count) bytes exceeds the input limit of \(limits.maxInputBytes) bytes")
        }
        if data.starts(with: [0xFF, 0xD8]) { return .jpeg }
        if data.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if data.count >= 12, data.starts(with: Array("RIFF".utf8)), data[8..<12].elementsEqual("WEBP".utf8) { return .webp }
        if let format = heifFormat(data) { return format }
        if data.starts(with: Array("GIF87a".utf8)) || data.starts(with: Array("GIF89a".utf8)) { return .gif }
        // JPEG XL: a bare codestream, or the container's signature box.
        if data.starts(with: [0xFF, 0x0A]) || data.starts(with: [0, 0, 0, 0x0C, 0x4A, 0x58, 0x4C, 0x20, 0x0D, 0x0A, 0x87, 0x0A]) {
            return .jxl
        }
        let signatures: [(prefix: [UInt8], name: String)] = [
            ([0x47, 0x49, 0x46, 0x38], "a GIF of an unknown version"), ([0x49, 0x49, 0x2A, 0x00], "a TIFF image"),
            ([0x4D, 0x4D, 0x00, 0x2A], "a TIFF image"), ([0x52, 0x49, 0x46, 0x46], "a RIFF file that is not WebP"),
            ([0x42, 0x4D], "a BMP image"), ([0x25, 0x50, 0x44, 0x46], "a PDF document"),
            ([0x3C, 0x3F, 0x78, 0x6D, 0x6C], "an XML (SVG?) document"), ([0x3C, 0x73, 0x76, 0x67], "an SVG document"),
            ([0x00, 0x00, 0x00, 0x0C, 0x4A, 0x58, 0x4C, 0x20], "a JPEG XL container with a damaged signature"),
            ([0x00, 0x00, 0x00, 0x0C, 0x6A, 0x50, 0x20, 0x20], "a JPEG 2000 image"),
        ]
        var looksLike = signatures.first { data.starts(with: $0.prefix) }?.name
        // A PNG whose signature was damaged (in transfer, or by hand) still has its IHDR
        // where a PNG's is: named for what it is, though no PNG reader takes it.
        if looksLike == nil, data.count >= 16, data[12..<16].elementsEqual("IHDR".utf8) {
            let signature = data.prefix(8).map { "0x" + ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined(separator: " ")
            looksLike = "a PNG whose signature is damaged (\(signature))"
        }
        let head = data.prefix(4).map { "0x" + ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined(separator: " ")
        throw ImagingError(.unknownFormat, "not an image Enlarger reads (JPEG, PNG, WebP, HEIC, AVIF, GIF, JPEG XL): "
                           + (looksLike ?? "it starts with \(head)"))
    }

    /// HEIC or AVIF from the `ftyp` box: its major brand, else its compatible brands.
    private static func heifFormat(_ data: UnsafeRawBufferPointer) -> InputFormat? {
        guard data.count >= 16, data[4..<8].elementsEqual("ftyp".utf8) else { return nil }
        let boxSize = Int(data[0]) << 24 | Int(data[1]) << 16 | Int(data[2]) << 8 | Int(data[3])
        let end = min(data.count, max(16, boxSize))
        func brand(at offset: Int) -> String { String(decoding: data[offset..<offset + 4], as: UTF8.self) }
        var brands = [brand(at: 8)]
        var offset = 16
        while offset + 4 <= end {
            brands.append(brand(at: offset))
            offset += 4
        }
        let avif: Set = ["avif", "avis"], heic: Set = ["heic", "heix", "heim", "heis", "hevc", "hevx", "hevm", "hevs"]
        let still: Set = ["mif1", "msf1"]
        if avif.contains(brands[0]) { return .avif }
        if heic.contains(brands[0]) { return .heic }
        if brands.contains(where: avif.contains) { return .avif }
        if brands.contains(where: heic.contains) || brands.contains(where: still.contains) { return .heic }
        return nil
    }
}
