/// What Enlarger takes from an EXIF block: the orientation and where the embedded thumbnail
/// is. Parsing is defensive: any structural problem yields what was found so far (or
/// nothing), never an error, because a broken EXIF block must never fail an image.
public struct EXIFMetadata: Sendable, Equatable {
    /// The orientation to apply; `.up` when absent or invalid (0, > 8, wrong type).
    public var orientation: Orientation = .up
    /// Byte range of the embedded JPEG thumbnail within the TIFF payload, if valid.
    public var thumbnail: Range<Int>?

    public init(orientation: Orientation = .up, thumbnail: Range<Int>? = nil) {
        self.orientation = orientation
        self.thumbnail = thumbnail
    }

    /// Parses the TIFF structure that follows the `Exif\0\0` header of an APP1 segment.
    public init(tiff: UnsafeRawBufferPointer) {
        var reader = TIFFReader(bytes: tiff)
        guard let firstIFD = reader.header() else { return }
        // IFD0 holds the orientation; the IFD it links to (IFD1) describes the thumbnail.
        guard let ifd0 = reader.entries(at: firstIFD) else { return }
        if let entry = ifd0.entries.first(where: { $0.tag == 0x0112 }),
           let value = reader.integer(entry), let orientation = Orientation(rawValue: value) {
            self.orientation = orientation
        }
        guard ifd0.next != 0, ifd0.next != firstIFD, let ifd1 = reader.entries(at: ifd0.next) else { return }
        guard let offsetEntry = ifd1.entries.first(where: { $0.tag == 0x0201 }),
              let lengthEntry = ifd1.entries.first(where: { $0.tag == 0x0202 }),
              let offset = reader.integer(offsetEntry), let length = reader.integer(lengthEntry),
              offset > 0, length > 4, offset <= tiff.count, length <= tiff.count - offset
        else { return }
        // Only a thumbnail that at least starts like a JPEG is worth offering.
        guard tiff[offset] == 0xFF, tiff[offset + 1] == 0xD8 else { return }
        thumbnail = offset..<(offset + length)
    }
}

/// A bounds-checked reader of the little- or big-endian TIFF layout used by EXIF.
private struct TIFFReader {
    struct Entry { var tag: Int; var type: Int; var count: Int; var valueOffset: Int }
    struct Directory { var entries: [Entry]; var next: Int }

    let bytes: UnsafeRawBufferPointer
    var bigEndian = false

    init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// Validates the byte-order mark and magic; returns the offset of IFD0.
    mutating func header() -> Int? {
        guard bytes.count >= 8 else { return nil }
        switch (bytes[0], bytes[1]) {
        case (0x49, 0x49): bigEndian = false
        case (0x4D, 0x4D): bigEndian = true
        default: return nil
        }
        guard u16(2) == 42, let offset = u32(4), offset >= 8 else { return nil }
        return offset
    }

    func u16(_ at: Int) -> Int? {
        guard at >= 0, at + 2 <= bytes.count else { return nil }
        let a = Int(bytes[at]), b = Int(bytes[at + 1])
        return bigEndian ? a << 8 | b : b << 8 | a
    }

    func u32(_ at: Int) -> Int? {
        guard let hi = u16(bigEndian ? at : at + 2), let lo = u16(bigEndian ? at + 2 : at) else { return nil }
        return hi << 16 | lo
    }

    func entries(at offset: Int) -> Directory? {
        guard let count = u16(offset), count > 0 else { return nil }
        var entries: [Entry] = []
        entries.reserveCapacity(min(count, 64))
        for index in 0..<count {
            let at = offset + 2 + index * 12
            guard let tag = u16(at), let type = u16(at + 2), let n = u32(at + 4) else { return nil }
            entries.append(Entry(tag: tag, type: type, count: n, valueOffset: at + 8))
        }
        return Directory(entries: entries, next: u32(offset + 2 + count * 12) ?? 0)
    }

    /// A single integer value (SHORT, LONG, SSHORT or SLONG), stored inline.
    func integer(_ entry: Entry) -> Int? {
        guard entry.count == 1 else { return nil }
        switch entry.type {
        case 3, 8: return u16(entry.valueOffset)
        case 4: return u32(entry.valueOffset)
        case 9: return u32(entry.valueOffset).map { Int(Int32(truncatingIfNeeded: $0)) }
        default: return nil
        }
    }
}
