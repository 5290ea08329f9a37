import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// The placeholder: the output's exact size and a ThumbHash of its picture, before any result.
final class PlaceholderTests: XCTestCase {
    /// Runs `bytes`, returning the placeholder and the results in the order they came.
    private func run(_ bytes: [UInt8], _ options: ResizeOptions, delivery: Delivery = .progressive,
                     wanted: Bool = true) throws -> (placeholder: MadePlaceholder?, events: [String], results: [StageResult]) {
        var placeholder: MadePlaceholder?
        var events: [String] = [], results: [StageResult] = []
        try withBytes(bytes) { raw throws(ImagingError) in
            let prepared = try ImagePipeline().prepare(raw, options: options, delivery: delivery, placeholder: wanted)
            if wanted {
                prepared.onPlaceholder = {
                    placeholder = $0
                    events.append("placeholder")
                }
            }
            try prepared.run { result throws(ImagingError) in
                events.append(result.stage.rawValue)
                results.append(result)
            }
        }
        return (placeholder, events, results)
    }

    /// ThumbHash's first three bytes: luminance and the two colour differences' averages
    /// (6 bits each, see `ThumbHash`).
    private func averages(_ hash: [UInt8]) -> [Int] {
        let header = Int(hash[0]) | Int(hash[1]) << 8 | Int(hash[2]) << 16
        return [header & 63, header >> 6 & 63, header >> 12 & 63]
    }

    /// The hash of what the final result shows, reduced as the placeholder is.
    private func hashOfFinal(_ result: StageResult) throws -> [UInt8] {
        let image = try TestImages.decode(result.image.bytes)
        let scale = min(1, Double(ThumbHash.maxSide) / Double(max(image.width, image.height)))
        let width = max(1, Int((Double(image.width) * scale).rounded()))
        let height = max(1, Int((Double(image.height) * scale).rounded()))
        // Straight alpha resampled as it is: close enough for the averages compared.
        let small = try Resampler.resample(image, width: width, height: height, filter: .triangle)
        let pixels = small.pixels
        let rgba = (0..<width * height).flatMap { i -> [UInt8] in
            switch small.channels {
            case 1: [pixels[i], pixels[i], pixels[i], 255]
            case 3: [pixels[3 * i], pixels[3 * i + 1], pixels[3 * i + 2], 255]
            default: Array(pixels[4 * i..<4 * i + 4])
            }
        }
        return ThumbHash.encode(width: width, height: height, rgba: rgba)
    }

    /// Each source of pixels, for JPEG (EXIF thumbnail, first progressive scans, the decoded
    /// buffer), HEIC (its thumbnail item), PNG, GIF and JPEG XL: the placeholder comes first,
    /// has the final's exact size, and its average colours are the final's within a step or two.
    func testThePlaceholderComesFirstWithTheFinalsSizeAndColours() throws {
        let cases: [(bytes: [UInt8], name: String, options: ResizeOptions, delivery: Delivery, source: DegradedSource)] = [
            (try Corpus.good("bimg_test_exif_full.jpg"), "EXIF thumbnail, orientation 6", ResizeOptions(width: 300, height: 300),
             .final, .exifThumbnail),
            (try Corpus.good("bimg_test_exif_full.jpg"), "cover crop", ResizeOptions(width: 300, height: 100, fit: .cover),
             .progressive, .exifThumbnail),
            (try Corpus.good("sharp_flowers.jpeg"), "baseline", ResizeOptions(width: 200), .progressive, .decodedBuffer),
            (try Corpus.good("jxltestdata_flower.png.im_q85_420_progr.jpg"), "progressive",
             ResizeOptions(width: 320, height: 200, fit: .cover), .progressive, .progressiveScans),
            (try TestImages.bytes("heic-thumbnail.heic"), "HEIC", ResizeOptions(width: 400, format: .png), .final, .heifThumbnail),
            (try TestImages.bytes("png-rgba8.png"), "PNG with alpha", ResizeOptions(width: 40, format: .png), .final,
             .decodedBuffer),
            (try TestImages.bytes("gif-offset.gif"), "GIF", ResizeOptions(width: 64, format: .png), .progressive, .decodedBuffer),
            (try TestImages.bytes("jxl-lossy-p3.jxl"), "JPEG XL in P3", ResizeOptions(width: 48), .final, .decodedBuffer),
        ]
        for item in cases {
            var options = item.options
            options.format = .png  // for the test to read the final back
            let (placeholder, events, results) = try run(item.bytes, options, delivery: item.delivery)
            let made = try XCTUnwrap(placeholder, item.name)
            XCTAssertEqual(events.first, "placeholder", item.name)
            XCTAssertEqual(events.filter { $0 == "placeholder" }.count, 1, item.name)
            XCTAssertEqual(made.source, item.source, item.name)
            let final = try XCTUnwrap(results.last, item.name)
            XCTAssertEqual([made.placeholder.width, made.placeholder.height], [final.image.width, final.image.height], item.name)
            XCTAssertGreaterThanOrEqual(made.placeholder.thumbHash.count, 5, item.name)
            XCTAssertLessThanOrEqual(made.placeholder.thumbHash.count, 32, item.name)
            let finalHash = try hashOfFinal(final)
            // Orientation and crop shape it: landscape or not (the top bit of byte 4), as the final.
            XCTAssertEqual(made.placeholder.thumbHash[4] >> 7, finalHash[4] >> 7, "\(item.name): landscape bit")
            let expected = averages(finalHash), got = averages(made.placeholder.thumbHash)
            for channel in 0..<3 {
                XCTAssertLessThanOrEqual(abs(expected[channel] - got[channel]), 2, "\(item.name): averages \(got), final's \(expected)")
            }
        }
    }

    /// Not asked for, none is made (and nothing else changes); a run cancelled before it
    /// starts makes none.
    func testNoPlaceholderUnlessAskedAndNoneAfterCancel() throws {
        let photo = try Corpus.good("bimg_test_exif_full.jpg")
        let without = try run(photo, ResizeOptions(width: 300), wanted: false)
        XCTAssertNil(without.placeholder)
        XCTAssertEqual(without.events, ["degraded", "final"])
        let with = try run(photo, ResizeOptions(width: 300))
        XCTAssertEqual(with.events, ["placeholder", "degraded", "final"])
        XCTAssertEqual(with.results.map(\.image.bytes), without.results.map(\.image.bytes))
        let flag = CancellationFlag()
        flag.cancel()
        var placeholders = 0
        XCTAssertThrowsError(try withBytes(photo) { raw throws(ImagingError) in
            let prepared = try ImagePipeline().prepare(raw, options: ResizeOptions(width: 300), cancel: flag)
            prepared.onPlaceholder = { _ in placeholders += 1 }
            try prepared.run { _ in }
        }) { XCTAssertEqual(($0 as? ImagingError)?.code, .cancelled) }
        XCTAssertEqual(placeholders, 0)
    }
}
