import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// Several outputs from one decode: each as good as its own resize, made largest first, the
/// last one terminal; crops, orientation, profiles, raster inputs, gain maps, limits, cancel.
final class VariantTests: XCTestCase {
    static func variants(_ bytes: [UInt8], _ variants: [ResizeOptions],
                         cancel: CancellationFlag? = nil) throws -> [(index: Int, result: StageResult)] {
        var results: [(Int, StageResult)] = []
        try withBytes(bytes) { raw throws(ImagingError) in
            try ImagePipeline().prepareVariants(raw, variants: variants, cancel: cancel).run { results.append(($0, $1)) }
        }
        return results
    }

    static func pixels(_ image: EncodedImage) throws -> PixelBuffer {
        switch image.format {
        case .jpeg: return try GainMapTests.decodeJPEG(image.bytes)
        case .pnm:
            // Enlarger's PNM: "P5" or "P6", width, height, 255, one whitespace byte, samples.
            let bytes = image.bytes
            var fields: [String] = [], field = "", at = 0
            while fields.count < 4 {
                let c = Character(UnicodeScalar(bytes[at]))
                at += 1
                if c.isWhitespace {
                    if !field.isEmpty { fields.append(field); field = "" }
                } else {
                    field.append(c)
                }
            }
            return PixelBuffer(width: Int(fields[1])!, height: Int(fields[2])!, channels: fields[0] == "P5" ? 1 : 3,
                               pixels: Array(bytes[at...]))
        default: return try TestImages.decode(image.bytes)
        }
    }

    /// The srcset case on photos, with crops: each variant against the direct resize (Lanczos-3
    /// from the full-size decode; PNM, so only the resampling differs): above 50 dB, whichever
    /// buffer it was made from. Its own single resize's figure is printed beside it.
    func testEachVariantMatchesItsOwnResize() throws {
        var figures: [Double] = []
        for file in ["bimg_vertical.jpg", "bimg_test_exif_full.jpg", "sharp_2569067123_aca715a2ee_o.jpg"] {
            let bytes = try Corpus.good(file)
            let boxes = [1280, 640, 320, 160]
            let asked = boxes.map { ResizeOptions(width: $0, height: $0, format: .pnm) }
                + [ResizeOptions(width: 300, height: 100, fit: .cover, format: .pnm),
                   ResizeOptions(width: 100, height: 300, fit: .cover, format: .pnm),
                   ResizeOptions(width: 500, height: 500, fit: .fill, format: .pnm)]
            let results = try Self.variants(bytes, asked)
            XCTAssertEqual(results.map(\.index).sorted(), Array(asked.indices), "every variant once")
            XCTAssertEqual(results.filter(\.result.isTerminal).count, 1)
            XCTAssertTrue(results.last!.result.isTerminal, "the last one is terminal")
            for (index, result) in results {
                let single = try TestImages.final(bytes, asked[index])
                XCTAssertEqual([result.image.width, result.image.height], [single.image.width, single.image.height],
                               "\(file) variant \(index)")
                // The direct resize: Lanczos-3 from the full-size decode, no shrink-on-load.
                var exact: StageResult?
                try ImagePipeline(headroom: 1000).run(bytes, options: asked[index]) { exact = $0 }
                let reference = try Self.pixels(exact!.image)
                let psnr = TestImages.psnr(try Self.pixels(result.image), reference)
                let singlePSNR = TestImages.psnr(try Self.pixels(single.image), reference)
                print(String(format: "%@ variant %d (%dx%d): %.1f dB, its own resize %.1f dB", file, index,
                             result.image.width, result.image.height, psnr, singlePSNR))
                XCTAssertGreaterThan(psnr, 50, "\(file) variant \(index) \(asked[index].width ?? 0)")
                if psnr.isFinite { figures.append(psnr) }
            }
        }
        let sorted = figures.sorted()
        print(String(format: "variants against the direct resize: PSNR min %.1f dB, median %.1f dB over %d outputs "
                     + "(identical ones left out)", sorted.first ?? .nan, sorted.isEmpty ? .nan : sorted[sorted.count / 2],
                     sorted.count))
    }

    /// Largest first; outputs of one geometry in several formats come from one buffer and are
    /// the same picture.
    func testOrderFormatsAndSharedGeometry() throws {
        let bytes = try Corpus.good("bimg_test_exif_full.jpg")
        let asked = [ResizeOptions(width: 320, height: 320, format: .webp), ResizeOptions(width: 1280, height: 1280),
                     ResizeOptions(width: 320, height: 320), ResizeOptions(width: 640, height: 640, format: .png)]
        let results = try Self.variants(bytes, asked)
        XCTAssertEqual(results.map(\.index), [1, 3, 0, 2], "most pixels first, ties in the order given")
        let byIndex = Dictionary(uniqueKeysWithValues: results.map { ($0.index, $0.result) })
        XCTAssertEqual(byIndex[0]?.image.format, .webp)
        XCTAssertEqual(byIndex[3]?.image.format, .png)
        // 12 MP with orientation 6: upright outputs.
        XCTAssertEqual([byIndex[1]!.image.width, byIndex[1]!.image.height], [960, 1280])
        XCTAssertGreaterThan(TestImages.psnr(try Self.pixels(byIndex[0]!.image), try Self.pixels(byIndex[2]!.image)), 30,
                             "the WebP and the JPEG of one size are one picture")
        XCTAssertGreaterThan(byIndex[1]!.timings.decodeMilliseconds, 0, "the decode is counted once, with the first")
        XCTAssertEqual(byIndex[0]!.timings.decodeMilliseconds + byIndex[2]!.timings.decodeMilliseconds, 0)
    }

    func testRasterInputsAreDecodedOnceForAll() throws {
        for file in ["png-large.png", "webp-rgba-iccp.webp", "gif-transparent.gif"] {
            let bytes = try TestImages.bytes(file)
            let asked = [ResizeOptions(width: 64, format: .png), ResizeOptions(width: 32, format: .webp),
                         ResizeOptions(width: 40, height: 40, fit: .cover, format: .png)]
            let results = try Self.variants(bytes, asked)
            XCTAssertEqual(results.map(\.index).sorted(), [0, 1, 2])
            for (index, result) in results where result.image.format == .png {
                // Decoded once at the reduction the largest needs, where its own resize may have
                // reduced more while decoding: close, not identical.
                let single = try TestImages.final(bytes, asked[index])
                XCTAssertGreaterThan(TestImages.psnr(try Self.pixels(result.image), try Self.pixels(single.image)), 35,
                                     "\(file) variant \(index)")
            }
        }
    }

    func testGainMapsGoWithEachJPEGVariant() throws {
        let bytes = try Corpus.good(GainMapTests.corpusFile)
        var dropped = ResizeOptions(width: 200)
        dropped.gainMap = .drop
        let results = try Self.variants(bytes, [ResizeOptions(width: 800), ResizeOptions(width: 400),
                                                ResizeOptions(width: 400, format: .webp), dropped])
        let byIndex = Dictionary(uniqueKeysWithValues: results.map { ($0.index, $0.result) })
        for (index, width) in [(0, 200), (1, 100)] {
            let output = byIndex[index]!.image.bytes
            let kept = try XCTUnwrap(GainMapTests.gainMap(of: output), "variant \(index)")
            XCTAssertEqual(try GainMapTests.decodeJPEG(output[kept.range]).width, width)
        }
        XCTAssertNil(GainMapTests.gainMap(of: byIndex[2]!.image.bytes))
        XCTAssertTrue(byIndex[2]!.notes.contains { $0.contains("only JPEG output") }, "\(byIndex[2]!.notes)")
        XCTAssertNil(GainMapTests.gainMap(of: byIndex[3]!.image.bytes))
    }

    /// The gain map is decoded once for all the variants that keep it, at the scale the
    /// largest needs; each variant's map is then resized from it, close to what its own single
    /// resize keeps (the same, for the largest).
    func testAGainMapIsDecodedOnceForAllItsVariants() throws {
        let bytes = try Corpus.good(GainMapTests.corpusFile)
        let asked = [ResizeOptions(width: 800), ResizeOptions(width: 400), ResizeOptions(width: 120),
                     ResizeOptions(width: 400, format: .webp)]
        var results: [Int: StageResult] = [:]
        var decodes = -1
        try withBytes(bytes) { raw throws(ImagingError) in
            let job = try ImagePipeline().prepareVariants(raw, variants: asked)
            try job.run { results[$0] = $1 }
            decodes = job.gainMapDecodes
        }
        XCTAssertEqual(decodes, 1)
        for index in 0..<3 {
            let output = try XCTUnwrap(results[index]).image.bytes
            let kept = try XCTUnwrap(GainMapTests.gainMap(of: output), "variant \(index)")
            let single = try TestImages.final(bytes, asked[index]).image.bytes
            let alone = try XCTUnwrap(GainMapTests.gainMap(of: single), "variant \(index) alone")
            let map = try GainMapTests.decodeJPEG(output[kept.range])
            let reference = try GainMapTests.decodeJPEG(single[alone.range])
            guard [map.width, map.height, map.channels] == [reference.width, reference.height, reference.channels] else {
                XCTFail("variant \(index)'s map is \(map.width)x\(map.height)x\(map.channels), alone "
                        + "\(reference.width)x\(reference.height)x\(reference.channels)")
                continue
            }
            XCTAssertGreaterThan(TestImages.psnr(map, reference), 35, "variant \(index)")
        }
        XCTAssertNil(GainMapTests.gainMap(of: try XCTUnwrap(results[3]).image.bytes))
    }

    func testRequestsOutsideTheRulesAreRefusedBeforeDecoding() throws {
        let bytes = try Corpus.good("bimg_vertical.jpg")
        func code(_ variants: [ResizeOptions]) -> ImagingError.Code? {
            do {
                _ = try withBytes(bytes) { raw throws(ImagingError) in try ImagePipeline().prepareVariants(raw, variants: variants) }
                return nil
            } catch {
                return error.code
            }
        }
        XCTAssertEqual(code([]), .invalidArgument)
        XCTAssertEqual(code(Array(repeating: ResizeOptions(width: 10), count: ImagePipeline.maxVariants + 1)), .invalidArgument)
        XCTAssertEqual(code([ResizeOptions(width: 10), ResizeOptions(width: 20, failOn: .none)]), .invalidArgument)
        XCTAssertEqual(code([ResizeOptions(width: 10), ResizeOptions()]), .invalidArgument, "a variant without a box")
        var tooLarge = ResizeOptions(width: 16000, height: 16000, fit: .fill, enlarge: true)
        tooLarge.format = .avif
        XCTAssertEqual(code([ResizeOptions(width: 10), tooLarge]), .tooLarge)
        XCTAssertNil(code(Array(repeating: ResizeOptions(width: 10), count: ImagePipeline.maxVariants)))
    }

    func testTheEstimateCoversTheLargestVariantAndWhatTheOthersKeep() throws {
        let bytes = try Corpus.good("bimg_vertical.jpg")
        let asked = [ResizeOptions(width: 1280, height: 1280), ResizeOptions(width: 640, height: 640),
                     ResizeOptions(width: 320, height: 320)]
        let together = try withBytes(bytes) { raw throws(ImagingError) in
            try ImagePipeline().prepareVariants(raw, variants: asked).memoryEstimate.bytes
        }
        var alone: [Int] = []
        for options in asked {
            alone.append(try withBytes(bytes) { raw throws(ImagingError) in
                try ImagePipeline().prepare(raw, options: options).memoryEstimate.bytes
            })
        }
        XCTAssertGreaterThanOrEqual(together, alone.max()!)
        XCTAssertLessThan(together, alone.reduce(0, +), "one decode, not three")
    }

    func testCancelStopsAtTheNextCheckpoint() throws {
        let bytes = try Corpus.good("bimg_vertical.jpg")
        let asked = [ResizeOptions(width: 2000, format: .webp), ResizeOptions(width: 1000, format: .webp)]
        for delay in [0, 5, 40] {
            let flag = CancellationFlag()
            let thread = Thread {
                usleep(useconds_t(delay * 1000))
                flag.cancel()
            }
            thread.start()
            var emitted = 0
            XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
                try ImagePipeline().prepareVariants(raw, variants: asked, cancel: flag).run { _, _ in emitted += 1 }
            }) { XCTAssertEqual(($0 as? ImagingError)?.code, .cancelled, "cancel after \(delay) ms") }
            XCTAssertLessThan(emitted, 2, "nothing after the cancel completes the set")
        }
    }
}
