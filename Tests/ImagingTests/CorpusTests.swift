import ImageModel
import XCTest
@testable import Imaging
import TestSupport

/// The whole shared corpus: every good file decodes to its expected (oriented) size, every
/// bad one is refused with the expected code.
final class CorpusTests: XCTestCase {
    func testManifestsArePresent() {
        XCTAssertEqual(Corpus.manifest("good").count, 100, "expected the shared corpus at \(Corpus.root.path)")
        XCTAssertEqual(Corpus.manifest("bad").count, 25)
    }

    func testEveryGoodFileDecodesAtItsStoredSize() throws {
        for entry in Corpus.manifest("good") {
            let bytes = try Corpus.bytes("good", entry.file)
            try bytes.withUnsafeBytes { raw in
                let decoder = try JPEGDecoder(data: raw, limits: DecodeLimits(), cancel: nil)
                XCTAssertEqual(decoder.header.width, entry.width, entry.file)
                XCTAssertEqual(decoder.header.height, entry.height, entry.file)
                XCTAssertEqual(decoder.header.progressive, entry.progressive, entry.file)
                // The largest files decode at 1/8 to keep the suite quick; the cancellation
                // tests decode the 99.6 MP file at full size.
                let scale = entry.width! * entry.height! > 20_000_000 ? 1 : 8
                let image = try decoder.decode(scaleNumerator: scale)
                XCTAssertEqual(image.width, ResizePlan.scaledLength(entry.width!, numerator: scale), entry.file)
                XCTAssertEqual(image.height, ResizePlan.scaledLength(entry.height!, numerator: scale), entry.file)
                XCTAssertEqual(image.channels, entry.colour == "gray" ? 1 : 3, "gray stays one channel: \(entry.file)")
            }
        }
    }

    func testEveryGoodFileResizesToTheExpectedOrientedSize() throws {
        let pipeline = ImagePipeline()
        let options = ResizeOptions(width: 256, height: 256)
        for entry in Corpus.manifest("good") {
            let swaps = ["5", "6", "7", "8"].contains(entry.orientation)
            let (ow, oh) = swaps ? (entry.height!, entry.width!) : (entry.width!, entry.height!)
            let expected = ResizePlan.outputBox(sourceWidth: ow, sourceHeight: oh, options: options)
            let result = try pipeline.resize(try Corpus.bytes("good", entry.file), options: options)
            XCTAssertEqual(result.sourceWidth, ow, entry.file)
            XCTAssertEqual(result.sourceHeight, oh, entry.file)
            XCTAssertEqual(result.image.width, expected.width, entry.file)
            XCTAssertEqual(result.image.height, expected.height, entry.file)
            // The output is itself a valid JPEG of that size.
            let back = try pipeline.header(of: result.image.bytes)
            XCTAssertEqual(back.width, expected.width, entry.file)
            XCTAssertEqual(back.height, expected.height, entry.file)
            XCTAssertEqual(back.colorSpace == .gray, entry.colour == "gray", entry.file)
        }
    }

    func testEXIFOrientationMatchesTheManifest() throws {
        for entry in Corpus.manifest("good") {
            let bytes = try Corpus.bytes("good", entry.file)
            let header = try ImagePipeline().header(of: bytes)
            let expected = Int(entry.orientation).flatMap { Orientation(rawValue: $0) } ?? .up
            XCTAssertEqual(header.orientation, expected, "\(entry.file) (manifest: \(entry.orientation))")
        }
    }

    static let expectedRejections: [String: ImagingError.Code] = [
        "thumbor_image_invalid.jpg": .unknownFormat,
        "gofuzz_1489f923c4dc.jpg": .unknownFormat,
        "sharp_truncated.jpg": .truncated,
        "sharp_corrupt-header.jpg": .truncated,
        "pillow_truncated_jpeg.jpg": .truncated,
        "sharp_8bit_depth.jpg": .unknownFormat,
        "jpegdecoder_max_size.jpg": .tooLarge,
        "sharp_giant-image.jpg": .tooLarge,
        "pillow_junk_jpeg_header.jpg": .corrupt,
        "ljtseed_125976848-341500ce-1b67-4dfc-8e6f-313ce9fedcef.jpg": .corrupt,
        "exifsamples_corrupted.jpg": .corrupt,
        "ljt_monkey12.jpg": .unsupported,
        "sharp_testimgl.jpg": .unsupported,
        "ljtseed_8x8_420_tables.jpg": .corrupt,
        "jpegdecoder_null_height.jpg": .corrupt,
        "ljtseed_id-000108-src-000000-op-flip1-pos-207-cov.jpg": .corrupt,
        "gofuzz_7ee4d4639204.jpg": .corrupt,
        "ljtseed_55.jpg": .corrupt,
        "ljtseed_id-000001-src-000000-op-flip1-pos-296.jpg": .corrupt,
        "bimg_corrupt.jpg": .corrupt,
        "ljtseed_id-001888-src-000812-op-flip1-pos-172.jpg": .corrupt,
        "ljtseed_FuzzTimeout.jpg": .corrupt,
        "jpegdecoder_missing-sos.jpg": .corrupt,
    ]

    /// Damaged after the data a degraded-only request reads (an intact EXIF thumbnail, or
    /// intact first progressive scans): such a request succeeds without reading the damage.
    static let intactPreviews: Set<String> = ["exifsamples_corrupted.jpg", "pillow_truncated_jpeg.jpg"]

    /// Not JPEGs whatever their names say, but images Enlarger reads by their content: the
    /// corpus, written for a JPEG-only decoder, expects them refused.
    static let otherFormats: [String: String] = [
        "jpegdecoder_jpg-size-6x6.jpg": "png", "sharp_animated-loop-3.jpg": "gif",
    ]

    func testMisnamedImagesAreReadByTheirContent() throws {
        for (file, format) in Self.otherFormats {
            let bytes = try Corpus.bad(file)
            let info = try withBytes(bytes) { raw throws(ImagingError) in try ImagePipeline().info(of: raw) }
            XCTAssertEqual(info.format, format, file)
            XCTAssertEqual(try ImagePipeline().resize(bytes, options: ResizeOptions(width: 3)).image.width, 3, file)
        }
    }

    /// Under the corpus's strict expectation, `fail_on` warning (DecodePolicyTests covers the
    /// other levels).
    func testEveryBadFileIsRefusedWithItsCode() throws {
        let entries = Corpus.manifest("bad").filter { Self.otherFormats[$0.file] == nil }
        XCTAssertEqual(Set(entries.map(\.file)), Set(Self.expectedRejections.keys))
        for entry in entries {
            let bytes = try Corpus.bytes("bad", entry.file)
            for delivery in Delivery.allCases where !(delivery == .degraded && Self.intactPreviews.contains(entry.file)) {
                var finals = 0
                do {
                    try ImagePipeline().run(bytes, options: ResizeOptions(width: 300, failOn: .warning),
                                            delivery: delivery) { result in
                        if result.isTerminal { finals += 1 }
                    }
                    XCTFail("\(entry.file) decoded (\(delivery))")
                } catch {
                    XCTAssertEqual(error.code, Self.expectedRejections[entry.file], "\(entry.file): \(error)")
                    XCTAssertFalse(error.message.isEmpty)
                }
                XCTAssertEqual(finals, 0, "\(entry.file): no terminal result for a bad file")
            }
        }
    }

    /// The sharp Landscape_N / Portrait_N files are one scene stored 8 ways: once oriented
    /// they must match each other up to JPEG noise (measured 2–4 per sample; a wrong flip or
    /// rotation is 40–65). `_1` is encoded differently (4:4:4, no ICC) and sits at 14–16.
    func testOrientedSetsMatchEachOther() throws {
        for set in ["Landscape", "Portrait"] {
            let (w, h) = set == "Landscape" ? (600, 450) : (450, 600)
            let reference = try decodeUpright("sharp_\(set)_2.jpg")
            for n in 1...8 {
                let image = try decodeUpright("sharp_\(set)_\(n).jpg")
                XCTAssertEqual(image.width, w, "\(set)_\(n)")
                XCTAssertEqual(image.height, h, "\(set)_\(n)")
                let diff = meanAbsoluteDifference(image, reference)
                XCTAssertLessThan(diff, n == 1 ? 25 : 6, "\(set)_\(n) differs from \(set)_2 by \(diff) per sample")
            }
            // The check can fail: a mirrored image is far off.
            let mirrored = try Orientation.upMirrored.apply(to: reference)
            XCTAssertGreaterThan(meanAbsoluteDifference(mirrored, reference), 35)
        }
    }

    func testCMYKIsConvertedWithAdobeInversion() throws {
        // The same Go test scene stored as Adobe CMYK and as YCbCr. Without colour management
        // the CMYK rendering is darker (35 per sample off, as with Pillow); reading Adobe's
        // inverted values as plain CMYK would be 145 off.
        let cmyk = try decodeUpright("gofuzz_video-001.cmyk.jpeg", set: "good")
        let ycc = try decodeUpright("gofuzz_video-001.221212.jpeg", set: "good")
        XCTAssertEqual(cmyk.channels, 3)
        let diff = meanAbsoluteDifference(cmyk, ycc)
        XCTAssertLessThan(diff, 40, "CMYK decode differs by \(diff) per sample")
    }

    func testGrayStaysOneChannelEndToEnd() throws {
        let bytes = try Corpus.bytes("good", "libvips_cd1.1.jpg")
        let result = try ImagePipeline().resize(bytes, options: ResizeOptions(width: 100, format: .pnm))
        XCTAssertEqual(Array(result.image.bytes.prefix(2)), Array("P5".utf8))
        XCTAssertEqual(try Encoder.decodePNM(result.image.bytes).channels, 1)
    }

    // MARK: Helpers

    private func decodeUpright(_ file: String, set: String = "good") throws -> PixelBuffer {
        let bytes = try Corpus.bytes(set, file)
        let header = try ImagePipeline().header(of: bytes)
        let size = header.orientedSize
        let result = try ImagePipeline().resize(bytes, options: ResizeOptions(width: size.width, height: size.height, format: .pnm))
        return try Encoder.decodePNM(result.image.bytes)
    }
}

func meanAbsoluteDifference(_ a: PixelBuffer, _ b: PixelBuffer) -> Double {
    let (a, b) = (a.pixels, b.pixels)
    precondition(a.count == b.count)
    var total = 0
    for i in 0..<a.count { total += abs(Int(a[i]) - Int(b[i])) }
    return Double(total) / Double(a.count)
}

extension ImagePipeline {
    func resize(_ bytes: [UInt8], options: ResizeOptions) throws -> StageResult {
        try withBytes(bytes) { raw throws(ImagingError) in try resize(raw, options: options) }
    }

    func header(of bytes: [UInt8]) throws -> JPEGHeader {
        try withBytes(bytes) { raw throws(ImagingError) in try header(of: raw) }
    }
}
