import Foundation
import ImageModel

// HDR gain maps in JPEG (UltraHDR, ISO 21496-1). A phone's HDR photo is an ordinary SDR JPEG
// (the primary image) followed, after its end, by a second JPEG: the gain map, one or three
// channels, often at a quarter of the resolution, saying per pixel how much brighter the HDR
// rendition is (log2, between the metadata's min and max). The primary's MPF segment (CIPA
// DC-007) indexes both images by offset; the gain map's own XMP (the `hdrgm` namespace) or
// ISO 21496-1 block carries the metadata that gives its pixels meaning. None of it depends on
// the image's size, so a resize keeps the metadata as it is and resizes only the map, with the
// primary's crop and orientation.

/// A gain map found in a JPEG.
struct GainMapSource {
    /// The gain map JPEG, within the input.
    let range: Range<Int>
    /// The gain map's metadata segments (its `hdrgm` XMP, its ISO 21496-1 block), whole, to be
    /// written back unchanged in front of the resized map.
    let metadataSegments: [[UInt8]]
    /// The primary's ISO 21496-1 version block, whole (written back in the output's primary).
    let primaryISOSegment: [UInt8]?
    /// The metadata came as `hdrgm` XMP (UltraHDR): the output's primary then lists the map in
    /// an XMP container directory, as UltraHDR readers expect.
    let hasXMPMetadata: Bool
    /// What the XMP says (for `apply`); nil without XMP.
    let parameters: GainMapParameters?

    static let xmpSignature = Array("http://ns.adobe.com/xap/1.0/\0".utf8)
    static let isoSignature = Array("urn:iso:std:iso:ts:21496:-1\0".utf8)
    static let mpfSignature = Array("MPF\0".utf8)
    static let hdrgmNamespace = "http://ns.adobe.com/hdr-gain-map/1.0/"
    /// MPF indexes at most this many images here (a real file has 2 or 3).
    static let maxIndexedImages = 16

    /// The gain map of a JPEG, or nil when it has none: no MPF index, or no indexed image whose
    /// own metadata says it is a gain map. Every offset is checked against the data; a broken
    /// index is no gain map (the primary image decodes as before).
    static func find(in data: UnsafeRawBufferPointer) -> GainMapSource? {
        guard let primary = JPEGSegments.scan(data) else { return nil }
        let primaryISO = primary.first {
            $0.marker == 0xE2 && JPEGSegments.payload(data, of: $0, startsWith: isoSignature)
        }.map { Array(data[$0.bytes]) }
        guard let mpf = primary.first(where: {
            $0.marker == 0xE2 && JPEGSegments.payload(data, of: $0, startsWith: mpfSignature)
        }) else { return nil }
        for range in indexedImages(data, mpf: mpf) {
            let image = UnsafeRawBufferPointer(rebasing: data[range])
            guard let segments = JPEGSegments.scan(image) else { continue }
            var metadata: [[UInt8]] = []
            var parameters: GainMapParameters?
            for segment in segments {
                if segment.marker == 0xE1, JPEGSegments.payload(image, of: segment, startsWith: xmpSignature) {
                    let xml = String(decoding: image[segment.payload].dropFirst(xmpSignature.count), as: UTF8.self)
                    guard xml.contains(hdrgmNamespace) else { continue }
                    metadata.append(Array(image[segment.bytes]))
                    parameters = GainMapParameters(xmp: xml)
                } else if segment.marker == 0xE2, JPEGSegments.payload(image, of: segment, startsWith: isoSignature) {
                    metadata.append(Array(image[segment.bytes]))
                }
            }
            guard !metadata.isEmpty else { continue }
            return GainMapSource(range: range, metadataSegments: metadata, primaryISOSegment: primaryISO,
                                 hasXMPMetadata: parameters != nil, parameters: parameters)
        }
        return nil
    }

    /// The byte ranges of the images an MPF index lists after the first (the primary), each
    /// checked to lie within the data and start with SOI.
    static func indexedImages(_ data: UnsafeRawBufferPointer, mpf: JPEGSegment) -> [Range<Int>] {
        // Offsets count from the TIFF header that follows the signature.
        let base = mpf.payload.lowerBound + mpfSignature.count
        let end = mpf.payload.upperBound
        guard end - base >= 8 else { return [] }
        let bigEndian: Bool
        switch (data[base], data[base + 1]) {
        case (0x4D, 0x4D): bigEndian = true
        case (0x49, 0x49): bigEndian = false
        default: return []
        }
        func u16(_ at: Int) -> Int? {
            guard at >= base, at + 2 <= end else { return nil }
            return bigEndian ? Int(data[at]) << 8 | Int(data[at + 1]) : Int(data[at + 1]) << 8 | Int(data[at])
        }
        func u32(_ at: Int) -> Int? {
            guard let high = u16(bigEndian ? at : at + 2), let low = u16(bigEndian ? at + 2 : at) else { return nil }
            return high << 16 | low
        }
        guard let ifd = u32(base + 4).map({ base + $0 }), let count = u16(ifd), count <= 64 else { return [] }
        var entries: (at: Int, count: Int)?
        for index in 0..<count {
            let entry = ifd + 2 + index * 12
            guard let tag = u16(entry), let type = u16(entry + 2), let length = u32(entry + 4) else { return [] }
            // MPEntry: UNDEFINED bytes, 16 per image, stored at an offset (it never fits in 4).
            if tag == 0xB002, type == 7, length % 16 == 0, let offset = u32(entry + 8) {
                entries = (base + offset, length / 16)
            }
        }
        guard let entries, entries.count >= 2 else { return [] }
        var ranges: [Range<Int>] = []
        for image in 1..<min(entries.count, maxIndexedImages) {
            let entry = entries.at + image * 16
            guard let size = u32(entry + 4), let offset = u32(entry + 8), offset > 0 else { continue }
            let start = base + offset
            guard size >= 4, start < data.count, size <= data.count - start,
                  data[start] == 0xFF, data[start + 1] == 0xD8 else { continue }
            ranges.append(start..<(start + size))
        }
        return ranges
    }
}

/// The `hdrgm` metadata that `apply` needs (Adobe's gain map specification): values are
/// log2, one per channel or one for all.
struct GainMapParameters: Equatable {
    var gainMapMin: [Double] = [0]
    var gainMapMax: [Double] = [1]
    var gamma: [Double] = [1]
    var offsetSDR: [Double] = [1.0 / 64]
    var offsetHDR: [Double] = [1.0 / 64]
    var baseRenditionIsHDR = false

    init(gainMapMin: [Double] = [0], gainMapMax: [Double] = [1], gamma: [Double] = [1],
         offsetSDR: [Double] = [1.0 / 64], offsetHDR: [Double] = [1.0 / 64], baseRenditionIsHDR: Bool = false) {
        self.gainMapMin = gainMapMin
        self.gainMapMax = gainMapMax
        self.gamma = gamma
        self.offsetSDR = offsetSDR
        self.offsetHDR = offsetHDR
        self.baseRenditionIsHDR = baseRenditionIsHDR
    }

    /// Reads the attributes (`hdrgm:GainMapMax="6.6"`) or elements (`<hdrgm:GainMapMax>`, with
    /// an `rdf:Seq` of three values for a three-channel map) of an XMP packet; what is missing
    /// keeps the specification's default.
    init(xmp: String) {
        func values(_ name: String) -> [Double]? {
            let attribute = "hdrgm:\(name)=\""
            if let start = xmp.range(of: attribute)?.upperBound, let end = xmp[start...].firstIndex(of: "\"") {
                return Double(xmp[start..<end].trimmingCharacters(in: .whitespaces)).map { [$0] }
            }
            guard let open = xmp.range(of: "<hdrgm:\(name)>")?.upperBound,
                  let close = xmp.range(of: "</hdrgm:\(name)>", range: open..<xmp.endIndex)?.lowerBound else { return nil }
            // Text with the tags taken out: a number, or three from the rdf:li items.
            var text = ""
            var inTag = false
            for character in xmp[open..<close] {
                if character == "<" { inTag = true; text.append(" ") } else if character == ">" { inTag = false } else if !inTag {
                    text.append(character)
                }
            }
            let numbers = text.split(whereSeparator: \.isWhitespace).compactMap { Double($0) }
            return numbers.count == 1 || numbers.count == 3 ? numbers : nil
        }
        if let v = values("GainMapMin") { gainMapMin = v }
        if let v = values("GainMapMax") { gainMapMax = v }
        if let v = values("Gamma") { gamma = v }
        if let v = values("OffsetSDR") { offsetSDR = v }
        if let v = values("OffsetHDR") { offsetHDR = v }
        for form in ["hdrgm:BaseRenditionIsHDR=\"", "<hdrgm:BaseRenditionIsHDR>"] {
            if let start = xmp.range(of: form)?.upperBound {
                baseRenditionIsHDR = xmp[start...].lowercased().hasPrefix("true")
            }
        }
    }

    /// Channel `c`'s value of a list of one or three.
    static func channel(_ list: [Double], _ c: Int) -> Double { list.count == 3 ? list[c] : list[0] }

    /// From an HDR base to the SDR rendition, on sRGB-encoded `base` (grey or RGB): the map
    /// holds G = log2((HDR + offsetHDR) / (SDR + offsetSDR)), so SDR = (HDR + offsetHDR) / 2^G
    /// - offsetSDR, in linear light. `map` is the gain map at the base's size and orientation.
    func toneMapped(_ base: PixelBuffer, map: PixelBuffer, allocator: BufferAllocator) throws(ImagingError) -> PixelBuffer {
        precondition(base.width == map.width && base.height == map.height && base.channels != 4)
        let channels = base.channels, mapChannels = map.channels
        let decode = (0..<256).map { SRGB.toLinear(Double($0) / 255) }
        // The factor 2^-G for each 8-bit map value, per channel.
        let factors = (0..<3).map { c in
            (0..<256).map { value -> Double in
                let gamma = Self.channel(gamma, c), low = Self.channel(gainMapMin, c)
                let recovered = pow(Double(value) / 255, gamma > 0 ? 1 / gamma : 1)
                return exp2(-(low + recovered * (Self.channel(gainMapMax, c) - low)))
            }
        }
        let offsets = (0..<3).map { (Self.channel(offsetHDR, $0), Self.channel(offsetSDR, $0)) }
        return try PixelBuffer.make(width: base.width, height: base.height, channels: channels, allocator: allocator,
                                    what: "the tone-mapped image") { (out) throws(ImagingError) in
            base.withUnsafeBufferPointer { pixels in
                map.withUnsafeBufferPointer { gains in
                    for pixel in 0..<(base.width * base.height) {
                        for c in 0..<channels {
                            let value = Int(gains[pixel * mapChannels + (mapChannels == 3 ? c : 0)])
                            let hdr = decode[Int(pixels[pixel * channels + c])]
                            let sdr = (hdr + offsets[c].0) * factors[c][value] - offsets[c].1
                            out[pixel * channels + c] = UInt8((SRGB.fromLinear(min(1, max(0, sdr))) * 255).rounded())
                        }
                    }
                }
            }
        }
    }
}

/// The sRGB transfer function, both ways, on 0…1.
enum SRGB {
    static func toLinear(_ v: Double) -> Double { v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4) }
    static func fromLinear(_ v: Double) -> Double { v <= 0.0031308 ? v * 12.92 : 1.055 * pow(v, 1 / 2.4) - 0.055 }
}

/// Writes a JPEG with its gain map: the primary with an MPF index (and, for UltraHDR, an XMP
/// container directory) in front, the gain map after its end.
enum GainMapContainer {
    /// The gain map's JPEG with the source's metadata segments put back after its SOI.
    static func gainMapJPEG(_ encoded: [UInt8], source: GainMapSource) -> [UInt8] {
        precondition(encoded.starts(with: [0xFF, 0xD8]))
        return [0xFF, 0xD8] + source.metadataSegments.flatMap { $0 } + encoded.dropFirst(2)
    }

    /// The primary JPEG followed by the gain map JPEG, indexed. `primary` is a JPEG as the
    /// encoder makes it (SOI, then its own segments); the index goes after SOI and JFIF.
    static func assemble(primary: UnsafeRawBufferPointer, gainMap: [UInt8], source: GainMapSource) -> [UInt8] {
        precondition(primary.starts(with: [0xFF, 0xD8]))
        // After SOI, and after a JFIF APP0 (which must come first).
        var head = 2
        if primary.count > 6, primary[2] == 0xFF, primary[3] == 0xE0 {
            head = 4 + (Int(primary[4]) << 8 | Int(primary[5]))
        }
        var inserted: [UInt8] = []
        if source.hasXMPMetadata, let xmp = JPEGSegments.segment(marker: 0xE1, payload: GainMapSource.xmpSignature
                                                                  + Array(containerXMP(gainMapLength: gainMap.count).utf8)) {
            inserted += xmp
        }
        if let iso = source.primaryISOSegment { inserted += iso }
        // The MPF segment's size does not depend on the offsets it holds, so where its TIFF
        // header lands, and the primary's length, are known before it is written.
        let mpfAt = head + inserted.count
        let tiffHeader = mpfAt + 4 + GainMapSource.mpfSignature.count
        let primaryLength = primary.count + inserted.count + mpfSegmentLength
        let mpf = mpfSegment(primaryLength: primaryLength, gainMapLength: gainMap.count,
                             gainMapOffset: primaryLength - tiffHeader)
        var output: [UInt8] = []
        output.reserveCapacity(primaryLength + gainMap.count)
        output += primary[0..<head]
        output += inserted
        output += mpf
        output += primary[head...]
        output += gainMap
        return output
    }

    /// The MPF segment's bytes: marker, length, signature, then a big-endian TIFF header, one
    /// IFD (version, image count, the entries' offset) and two 16-byte MP entries.
    static let mpfSegmentLength = 4 + 4 + 8 + 2 + 3 * 12 + 4 + 2 * 16

    static func mpfSegment(primaryLength: Int, gainMapLength: Int, gainMapOffset: Int) -> [UInt8] {
        var tiff: [UInt8] = []
        func u16(_ v: Int) { tiff += [UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
        func u32(_ v: Int) { u16(v >> 16 & 0xFFFF); u16(v & 0xFFFF) }
        tiff += Array("MM".utf8)
        u16(0x2A)
        u32(8)  // the IFD follows the header
        u16(3)
        u16(0xB000); u16(7); u32(4); tiff += Array("0100".utf8)  // MPFVersion
        u16(0xB001); u16(4); u32(1); u32(2)  // NumberOfImages
        let entriesAt = 8 + 2 + 3 * 12 + 4
        u16(0xB002); u16(7); u32(32); u32(entriesAt)  // MPEntry
        u32(0)  // no next IFD
        // The primary: a baseline MP primary image at offset 0; the gain map: type undefined,
        // as UltraHDR writes it.
        u32(0x0003_0000); u32(primaryLength); u32(0); u16(0); u16(0)
        u32(0); u32(gainMapLength); u32(gainMapOffset); u16(0); u16(0)
        let segment = JPEGSegments.segment(marker: 0xE2, payload: GainMapSource.mpfSignature + tiff)!
        assert(segment.count == mpfSegmentLength)
        return segment
    }

    /// UltraHDR's XMP for the primary: the gain map version, and a container directory naming
    /// the primary and the gain map (with its length) in file order.
    static func containerXMP(gainMapLength: Int) -> String {
        """
        <x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\
        <rdf:Description xmlns:Container="http://ns.google.com/photos/1.0/container/" \
        xmlns:Item="http://ns.google.com/photos/1.0/container/item/" \
        xmlns:hdrgm="\(GainMapSource.hdrgmNamespace)" hdrgm:Version="1.0"><Container:Directory><rdf:Seq>\
        <rdf:li rdf:parseType="Resource"><Container:Item Item:Semantic="Primary" Item:Mime="image/jpeg"/></rdf:li>\
        <rdf:li rdf:parseType="Resource"><Container:Item Item:Semantic="GainMap" Item:Mime="image/jpeg" \
        Item:Length="\(gainMapLength)"/></rdf:li></rdf:Seq></Container:Directory></rdf:Description></rdf:RDF>\
        </x:xmpmeta>
        """
    }
}
