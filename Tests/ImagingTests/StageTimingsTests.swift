import Foundation
import ImageModel
import Imaging
import TestSupport
import XCTest

/// What the worker reports as a job's stage times is the sum of its results' timings: a
/// degraded result and the final share one decode, which must be counted once, so that
/// the stages of a run never add up to more than the run.
final class StageTimingsTests: XCTestCase {
    func testTheResultsOfARunAddUpToNoMoreThanTheRun() throws {
        let inputs: [(name: String, bytes: [UInt8])] = [
            ("baseline JPEG", try Corpus.good("jxltestdata_flower.png.im_q85_444.jpg")),
            ("progressive JPEG", try Corpus.good("jpegdecoder_tower_progressive.jpg")),
            ("JPEG with an EXIF thumbnail", try Corpus.good("bimg_test_exif_full.jpg")),
            ("PNG", try SampleImages.bytes("png-large.png")),
            ("WebP", try SampleImages.bytes("webp-large.webp")),
            ("HEIC with a thumbnail", try SampleImages.bytes("heic-thumbnail.heic")),
        ]
        let pipeline = ImagePipeline()
        for input in inputs {
            for delivery in [Delivery.progressive, .final] {
                var results: [StageResult] = []
                let start = ContinuousClock.now
                try pipeline.run(input.bytes, options: ResizeOptions(width: 200), delivery: delivery) { results.append($0) }
                let wall = Self.milliseconds(ContinuousClock.now - start)
                XCTAssertEqual(results.count, delivery == .progressive ? 2 : 1, input.name)
                let stages = results.map { $0.timings.decodeMilliseconds + $0.timings.resizeMilliseconds
                    + $0.timings.encodeMilliseconds }.reduce(0, +)
                XCTAssertLessThanOrEqual(stages, wall, "\(input.name), \(delivery): \(results.map(\.timings))")
                XCTAssertGreaterThan(results.map(\.timings.decodeMilliseconds).reduce(0, +), 0, input.name)
            }
        }
    }

    /// A degraded result made from the buffer decoded for the final carries that decode; the
    /// final counts only its own resize and encode.
    func testTheSharedDecodeIsTheFirstResultsOnly() throws {
        for bytes in [try Corpus.good("jxltestdata_flower.png.im_q85_444.jpg"), try SampleImages.bytes("png-large.png")] {
            var results: [StageResult] = []
            try ImagePipeline().run(bytes, options: ResizeOptions(width: 200), delivery: .progressive) { results.append($0) }
            XCTAssertEqual(results.map(\.stage), [.degraded, .final])
            XCTAssertEqual(results[0].degradedSource, .decodedBuffer)
            XCTAssertGreaterThan(results[0].timings.decodeMilliseconds, 0)
            XCTAssertEqual(results[1].timings.decodeMilliseconds, 0)
            XCTAssertGreaterThan(results[1].timings.resizeMilliseconds, 0)
            XCTAssertGreaterThan(results[1].timings.encodeMilliseconds, 0)
        }
    }

    private static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1e3 + Double(attoseconds) * 1e-15
    }
}
