/// The marker segments at the head of a JPEG (APPn, DQT, SOFn, ...), read without libjpeg:
/// gain maps live in segments libjpeg does not keep (MPF, XMP) and in bytes after the
/// primary image's end, which it never reads.
struct JPEGSegment: Equatable {
    /// The marker's second byte (0xE1 for APP1, ...).
    let marker: UInt8
    /// Where the segment starts in the data (its 0xFF), and its payload (after the length).
    let start: Int
    let payload: Range<Int>

    /// The whole segment, marker and length included.
    var bytes: Range<Int> { start..<payload.upperBound }
}

enum JPEGSegments {
    /// More segments than any real file has before its first scan: a bound on the work a
    /// hostile header can cause.
    static let maxSegments = 1024

    /// The segments from SOI up to the first SOS (or EOI), in order; nil when the data does not
    /// start with SOI, a length runs past the end, or there are more than `maxSegments`.
    static func scan(_ data: UnsafeRawBufferPointer) -> [JPEGSegment]? {
        guard data.count >= 4, data[0] == 0xFF, data[1] == 0xD8 else { return nil }
        var segments: [JPEGSegment] = []
        var position = 2
        while position + 1 < data.count {
            guard data[position] == 0xFF else { return nil }
            // Fill bytes: any number of 0xFF before the marker.
            var markerAt = position + 1
            while markerAt < data.count && data[markerAt] == 0xFF { markerAt += 1 }
            guard markerAt < data.count else { return nil }
            let marker = data[markerAt]
            if marker == 0xDA || marker == 0xD9 { return segments }
            // Standalone markers carry no length.
            if marker == 0x01 || (0xD0...0xD7).contains(marker) {
                position = markerAt + 1
                continue
            }
            guard markerAt + 2 < data.count else { return nil }
            let length = Int(data[markerAt + 1]) << 8 | Int(data[markerAt + 2])
            let end = markerAt + 1 + length
            guard length >= 2, end <= data.count, segments.count < maxSegments else { return nil }
            segments.append(JPEGSegment(marker: marker, start: position, payload: (markerAt + 3)..<end))
            position = end
        }
        return nil
    }

    /// Whether the segment's payload starts with `signature`.
    static func payload(_ data: UnsafeRawBufferPointer, of segment: JPEGSegment, startsWith signature: [UInt8]) -> Bool {
        segment.payload.count >= signature.count
            && signature.indices.allSatisfy { data[segment.payload.lowerBound + $0] == signature[$0] }
    }

    /// A segment's bytes (marker, length and payload) for `payload`; nil when it is too long
    /// for one segment.
    static func segment(marker: UInt8, payload: [UInt8]) -> [UInt8]? {
        let length = payload.count + 2
        guard length <= 0xFFFF else { return nil }
        return [0xFF, marker, UInt8(length >> 8), UInt8(length & 0xFF)] + payload
    }
}
