import XCTest
@testable import Imaging

final class EXIFTests: XCTestCase {
    /// Builds a TIFF block: IFD0 with the given entries, optionally linking an IFD1.
    private func tiff(bigEndian: Bool, ifd0: [(tag: UInt16, type: UInt16, value: UInt32)],
                      ifd1: [(tag: UInt16, type: UInt16, value: UInt32)]? = nil, tail: [UInt8] = []) -> [UInt8] {
        func u16(_ v: UInt16) -> [UInt8] { bigEndian ? [UInt8(v >> 8), UInt8(v & 0xFF)] : [UInt8(v & 0xFF), UInt8(v >> 8)] }
        func u32(_ v: UInt32) -> [UInt8] { bigEndian ? u16(UInt16(v >> 16)) + u16(UInt16(v & 0xFFFF)) : u16(UInt16(v & 0xFFFF)) + u16(UInt16(v >> 16)) }
        func entry(_ e: (tag: UInt16, type: UInt16, value: UInt32)) -> [UInt8] {
            // SHORT values sit in the first two bytes of the value field.
            u16(e.tag) + u16(e.type) + u32(1) + (e.type == 3 ? u16(UInt16(e.value)) + [0, 0] : u32(e.value))
        }
        var out: [UInt8] = (bigEndian ? Array("MM".utf8) : Array("II".utf8)) + u16(42) + u32(8)
        let ifd1Offset = ifd1 == nil ? 0 : 8 + 2 + ifd0.count * 12 + 4
        out += u16(UInt16(ifd0.count)) + ifd0.flatMap(entry) + u32(UInt32(ifd1Offset))
        if let ifd1 { out += u16(UInt16(ifd1.count)) + ifd1.flatMap(entry) + u32(0) }
        return out + tail
    }

    private func parse(_ bytes: [UInt8]) -> EXIFMetadata { bytes.withUnsafeBytes { EXIFMetadata(tiff: $0) } }

    func testOrientationInBothByteOrdersAndTypes() {
        for bigEndian in [false, true] {
            for value in 1...8 {
                XCTAssertEqual(parse(tiff(bigEndian: bigEndian, ifd0: [(0x0112, 3, UInt32(value))])).orientation.rawValue, value)
                XCTAssertEqual(parse(tiff(bigEndian: bigEndian, ifd0: [(0x0112, 9, UInt32(value))])).orientation.rawValue, value)
            }
        }
    }

    func testInvalidOrientationIsIgnored() {
        for value: UInt32 in [0, 9, 65535] {
            XCTAssertEqual(parse(tiff(bigEndian: false, ifd0: [(0x0112, 3, value)])).orientation, .up)
        }
        XCTAssertEqual(parse(tiff(bigEndian: false, ifd0: [(0x0112, 2, 6)])).orientation, .up, "ASCII type is not a number")
    }

    func testThumbnailLocation() {
        let entriesSize = 8 + 2 + 12 + 4 + 2 + 24 + 4
        let thumb: [UInt8] = [0xFF, 0xD8, 0xFF, 0xD9, 0, 0]
        let bytes = tiff(bigEndian: true, ifd0: [(0x0112, 3, 6)],
                         ifd1: [(0x0201, 4, UInt32(entriesSize)), (0x0202, 4, UInt32(thumb.count))], tail: thumb)
        let exif = parse(bytes)
        XCTAssertEqual(exif.orientation, .right)
        XCTAssertEqual(exif.thumbnail, entriesSize..<(entriesSize + thumb.count))
        // A thumbnail that runs past the block, or is not a JPEG, is not offered.
        let overrun = tiff(bigEndian: true, ifd0: [(0x0112, 3, 6)],
                           ifd1: [(0x0201, 4, UInt32(entriesSize)), (0x0202, 4, 1000)], tail: thumb)
        XCTAssertNil(parse(overrun).thumbnail)
        let notJPEG = tiff(bigEndian: true, ifd0: [(0x0112, 3, 6)],
                           ifd1: [(0x0201, 4, UInt32(entriesSize)), (0x0202, 4, 6)], tail: [1, 2, 3, 4, 5, 6])
        XCTAssertNil(parse(notJPEG).thumbnail)
    }

    /// Every truncation and a sweep of single-byte corruptions of a valid block must parse
    /// without trapping (the parser is bounds-checked; the outcome may be anything valid).
    func testTruncatedAndCorruptBlocksNeverTrap() {
        let entriesSize = 8 + 2 + 12 + 4 + 2 + 24 + 4
        let bytes = tiff(bigEndian: false, ifd0: [(0x0112, 3, 3)],
                         ifd1: [(0x0201, 4, UInt32(entriesSize)), (0x0202, 4, 6)], tail: [0xFF, 0xD8, 0xFF, 0xD9, 0, 0])
        XCTAssertEqual(parse(bytes).orientation, .down)
        for length in 0..<bytes.count { _ = parse(Array(bytes.prefix(length))) }
        for index in bytes.indices {
            for value: UInt8 in [0x00, 0xFF, 0x7F] {
                var corrupt = bytes
                corrupt[index] = value
                let exif = parse(corrupt)
                if let range = exif.thumbnail { XCTAssertLessThanOrEqual(range.upperBound, corrupt.count) }
            }
        }
        XCTAssertEqual(parse(Array("garbage!".utf8)), EXIFMetadata())
    }
}
