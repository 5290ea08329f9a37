import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// Writes GIFs for the tests: any screen, palette, transparency, first-image placement and
/// interlacing. The LZW data is "uncompressed": one 9-bit code per pixel, with a clear code
/// before the table would grow past 9 bits, which every GIF reader must read.
enum GIFWriter {
    struct Image {
        var left = 0, top = 0, width: Int, height: Int
        var interlaced = false
        /// Palette indices, row by row in display order (the writer stores them interlaced
        /// when asked).
        var indices: [UInt8]
        /// Its own colour table (RGB triples), instead of the global one.
        var palette: [UInt8]?
    }

    static func make(screenWidth: Int, screenHeight: Int, palette: [UInt8]?, transparent: Int? = nil,
                     looping: Bool = false, comment: Bool = false, images: [Image]) -> [UInt8] {
        var out = Array("GIF89a".utf8)
        out += le16(screenWidth) + le16(screenHeight)
        let global = palette.map(padded)
        out += [global.map { 0x80 | UInt8($0.bits - 1) } ?? 0, 0, 0]
        out += global?.table ?? []
        if looping { out += [0x21, 0xFF, 11] + Array("NETSCAPE2.0".utf8) + [3, 1, 0, 0, 0] }
        if comment { out += [0x21, 0xFE, 5] + Array("hello".utf8) + [0] }
        for image in images {
            if let transparent {
                out += [0x21, 0xF9, 4, 0x01, 10, 0, UInt8(transparent), 0]
            }
            out += [0x2C] + le16(image.left) + le16(image.top) + le16(image.width) + le16(image.height)
            let local = image.palette.map(padded)
            out += [(local.map { 0x80 | UInt8($0.bits - 1) } ?? 0) | (image.interlaced ? 0x40 : 0)]
            out += local?.table ?? []
            out += [8] + subBlocks(lzw(stored(image)))
        }
        return out + [0x3B]
    }

    private static func le16(_ value: Int) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }

    /// A colour table padded with black to a power of two (2 to 256 entries).
    private static func padded(_ palette: [UInt8]) -> (table: [UInt8], bits: Int) {
        var bits = 1
        while 1 << bits < palette.count / 3 { bits += 1 }
        return (palette + [UInt8](repeating: 0, count: 3 * (1 << bits) - palette.count), bits)
    }

    /// The rows in stored order: GIF's four passes when interlaced.
    private static func stored(_ image: Image) -> [UInt8] {
        guard image.interlaced else { return image.indices }
        var rows: [Int] = []
        for (start, step) in [(0, 8), (4, 8), (2, 4), (1, 2)] { rows += stride(from: start, to: image.height, by: step) }
        return rows.flatMap { image.indices[$0 * image.width..<($0 + 1) * image.width] }
    }

    /// Minimum code size 8: clear 256, end 257, 9-bit codes, least significant bit first.
    private static func lzw(_ indices: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = [], accumulator = 0, count = 0
        func put(_ code: Int) {
            accumulator |= code << count
            count += 9
            while count >= 8 {
                bytes.append(UInt8(accumulator & 0xFF))
                accumulator >>= 8
                count -= 8
            }
        }
        put(256)
        for (i, index) in indices.enumerated() {
            if i > 0, i % 250 == 0 { put(256) }
            put(Int(index))
        }
        put(257)
        if count > 0 { bytes.append(UInt8(accumulator & 0xFF)) }
        return bytes
    }

    private static func subBlocks(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var at = 0
        while at < data.count {
            let n = min(255, data.count - at)
            out += [UInt8(n)] + data[at..<at + n]
            at += n
        }
        return out + [0]
    }
}

/// GIF input: the first image drawn on its logical screen, as browsers draw it.
final class GIFTests: XCTestCase {

    /// The test images' exact relations: interlaced, animated, transparent and offset copies
    /// of one 255-colour picture decode to its pixels; the picture itself is close to the PNG
    /// it was quantised from.
    func testTheTestGIFsDecodeToOnePicturesPixels() throws {
        let reference = try TestImages.decode(try TestImages.bytes("gif-rgb.gif"))
        XCTAssertEqual(reference.channels, 3)
        XCTAssertGreaterThan(TestImages.psnr(reference, try TestImages.decode(try TestImages.bytes("png-rgb8.png"))), 32)
        XCTAssertEqual(try TestImages.decode(try TestImages.bytes("gif-interlaced.gif")), reference)
        XCTAssertEqual(try TestImages.decode(try TestImages.bytes("gif-animated.gif")), reference)
        let half = try TestImages.decode(try TestImages.bytes("gif-transparent.gif"))
        let offset = try TestImages.decode(try TestImages.bytes("gif-offset.gif"))
        XCTAssertEqual([half.channels, offset.width, offset.height, offset.channels], [4, 128, 96, 4])
        for y in 0..<64 {
            for x in 0..<96 {
                let rgb = Array(reference.pixels[(y * 96 + x) * 3..<(y * 96 + x) * 3 + 3])
                let halfPixel = Array(half.pixels[(y * 96 + x) * 4..<(y * 96 + x) * 4 + 4])
                XCTAssertEqual(halfPixel, x < 48 ? rgb + [255] : [0, 0, 0, 0], "transparent (\(x), \(y))")
                let at = ((y + 8) * 128 + x + 16) * 4
                XCTAssertEqual(Array(offset.pixels[at..<at + 4]), rgb + [255], "offset (\(x), \(y))")
            }
        }
        let covered = offset.pixels.enumerated().filter { $0.element != 0 }.map { $0.offset / 4 }
        XCTAssert(covered.allSatisfy { (16..<112).contains($0 % 128) && (8..<72).contains($0 / 128) },
                  "the canvas outside the image is transparent black")
    }

    /// Random GIFs (screen and image sizes, placement past the screen, global or local
    /// palettes of 2 to 256 entries, indices past the palette, a transparent index in or out
    /// of range, interlacing, extensions before the image, a second frame) decode to what the
    /// format says: replayable from the seed in the message.
    func testRandomGIFsDecodeAsTheFormatSays() throws {
        for seed in UInt64(1)...150 {
            var random = SeededGenerator(seed: seed)
            let screen = (Int.random(in: 1...24, using: &random), Int.random(in: 1...24, using: &random))
            let width = Int.random(in: 1...24, using: &random), height = Int.random(in: 1...24, using: &random)
            let left = Int.random(in: 0...6, using: &random), top = Int.random(in: 0...6, using: &random)
            let colours = Int.random(in: 1...256, using: &random)
            let palette = (0..<3 * colours).map { _ in UInt8.random(in: 0...255, using: &random) }
            let local = Bool.random(using: &random)
            let transparent = Bool.random(using: &random) ? Int.random(in: 0...255, using: &random) : nil
            let indices = (0..<width * height).map { _ in UInt8.random(in: 0...UInt8(min(255, colours + 3)), using: &random) }
            let image = GIFWriter.Image(left: left, top: top, width: width, height: height,
                                        interlaced: Bool.random(using: &random), indices: indices,
                                        palette: local ? palette : nil)
            var second = image
            second.indices = indices.map { ~$0 }
            let frames = Bool.random(using: &random) ? [image, second] : [image]
            let bytes = GIFWriter.make(screenWidth: screen.0, screenHeight: screen.1, palette: local ? nil : palette,
                                       transparent: transparent, looping: frames.count > 1,
                                       comment: Bool.random(using: &random), images: frames)

            // The expected canvas: the screen, grown to hold the image; transparent where the
            // image is absent or transparent; a table padded to a power of two with black, and
            // black for an index past even that.
            let canvas = (max(screen.0, left + width), max(screen.1, top + height))
            var tableSize = 2
            while tableSize < colours { tableSize *= 2 }
            let clear = transparent.flatMap { $0 < tableSize ? $0 : nil }
            var expected = [UInt8](repeating: 0, count: canvas.0 * canvas.1 * 4)
            for y in 0..<height {
                for x in 0..<width {
                    let index = Int(indices[y * width + x]), at = ((top + y) * canvas.0 + left + x) * 4
                    guard index != clear else { continue }
                    for c in 0..<3 { expected[at + c] = index < colours ? palette[3 * index + c] : 0 }
                    expected[at + 3] = 255
                }
            }
            let alpha = clear != nil || canvas != (width, height) || left != 0 || top != 0
            let message = "seed \(seed): screen \(screen) image \(width)x\(height) at (\(left), \(top)) colours \(colours)"
            let decoded = try TestImages.decode(bytes)
            XCTAssertEqual([decoded.width, decoded.height, decoded.channels], [canvas.0, canvas.1, alpha ? 4 : 3], message)
            let pixels = alpha ? expected : stride(from: 0, to: expected.count, by: 4).flatMap { expected[$0..<$0 + 3] }
            XCTAssertEqual(decoded.pixels, pixels, message)
            let info = try withBytes(bytes) { raw throws(ImagingError) in try ImagePipeline().info(of: raw) }
            XCTAssertEqual([info.width, info.height], [canvas.0, canvas.1], message)
            XCTAssertEqual(info.progressive, image.interlaced, message)
        }
    }

    func testAnAnimatedGIFSaysItsFirstFrameIsUsed() throws {
        let final = try TestImages.final("gif-animated.gif", ResizeOptions(width: 48, format: .png))
        XCTAssert(final.notes.contains { $0.contains("first frame") }, "\(final.notes)")
        XCTAssertFalse(try TestImages.final("gif-rgb.gif", ResizeOptions(width: 48, format: .png)).notes
            .contains { $0.contains("first frame") })
    }

    /// A cut GIF fails as truncated unless nothing fails on truncation; then the rows read
    /// are kept (the picture's own), the rest transparent, and the result says how many.
    func testACutGIFKeepsItsRowsOnlyAtFailOnNone() throws {
        let bytes = try TestImages.bytes("gif-bad-truncated.gif")
        for level in [FailOn.truncated, .error, .warning] {
            XCTAssertThrowsError(try TestImages.run(bytes, ResizeOptions(width: 48, format: .png, failOn: level))) {
                XCTAssertEqual(($0 as? ImagingError)?.code, .truncated, "\(level)")
            }
        }
        let reference = try TestImages.decode(try TestImages.bytes("gif-rgb.gif"))
        let cut = try withBytes(bytes) { raw throws(ImagingError) in
            try RasterDecoders.make(.gif, data: raw, limits: DecodeLimits(), cancel: nil, failOn: .none).decode(shrink: 1)
        }
        let note = try XCTUnwrap(cut.notes.first)
        let rows = try XCTUnwrap(Int(note.split(separator: " ").first { Int($0) != nil } ?? ""), note)
        XCTAssert((1..<64).contains(rows), note)
        XCTAssertEqual(cut.pixels.channels, 3)
        XCTAssertEqual(Array(cut.pixels.pixels[..<(rows * 96 * 3)]), Array(reference.pixels[..<(rows * 96 * 3)]))
        XCTAssert(cut.pixels.pixels[(rows * 96 * 3)...].allSatisfy { $0 == 0 }, "rows past the cut are black")
        let result = try TestImages.final("gif-bad-truncated.gif", ResizeOptions(width: 48, format: .png, failOn: FailOn.none))
        XCTAssert(result.notes.contains { $0.contains("the file is cut") }, "\(result.notes)")
    }

    /// A GIF whose data is whole but lacks its last block terminator (and trailer) decodes to
    /// its last row at `fail_on none`, saying it is cut; stricter levels refuse it as cut. A
    /// bad LZW code size is damage, not a cut file.
    func testAGIFCutAfterItsLastRowAndABadCodeSize() throws {
        let whole = try TestImages.bytes("gif-rgb.gif")
        XCTAssertEqual(Array(whole.suffix(2)), [0x00, 0x3B])
        let cut = Array(whole.dropLast(2))
        XCTAssertThrowsError(try TestImages.run(cut, ResizeOptions(width: 48, format: .png))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .truncated)
        }
        let kept = try withBytes(cut) { raw throws(ImagingError) in
            try RasterDecoders.make(.gif, data: raw, limits: DecodeLimits(), cancel: nil, failOn: .none).decode(shrink: 1)
        }
        XCTAssertEqual(kept.pixels, try TestImages.decode(whole))
        XCTAssert(kept.notes.contains { $0.contains("after the last row") }, "\(kept.notes)")
        // The LZW minimum code size (the byte after the image descriptor) at 13: giflib's
        // "read failed" for it is damage.
        var bad = whole
        let descriptor = try XCTUnwrap(bad.indices.first { bad[$0] == 0x2C && $0 > 13 + 768 - 1 })
        bad[descriptor + 10] = 13
        XCTAssertThrowsError(try TestImages.run(bad, ResizeOptions(width: 48, format: .png, failOn: FailOn.none))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .corrupt, "\($0)")
        }
    }

    /// A large GIF's decode is cancelled from another thread at several moments: each run
    /// ends `.cancelled` (the shim looks at the flag every 64 Ki pixels).
    func testCancellationDuringALargeGIFDecode() throws {
        let (width, height) = (3000, 2000)
        let indices = (0..<width * height).map { UInt8(truncatingIfNeeded: $0 % width / 12 + $0 / width / 8) }
        let bytes = GIFWriter.make(screenWidth: width, screenHeight: height, palette: (0..<768).map { UInt8($0 / 3) },
                                   images: [.init(width: width, height: height, indices: indices)])
        TestImages.assertCancelled(bytes, as: .gif) { flag in
            _ = try TestImages.run(bytes, ResizeOptions(width: width, format: .pnm), cancel: flag)
        }
    }

    /// The limits hold before any pixel memory: a screen over the pixel limit, and a canvas
    /// over the buffer limit, are refused from the header.
    func testLimitsAreCheckedBeforeDecoding() throws {
        let bytes = GIFWriter.make(screenWidth: 4000, screenHeight: 4000, palette: [0, 0, 0, 255, 255, 255],
                                   images: [.init(width: 1, height: 1, indices: [1])])
        XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
            try ImagePipeline(limits: DecodeLimits(maxPixels: 1_000_000)).info(of: raw)
        }) { XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge) }
        XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
            try RasterDecoders.make(.gif, data: raw, limits: DecodeLimits(maxBufferBytes: 16 << 20), cancel: nil,
                                    failOn: .error).decode(shrink: 1)
        }) { XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge) }
        let estimate = try withBytes(bytes) { raw throws(ImagingError) in
            try ImagePipeline().prepare(raw, options: ResizeOptions(width: 100)).memoryEstimate.bytes
        }
        XCTAssertGreaterThan(estimate, 4000 * 4000 * 4, "the estimate holds the decoded canvas")
    }

    func testGIFWithoutAColourTableOrImageIsCorrupt() throws {
        let noImage = Array("GIF89a".utf8) + [1, 0, 1, 0, 0x80, 0, 0, 0, 0, 0, 255, 255, 255, 0x3B]
        for bytes in [noImage, try TestImages.bytes("gif-bad-no-palette.gif")] {
            XCTAssertThrowsError(try TestImages.run(bytes, ResizeOptions(width: 10))) {
                XCTAssertEqual(($0 as? ImagingError)?.code, .corrupt, "\($0)")
            }
        }
        XCTAssertThrowsError(try InputFormat.of(Array("GIF88a".utf8) + [0, 0])) {
            XCTAssert("\($0)".contains("a GIF of an unknown version"), "\($0)")
        }
    }
}
