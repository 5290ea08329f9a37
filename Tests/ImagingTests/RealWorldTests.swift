import Foundation
import ImageModel
@testable import Imaging
import XCTest

/// What real uploads hold and the first version got wrong: translucent images with profiles,
/// cut files at the lenient levels, damage only `fail_on warning` sees, HEIF items that are
/// never decoded, AVIF properties nothing uses, a profile too large for JPEG.
final class RealWorldTests: XCTestCase {
    /// Straight pixels and notes of a decode at `failOn`.
    private func decode(_ file: String, failOn: FailOn, cancel: CancellationFlag? = nil) throws -> (PixelBuffer, [String]) {
        let bytes = try TestImages.bytes(file)
        return try withBytes(bytes) { raw throws(ImagingError) in
            let format = try InputFormat.detect(raw, limits: DecodeLimits())
            let raster = try RasterDecoders.make(format, data: raw, limits: DecodeLimits(), cancel: cancel, failOn: failOn)
                .decode(shrink: 1)
            let pixels = raster.pixels.channels == 4
                ? try Alpha.unpremultiplied(raster.pixels, allocator: BufferAllocator()) : raster.pixels
            return (pixels, raster.notes)
        }
    }

    private func code(_ body: () throws -> Any) -> ImagingError.Code? {
        do {
            _ = try body()
            return nil
        } catch {
            return (error as? ImagingError)?.code
        }
    }

    private func row(_ image: PixelBuffer, _ y: Int) -> ArraySlice<UInt8> {
        let stride = image.width * image.channels
        return image.pixels[(y * stride)..<((y + 1) * stride)]
    }

    // MARK: PNG

    /// The last IDAT's checksum is wrong and its data whole: accepted up to `error` (nothing
    /// is lost), refused at `warning`, which refuses damaged files.
    func testADamagedChecksumAfterTheImageFailsOnlyAtWarning() throws {
        let reference = try decode("png-rgb8.png", failOn: .error).0
        for level in [FailOn.none, .truncated, .error] {
            XCTAssertEqual(try decode("png-bad-idat-crc.png", failOn: level).0, reference, "\(level)")
        }
        XCTAssertEqual(code { try self.decode("png-bad-idat-crc.png", failOn: .warning) }, .corrupt)
        var options = ResizeOptions(width: 40, format: .png)
        options.failOn = .warning
        XCTAssertEqual(code { try TestImages.run(try TestImages.bytes("png-bad-idat-crc.png"), options) }, .corrupt)
        // A whole file still decodes at warning.
        XCTAssertEqual(try decode("png-rgb8.png", failOn: .warning).0, reference)
    }

    /// A PNG cut in its first IDAT: the rows before the cut at `none`, exactly, and the rest
    /// transparent black, with a note; `truncated` and above refuse it.
    func testACutPNGGivesBackItsRowsAtFailOnNone() throws {
        let reference = try decode("png-rgb8.png", failOn: .error).0
        let (cut, notes) = try decode("png-bad-truncated.png", failOn: .none)
        XCTAssertEqual(cut.width, 96)
        XCTAssertEqual(cut.height, 64)
        var whole = 0
        while whole < 64, row(cut, whole) == row(reference, whole) { whole += 1 }
        XCTAssertGreaterThan(whole, 4, "rows before the cut")
        XCTAssertLessThan(whole, 64)
        for y in (whole + 1)..<64 { XCTAssertTrue(row(cut, y).allSatisfy { $0 == 0 }, "row \(y)") }
        XCTAssertEqual(notes.count, 1)
        XCTAssertTrue(notes[0].contains("cut"), notes[0])
        for level in [FailOn.truncated, .error, .warning] {
            XCTAssertEqual(code { try self.decode("png-bad-truncated.png", failOn: level) }, .truncated, "\(level)")
        }
        // Through the pipeline, reduced while decoding (the shrink path), the note is in the result.
        let large = try TestImages.bytes("png-large.png")
        let final = try TestImages.run(Array(large.prefix(large.count / 2)), ResizeOptions(width: 100, format: .png, failOn: .none)).last!
        XCTAssertEqual(final.image.width, 100)
        XCTAssertTrue(final.notes.contains { $0.contains("rows decoded") }, "\(final.notes)")
        let top = try TestImages.decode(final.image.bytes)
        let expected = try TestImages.decode(try TestImages.run(large, ResizeOptions(width: 100, format: .png)).last!.image.bytes)
        // The top rows (well above the cut) are the whole file's.
        XCTAssertEqual(row(top, 5), row(expected, 5))
        XCTAssertTrue(row(top, top.height - 1).allSatisfy { $0 == 0 })
    }

    /// libspng answers every call after a failure with "non-recoverable state": the failure
    /// itself is what is reported (here a file cut inside its iCCP chunk, before any pixel).
    func testTheFirstPNGFailureIsReportedNotTheStateItLeft() throws {
        let bytes = try TestImages.bytes("png-iccp-p3.png")
        let iccp = try XCTUnwrap(bytes.firstRange(of: Array("iCCP".utf8)))
        let cut = Array(bytes.prefix(iccp.upperBound + 40))
        for level in [FailOn.truncated, .error] {
            XCTAssertThrowsError(try TestImages.run(cut, ResizeOptions(width: 40, format: .png, failOn: level))) { error in
                let failure = error as? ImagingError
                XCTAssertEqual(failure?.code, .truncated, "\(level): \(error)")
                XCTAssertFalse(failure?.message.contains("non-recoverable") ?? true, "\(error)")
            }
        }
    }

    /// A 1-bit grey image with a tRNS key of 2: the key's low bit (0) is what libpng matches.
    func testAnOutOfRangeGreyKeyIsMaskedToTheBitDepth() throws {
        let (image, _) = try decode("png-gray1-trns.png", failOn: .error)
        XCTAssertEqual(image.channels, 4)
        for x in 0..<4 {
            let alpha = image.pixels[x * 4 + 3]
            XCTAssertEqual(alpha, x % 2 == 0 ? 255 : 0, "column \(x)")
        }
    }

    /// 16-bit grey is read as grey: 1 channel in `info` and in the decode, within a level of
    /// the 8-bit picture.
    func testSixteenBitGreyIsOneChannel() throws {
        let info = try withBytes(try TestImages.bytes("png-gray16.png")) { raw throws(ImagingError) in
            try ImagePipeline().info(of: raw)
        }
        XCTAssertEqual(info.channels, 1)
        let (grey, _) = try decode("png-gray16.png", failOn: .error)
        let reference = try decode("png-gray8.png", failOn: .error).0
        XCTAssertEqual(grey.channels, 1)
        XCTAssertEqual(grey.pixels.count, reference.pixels.count)
        let worst = zip(grey.pixels, reference.pixels).map { abs(Int($0) - Int($1)) }.max() ?? 99
        XCTAssertLessThanOrEqual(worst, 1)
    }

    /// Interlaced 16-bit grey too: its passes each write their own columns, and the image
    /// comes out as the non-interlaced file's, sample for sample (it came out as RGB).
    func testInterlacedSixteenBitGreyIsTheSameGrey() throws {
        let info = try withBytes(try TestImages.bytes("png-gray16-interlaced.png")) { raw throws(ImagingError) in
            try ImagePipeline().info(of: raw)
        }
        XCTAssertEqual(info.channels, 1)
        XCTAssertTrue(info.progressive)
        let interlaced = try decode("png-gray16-interlaced.png", failOn: .error).0
        let plain = try decode("png-gray16.png", failOn: .error).0
        XCTAssertEqual(interlaced.channels, 1)
        XCTAssertEqual(interlaced.width, plain.width)
        XCTAssertEqual(interlaced.pixels, plain.pixels)
    }

    /// A reduction by thousands while decoding: each box sums 8192 × 8192 samples of 200,
    /// beyond 32 bits (the sums wrapped and the pixel came out wrong).
    func testAReductionByThousandsWhileDecodingAveragesRight() throws {
        let bytes = try TestImages.bytes("png-grey-16k.png")
        let pipeline = ImagePipeline(limits: DecodeLimits(maxPixels: 1 << 29))
        var results: [StageResult] = []
        try pipeline.run(bytes, options: ResizeOptions(width: 1, format: .pnm)) { results.append($0) }
        let final = try XCTUnwrap(results.last)
        let image = try Encoder.decodePNM(final.image.bytes)
        XCTAssertEqual(image.width, 1)
        XCTAssertEqual(Set(image.pixels), [200])
    }

    /// The reduced decode's working rows come from the decode's buffer budget like the image
    /// itself: a row of 16,384 samples past a 12 KiB limit per buffer fails the request
    /// `tooLarge` (as a Swift array it could only have been allocated or ended the process).
    func testTheReducedDecodesWorkingRowsAreWithinTheBufferLimit() throws {
        let bytes = try TestImages.bytes("png-grey-16k.png")
        var limits = DecodeLimits(maxPixels: 1 << 29)
        limits.maxBufferBytes = 12 << 10
        XCTAssertThrowsError(try ImagePipeline(limits: limits).run(bytes, options: ResizeOptions(width: 1, format: .pnm)) { _ in }) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge, "\($0)")
            XCTAssertTrue("\($0)".contains("a decoded row"), "\($0)")
        }
    }

    // MARK: WebP

    /// A WebP cut in half: the macroblock rows decoded before the cut at `none` (as the whole
    /// file decodes them), the rest transparent black; refused above `none`.
    func testACutWebPGivesBackItsRowsAtFailOnNone() throws {
        let reference = try decode("webp-lossy.webp", failOn: .error).0
        let (cut, notes) = try decode("webp-bad-truncated.webp", failOn: .none)
        XCTAssertEqual(notes.count, 1, "\(notes)")
        var whole = 0
        while whole < 64, row(cut, whole) == row(reference, whole) { whole += 1 }
        XCTAssertGreaterThan(whole, 0, "rows before the cut")
        XCTAssertTrue(notes[0].contains("\(whole) of 64 rows"), notes[0])
        XCTAssertLessThan(whole, 64)
        XCTAssertTrue(row(cut, 63).allSatisfy { $0 == 0 })
        for level in [FailOn.truncated, .error, .warning] {
            XCTAssertEqual(code { try self.decode("webp-bad-truncated.webp", failOn: level) }, .truncated, "\(level)")
        }
        // Whole image data behind a RIFF size that claims more: every row, and the note.
        let (lying, lyingNotes) = try decode("webp-bad-riff-size.webp", failOn: .none)
        XCTAssertEqual(lying, reference)
        XCTAssertEqual(lyingNotes.count, 1)
        XCTAssertEqual(code { try self.decode("webp-bad-riff-size.webp", failOn: .truncated) }, .truncated)
    }

    /// The first frame of an animation is decoded in slices like a still image: a cancel
    /// stops it (it used to run to the end, into a canvas of libwebp's own).
    func testAnAnimatedWebPDecodeIsCancellable() throws {
        let flag = CancellationFlag()
        flag.cancel()
        XCTAssertEqual(code { try self.decode("webp-animated.webp", failOn: .error, cancel: flag) }, .cancelled)
        // Uncancelled, frame 1 is the RGB picture.
        let frame = try decode("webp-animated.webp", failOn: .error).0
        XCTAssertGreaterThan(TestImages.psnr(frame, try decode("png-rgb8.png", failOn: .error).0), 28)
    }

    // MARK: Every format

    /// Translucent images with an embedded profile, in every input format, to every output
    /// format: converted as RGBA, transparency kept where the output has it.
    func testTranslucentImagesWithAProfileInEveryFormatResize() throws {
        for file in ["png-rgba-iccp.png", "webp-rgba-iccp.webp", "heic-alpha-iccp.heic", "avif-alpha-iccp.avif"] {
            let bytes = try TestImages.bytes(file)
            for format in OutputFormat.allCases {
                let final = try TestImages.run(bytes, ResizeOptions(width: 48, format: format)).last!
                XCTAssertEqual(final.image.width, 48, "\(file) → \(format)")
                if format == .png || format == .webp {
                    let back = try TestImages.decode(final.image.bytes)
                    XCTAssertEqual(back.channels, 4, "\(file) → \(format)")
                    // The transparent right half stays transparent.
                    XCTAssertEqual(back.pixels[(10 * back.width + back.width - 2) * 4 + 3], 0, "\(file) → \(format)")
                }
            }
        }
    }

    // MARK: JPEG output

    /// A profile needs one APP2 marker per 65,519 bytes and their count is a byte: a larger
    /// one is left out, with a note, rather than written with a wrapped count.
    func testAProfileTooLargeForJPEGIsLeftOutWithANote() throws {
        let image = PixelBuffer(width: 8, height: 8, channels: 3, pixels: [UInt8](repeating: 90, count: 192))
        let large = [UInt8](repeating: 7, count: Encoder.maxJPEGProfileBytes + 1)
        let encoded = try Encoder.encode(image, format: .jpeg, iccProfile: large)
        XCTAssertEqual(iccMarkers(Array(encoded.bytes)), 0)
        let decoded = try withBytes(Array(encoded.bytes)) { raw throws(ImagingError) in
            try JPEGDecoder(data: raw, limits: DecodeLimits(), cancel: nil).header
        }
        XCTAssertNil(decoded.iccProfile)
        XCTAssertNotNil(Encoder.embeddable(large, in: .jpeg).note)
        XCTAssertNil(Encoder.embeddable(large, in: .png).note)
        // One that fits is written whole.
        let small = [UInt8](repeating: 7, count: 70_000)
        let kept = try Encoder.encode(image, format: .jpeg, iccProfile: small)
        XCTAssertEqual(iccMarkers(Array(kept.bytes)), 2)
    }

    /// The APP2 ICC_PROFILE markers of a JPEG.
    private func iccMarkers(_ jpeg: [UInt8]) -> Int {
        var count = 0, at = 2
        let tag = Array("ICC_PROFILE".utf8)
        while at + 4 <= jpeg.count, jpeg[at] == 0xFF, jpeg[at + 1] != 0xDA {
            let length = Int(jpeg[at + 2]) << 8 | Int(jpeg[at + 3])
            if jpeg[at + 1] == 0xE2, Array(jpeg[(at + 4)..<min(jpeg.count, at + 4 + tag.count)]) == tag { count += 1 }
            at += 2 + length
        }
        return count
    }

    /// libheif's error text is copied before the encoder and context that may hold it are
    /// freed (under AddressSanitizer, reading it after was a use-after-free).
    func testAVIFEncodeFailuresKeepLibheifsMessage() throws {
        let image = PixelBuffer(width: 8, height: 8, channels: 3, pixels: [UInt8](repeating: 90, count: 192))
        XCTAssertThrowsError(try Encoder.encode(image, format: .avif, quality: 1000)) { error in
            let failure = error as? ImagingError
            XCTAssertEqual(failure?.code, .encodeFailed, "\(error)")
            XCTAssertGreaterThan(failure?.message.count ?? 0, "AVIF encoding failed: ".count, "\(error)")
        }
    }

    // MARK: HEIF and AVIF

    /// A grid larger than the primary, beside it and never decoded, no longer makes the file
    /// refused: the primary decodes as in the file without it.
    func testANonPrimaryGridLargerThanThePrimaryIsNotDecodedNorRefused() throws {
        let plain = try decode("heic-rgb.heic", failOn: .error).0
        XCTAssertEqual(try decode("heic-grid-larger.heic", failOn: .error).0, plain)
    }

    /// AVIF without pixi (libavif's strict mode refused it): decoded as the file with it.
    func testAnAVIFWithoutPixiDecodes() throws {
        XCTAssertEqual(try decode("avif-no-pixi.avif", failOn: .error).0, try decode("avif-rgb.avif", failOn: .error).0)
    }

    /// Clean apertures are applied in both formats: AVIF's by Enlarger, HEIC's by libheif;
    /// here 64×48 from (16, 8).
    func testCleanAperturesAreAppliedInAVIFAndHEIC() throws {
        let (image, notes) = try decode("avif-clap.avif", failOn: .error)
        XCTAssertEqual(image.width, 64)
        XCTAssertEqual(image.height, 48)
        XCTAssertTrue(notes.isEmpty, "\(notes)")
        let reference = try decode("png-rgb8.png", failOn: .error).0
        var crop = [UInt8]()
        for y in 8..<56 { crop += reference.pixels[((y * 96 + 16) * 3)..<((y * 96 + 80) * 3)] }
        let expected = PixelBuffer(width: 64, height: 48, channels: 3, pixels: crop)
        XCTAssertGreaterThan(TestImages.psnr(image, expected), 30)
        // Against the uncropped placement it is far off: the crop is really applied.
        var shifted = [UInt8]()
        for y in 0..<48 { shifted += reference.pixels[((y * 96) * 3)..<((y * 96 + 64) * 3)] }
        XCTAssertLessThan(TestImages.psnr(image, PixelBuffer(width: 64, height: 48, channels: 3, pixels: shifted)), 20)
        // HEIC's, applied by libheif, is the same crop of the HEIC picture.
        let heic = try decode("heic-rgb.heic", failOn: .error).0
        let (heicCrop, heicNotes) = try decode("heic-clap.heic", failOn: .error)
        XCTAssertEqual(heicCrop.width, 64)
        XCTAssertEqual(heicCrop.height, 48)
        XCTAssertTrue(heicNotes.isEmpty, "\(heicNotes)")
        var heicExpected = [UInt8]()
        for y in 8..<56 { heicExpected += heic.pixels[((y * 96 + 16) * 3)..<((y * 96 + 80) * 3)] }
        XCTAssertGreaterThan(TestImages.psnr(heicCrop, PixelBuffer(width: 64, height: 48, channels: 3, pixels: heicExpected)), 35)
    }
}

/// Codes named for what they are, whatever the format.
final class ErrorCodeTests: XCTestCase {
    /// A PNG with a damaged signature is in no format Enlarger reads (no reader takes it),
    /// and the message says what it looks like; AVIF matrix coefficients libavif cannot
    /// convert make a valid file this build does not read.
    func testCodesSayWhatTheFileIs() throws {
        XCTAssertThrowsError(try TestImages.run(try TestImages.bytes("png-bad-signature.png"), ResizeOptions(width: 40))) {
            let failure = $0 as? ImagingError
            XCTAssertEqual(failure?.code, .unknownFormat)
            XCTAssertTrue(failure?.message.contains("a PNG whose signature is damaged") ?? false, "\($0)")
        }
        XCTAssertThrowsError(try TestImages.run(try TestImages.bytes("avif-matrix10.avif"), ResizeOptions(width: 40))) {
            let failure = $0 as? ImagingError
            XCTAssertEqual(failure?.code, .unsupported, "\($0)")
            XCTAssertTrue(failure?.message.contains("matrix coefficients 10") ?? false, "\($0)")
        }
        XCTAssertEqual(ImagingError.Code.unknownFormat.rawValue, "unknownFormat")
    }
}

/// HEIC and AVIF cut inside their coded data: refused above `fail_on none`; at `none`, the
/// file is read as if zeros followed and the rows coded before the cut come out as the
/// whole file's do.
final class CutHEIFTests: XCTestCase {
    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        return (0...(haystack.count - needle.count)).first { haystack[$0..<$0 + needle.count].elementsEqual(needle) }
    }

    private func decode(_ bytes: [UInt8], failOn: FailOn) throws -> (PixelBuffer, [String]) {
        try withBytes(bytes) { raw throws(ImagingError) in
            let format = try InputFormat.detect(raw, limits: DecodeLimits())
            let decoder = try RasterDecoders.make(format, data: raw, limits: DecodeLimits(), cancel: nil, failOn: failOn)
            let raster = try decoder.decode(shrink: 1)
            return (raster.pixels, decoder.header.notes + raster.notes)
        }
    }

    func testCutHEICAndAVIFGiveBackTheirTopRowsAtFailOnNone() throws {
        for file in ["heic-thumbnail.heic", "avif-large.avif"] {
            let whole = try TestImages.bytes(file)
            let cut = Array(whole.prefix(whole.count * 3 / 4))
            for level in [FailOn.truncated, .error] {
                XCTAssertThrowsError(try decode(cut, failOn: level), "\(file) \(level)") {
                    XCTAssertEqual(($0 as? ImagingError)?.code, .truncated, "\(file): \($0)")
                }
            }
            let (image, notes) = try decode(cut, failOn: .none)
            let (reference, _) = try decode(whole, failOn: .error)
            XCTAssertEqual(image.width, reference.width, file)
            XCTAssertEqual(image.height, reference.height, file)
            XCTAssertTrue(notes.contains { $0.contains("the file is cut") }, "\(file): \(notes)")
            // The top fifth, coded well before the cut, is the whole file's.
            let top = image.width * image.channels * (image.height / 5)
            XCTAssertEqual(Array(image.pixels.prefix(top)), Array(reference.pixels.prefix(top)), file)
        }
        // The padded copy is counted in the memory estimate, with the input.
        let whole = try TestImages.bytes("avif-large.avif")
        let cut = Array(whole.prefix(whole.count / 4))
        func estimate(_ bytes: [UInt8]) throws -> Int {
            try withBytes(bytes) { raw throws(ImagingError) in
                try ImagePipeline().prepare(raw, options: ResizeOptions(width: 100, failOn: .none)).memoryEstimate.bytes
            }
        }
        // The cut file holds its own bytes and a whole file's worth of padded copy: more than
        // the whole file by at least the cut part.
        XCTAssertGreaterThanOrEqual(try estimate(cut) - estimate(whole), cut.count)
        // A few bytes claiming a large file are not grown to it before any admission: the
        // padding is at most four times what is there (or 1 MiB).
        var claimsMuch = Array(whole.prefix(whole.count / 4))
        let mdat = try XCTUnwrap(Self.find(Array("mdat".utf8), in: claimsMuch))
        let big = UInt32(8 << 20)
        for (offset, byte) in [UInt8(big >> 24), UInt8(big >> 16 & 0xFF), UInt8(big >> 8 & 0xFF), UInt8(big & 0xFF)].enumerated() {
            claimsMuch[mdat - 4 + offset] = byte
        }
        XCTAssertThrowsError(try decode(claimsMuch, failOn: .none)) { error in
            XCTAssertEqual((error as? ImagingError)?.code, .truncated)
            XCTAssert("\(error)".contains("too little to fill in"), "\(error)")
        }
        // The small files cut in their only row of coding blocks still come out, noted.
        for file in ["heic-bad-truncated.heic", "avif-bad-truncated.avif"] {
            let (image, notes) = try decode(try TestImages.bytes(file), failOn: .none)
            XCTAssertEqual(image.width, 96, file)
            XCTAssertFalse(notes.isEmpty, file)
        }
    }
}

/// The ISOBMFF fields HEIFStructure reads hold any value: eight-byte offsets and sizes near
/// Int.max (or with the top bit set) are refused, not summed into an overflow trap.
final class HEIFStructureTests: XCTestCase {
    private func be(_ value: UInt64, _ bytes: Int) -> [UInt8] { (0..<bytes).reversed().map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    private func box(_ type: String, _ payload: [UInt8]) -> [UInt8] { be(UInt64(8 + payload.count), 4) + Array(type.utf8) + payload }

    func testHugeOffsetsAndSizesAreRefusedWithoutATrap() throws {
        let ftyp = box("ftyp", Array("heic".utf8) + be(0, 4) + Array("mif1heic".utf8))
        let pitm = box("pitm", [0, 0, 0, 0] + be(1, 2))
        let infe = box("infe", [2, 0, 0, 0] + be(1, 2) + be(0, 2) + Array("grid".utf8) + [0])
        let iinf = box("iinf", [0, 0, 0, 0] + be(1, 2) + infe)
        for (base, offset) in [(UInt64(Int64.max), UInt64(Int64.max)), (UInt64.max, UInt64(1) << 63)] {
            // iloc version 1: offset, length and base eight bytes each; one item, one extent.
            let iloc = box("iloc", [1, 0, 0, 0, 0x88, 0x80] + be(1, 2) + be(1, 2) + be(0, 2) + be(0, 2)
                           + be(base, 8) + be(1, 2) + be(offset, 8) + be(8, 8))
            let file = ftyp + box("meta", [0, 0, 0, 0] + pitm + iinf + iloc)
            try withBytes(file) { raw throws(ImagingError) in
                let items = HEIFStructure.items(raw)
                XCTAssertEqual(items.types[1], "grid")
                try HEIFStructure.checkCanvas(raw, items: items, item: 1, maxPixels: 100)
            }
        }
        // A second top-level box claiming Int.max bytes: the file is cut, by as much as that.
        let huge = ftyp + be(1, 4) + Array("mdat".utf8) + be(UInt64(Int64.max), 8)
        try withBytes(huge) { raw throws(ImagingError) in XCTAssertEqual(HEIFStructure.claimedLength(raw), Int.max) }
    }

    /// Boxes read before libavif has seen the file (to find grid issues) are hostile: too
    /// short to hold their own header, counts that point past them, entries of zero bytes
    /// repeated 65,535 times, two grids sharing a tile. Each is refused or read as far as it
    /// holds, at once, never a trap or a write past the file.
    func testDamagedItemBoxesAreReadWithoutATrapOrAnOverrun() throws {
        let ftyp = box("ftyp", Array("avif".utf8) + be(0, 4) + Array("mif1avif".utf8))
        let pitm = box("pitm", [0, 0, 0, 0] + be(1, 2))
        func infe(_ id: UInt64, _ type: String) -> [UInt8] { box("infe", [2, 0, 0, 0] + be(id, 2) + be(0, 2) + Array(type.utf8) + [0]) }
        // iinf and iref shorter than their version, flags and count, then a byte more.
        for meta in [[0, 0, 0, 0] + box("iinf", [0, 0]) + [7], [0, 0, 0, 0] + box("iref", [0]) + [7],
                     [0, 0, 0, 0] + pitm + box("iinf", [1]) + box("iref", [])] as [[UInt8]] {
            let file = ftyp + box("meta", meta)
            let items = try withBytes(file) { raw in HEIFStructure.items(raw) }
            XCTAssertTrue(items.types.isEmpty)
            XCTAssertThrowsError(try TestImages.decode(file))
        }
        // A reference claiming 4,096 targets in a box that holds one: only that one is read.
        let iref = box("iref", [0, 0, 0, 0] + box("dimg", be(1, 2) + be(4096, 2) + be(2, 2)))
        let iinf = box("iinf", [0, 0, 0, 0] + be(3, 2) + infe(1, "grid") + infe(2, "av01") + infe(3, "av01"))
        let counted = try withBytes(ftyp + box("meta", [0, 0, 0, 0] + pitm + iinf + iref)) { raw in HEIFStructure.items(raw) }
        XCTAssertEqual(counted.references.first?.to, [2])
        // iloc with fields of zero bytes: 4,096 items of 65,535 extents each read in no time,
        // and an extent count past the box is refused.
        var entries: [UInt8] = []
        for id in 0..<UInt64(4096) {
            entries += be(id, 2)
            entries += [0, 0, 0, 0]  // construction method, data reference
            entries += be(65535, 2)  // extents of zero bytes each
        }
        let header: [UInt8] = [1, 0, 0, 0, 0, 0]
        let empty = box("iloc", header + be(4096, 2) + entries)
        let start = ContinuousClock.now
        let locations = try withBytes(ftyp + box("meta", [0, 0, 0, 0] + empty)) { raw in
            HEIFStructure.BoxReader(data: raw).locations(in: HEIFStructure.items(raw).meta ?? 0..<0)
        }
        XCTAssertEqual(locations?.count, 4096)
        XCTAssertEqual(locations?.first?.extents.count, 64)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2))
        let past = box("iloc", [0, 0, 0, 0, 0x44, 0x00] + be(1, 2) + be(1, 2) + be(0, 2) + be(65535, 2) + be(0, 8))
        XCTAssertNil(try withBytes(ftyp + box("meta", [0, 0, 0, 0] + past)) { raw in
            HEIFStructure.BoxReader(data: raw).locations(in: HEIFStructure.items(raw).meta ?? 0..<0)
        })
        // Two grids sharing a tile, one out of order: its place would be written twice and
        // another tile's lost, the rewrite longer than the entries it replaces. Refused.
        let shared = box("iinf", [0, 0, 0, 0] + be(5, 2) + infe(1, "grid") + infe(2, "av01") + infe(3, "av01")
                         + infe(4, "grid") + infe(5, "av01"))
        let grids = box("iref", [0, 0, 0, 0] + box("dimg", be(1, 2) + be(2, 2) + be(3, 2) + be(2, 2))
                        + box("dimg", be(4, 2) + be(2, 2) + be(5, 2) + be(2, 2)))
        try withBytes(ftyp + box("meta", [0, 0, 0, 0] + pitm + shared + grids)) { raw throws(ImagingError) in
            let items = HEIFStructure.items(raw)
            XCTAssertTrue(HEIFStructure.gridIssues(items).tilesOutOfItemOrder)
            XCTAssertNil(HEIFStructure.tilesInGridOrder(raw, items: items))
        }
    }

    /// What libavif 0.11 reads wrong in a grid: tiles listed out of item order (the layout is
    /// the list's), and alpha attached to each tile instead of the grid.
    func testGridIssuesAreFound() throws {
        let tiles: [Int: String] = [1: "grid", 2: "av01", 3: "av01", 4: "av01", 5: "av01"]
        var items = HEIFStructure.Items(primary: 1, types: tiles, order: [1, 2, 3, 4, 5],
                                        references: [("dimg", 1, [2, 3])])
        XCTAssertEqual(HEIFStructure.gridIssues(items), HEIFStructure.GridIssues())
        items.references = [("dimg", 1, [3, 2])]
        XCTAssertTrue(HEIFStructure.gridIssues(items).tilesOutOfItemOrder)
        items.references = [("dimg", 1, [2, 3]), ("auxl", 4, [2]), ("auxl", 5, [3])]
        XCTAssertTrue(HEIFStructure.gridIssues(items).auxiliaryPerTile)
        items.references = [("dimg", 1, [2, 3]), ("auxl", 4, [1])]
        XCTAssertFalse(HEIFStructure.gridIssues(items).auxiliaryPerTile)
    }

    /// Alpha stored per grid tile (each alpha tile the auxiliary image of its colour tile)
    /// is read: libavif 0.11 reads only a grid's own alpha, so the alpha tiles are read as a
    /// grid of their own. The alpha ramp was coded losslessly: it comes back exact.
    func testAlphaStoredPerGridTileIsRead() throws {
        let bytes = try TestImages.bytes("avif-grid-alpha-per-tile.avif")
        let info = try withBytes(bytes) { raw throws(ImagingError) in try ImagePipeline().info(of: raw) }
        XCTAssertTrue(info.hasAlpha)
        XCTAssertEqual(info.channels, 4)
        try withBytes(bytes) { raw throws(ImagingError) in
            let items = HEIFStructure.items(raw)
            XCTAssertTrue(HEIFStructure.gridIssues(items).auxiliaryPerTile)
            XCTAssertNotNil(HEIFStructure.alphaTilesAsGrid(raw, items: items))
        }
        // The alpha decoder's copy of the file is counted with the input in the memory estimate.
        let copied = try withBytes(bytes) { raw throws(ImagingError) in
            try RasterDecoders.make(.avif, data: raw, limits: DecodeLimits(), cancel: nil, failOn: .error).header.inputCopyBytes
        }
        XCTAssertEqual(copied, bytes.count)
        let image = try TestImages.decode(bytes)
        XCTAssertEqual(image.channels, 4)
        XCTAssertEqual(image.width, 128)
        let pixels = image.pixels
        for y in [0, 31, 63] {
            for x in 0..<128 {
                let expected = UInt8((255 - 255 * Double(x) / 127).rounded())
                XCTAssertEqual(pixels[(y * 128 + x) * 4 + 3], expected, "alpha at \(x),\(y)")
            }
        }
        // The colour is the grid's without alpha (the same picture, coded the same way).
        let opaque = try TestImages.decode(try TestImages.bytes("avif-grid.avif"))
        var total = 0
        for pixel in 0..<(128 * 64) where pixels[pixel * 4 + 3] > 32 {
            for c in 0..<3 { total += abs(Int(pixels[pixel * 4 + c]) - Int(opaque.pixels[pixel * 3 + c])) }
        }
        XCTAssertLessThan(Double(total) / Double(128 * 64 * 3), 4, "mean difference in levels")
    }

    /// The reversed grid decodes in its layout: the file lists the right tile first, so its
    /// picture is the in-order file's with the halves exchanged, pixel for pixel (the same
    /// tiles, the same decoder). libavif gets it with its `iloc` entries in `dimg` order.
    func testAGridWhoseTilesAreListedOutOfOrderIsLaidOutAsListed() throws {
        let bytes = try TestImages.bytes("avif-grid-reversed.avif")
        let rewritten = try withBytes(bytes) { raw throws(ImagingError) in
            let items = HEIFStructure.items(raw)
            XCTAssertTrue(HEIFStructure.gridIssues(items).tilesOutOfItemOrder)
            return HEIFStructure.tilesInGridOrder(raw, items: items)
        }
        let change = try XCTUnwrap(rewritten)
        XCTAssertEqual(change.bytes.count, change.range.count, "entries move whole: no box changes size")
        var fixed = bytes
        fixed.replaceSubrange(change.range, with: change.bytes)
        try withBytes(fixed) { raw throws(ImagingError) in
            let items = HEIFStructure.items(raw)
            XCTAssertFalse(HEIFStructure.gridIssues(items).tilesOutOfItemOrder)
            XCTAssertNil(HEIFStructure.tilesInGridOrder(raw, items: items), "nothing left to move")
        }

        // The copy libavif reads is counted with the input in the memory estimate.
        let copied = try withBytes(bytes) { raw throws(ImagingError) in
            try RasterDecoders.make(.avif, data: raw, limits: DecodeLimits(), cancel: nil, failOn: .error).header.inputCopyBytes
        }
        XCTAssertEqual(copied, bytes.count)

        let reversed = try TestImages.decode(bytes)
        let inOrder = try TestImages.decode(try TestImages.bytes("avif-grid.avif"))
        XCTAssertEqual(reversed.width, 128)
        XCTAssertEqual(reversed.height, 64)
        XCTAssertEqual(reversed.channels, inOrder.channels)
        let stride = 128 * inOrder.channels, half = 64 * inOrder.channels
        for y in 0..<64 {
            let row = y * stride
            XCTAssertEqual(reversed.pixels[row..<row + half], inOrder.pixels[row + half..<row + stride], "row \(y), left")
            XCTAssertEqual(reversed.pixels[row + half..<row + stride], inOrder.pixels[row..<row + half], "row \(y), right")
        }
    }
}
