import Foundation
import ImageModel
@testable import Imaging
import XCTest

/// A JPEG decoded reduced in the DCT has `⌈size · scale⌉` pixels on an axis whose picture is
/// `size · scale` long: the output must be resampled from that span, or every edge moves
/// towards the near border, by up to a fifth of an output pixel or more at the far one.
final class ReducedDecodeGeometryTests: XCTestCase {
    /// The decoded pixels a region touches and the exact span within them, worked by hand.
    func testDecodedWindowIsTheExactSpan() {
        // 3872×2403 at 4/8: 1936×1202 pixels, the last row half the image's.
        let half = PixelBuffer(width: 1936, height: 1202, channels: 1)
        let whole = ImagePipeline.decodedWindow(PixelRect(x: 0, y: 0, width: 3872, height: 2403),
                                                sourceWidth: 3872, sourceHeight: 2403, decoded: half, numerator: 4)
        XCTAssertEqual(whole.region, PixelRect(x: 0, y: 0, width: 1936, height: 1202))
        XCTAssertEqual(whole.span, SourceSpan(x: 0, y: 0, width: 1936, height: 1201.5))

        // A crop at 2/8 (968×601): columns 1001…2000 are 250.25…500.25, rows 10…2402 2.5…600.75.
        let quarter = PixelBuffer(width: 968, height: 601, channels: 1)
        let crop = ImagePipeline.decodedWindow(PixelRect(x: 1001, y: 10, width: 1000, height: 2393),
                                               sourceWidth: 3872, sourceHeight: 2403, decoded: quarter, numerator: 2)
        XCTAssertEqual(crop.region, PixelRect(x: 250, y: 2, width: 251, height: 599))
        XCTAssertEqual(crop.span, SourceSpan(x: 0.25, y: 0.5, width: 250, height: 598.25))

        // Sizes the scale divides: the region's own pixels, no span.
        let even = PixelBuffer(width: 2000, height: 1500, channels: 1)
        let exact = ImagePipeline.decodedWindow(PixelRect(x: 0, y: 0, width: 4000, height: 3000),
                                                sourceWidth: 4000, sourceHeight: 3000, decoded: even, numerator: 4)
        XCTAssertEqual(exact.region, PixelRect(x: 0, y: 0, width: 2000, height: 1500))
        XCTAssertNil(exact.span)

        // No reduction, or a decode of another size: the rectangle scaled as before, no span.
        let full = PixelBuffer(width: 3872, height: 2403, channels: 1)
        let none = ImagePipeline.decodedWindow(PixelRect(x: 5, y: 6, width: 70, height: 80),
                                               sourceWidth: 3872, sourceHeight: 2403, decoded: full, numerator: 8)
        XCTAssertEqual(none.region, PixelRect(x: 5, y: 6, width: 70, height: 80))
        XCTAssertNil(none.span)
    }

    /// A black-to-white step at row 2000 of a 1003×2403 JPEG (and at column 2000 of its
    /// transpose), resized with shrink-on-load at 1/2, 1/4 and 1/8: the output has the step
    /// where it falls, `2000 · out / 2403`, within 0.02 px. Taking the whole decode for the
    /// whole image put it 0.20, 0.10 and 0.24 px early.
    func testAStepStaysWhereItIsAtEveryDCTScale() throws {
        let (long, short, step) = (2403, 1003, 2000)
        for transposed in [false, true] {
            let (width, height) = transposed ? (long, short) : (short, long)
            var pixels = [UInt8](repeating: 0, count: width * height * 3)
            for y in 0..<height {
                for x in 0..<width where (transposed ? x : y) >= step {
                    pixels[(y * width + x) * 3 ..< (y * width + x) * 3 + 3] = [255, 255, 255]
                }
            }
            let jpeg = try Encoder.jpeg(PixelBuffer(width: width, height: height, channels: 3, pixels: pixels),
                                        quality: 100, progressive: false, chroma444: true)
            // 600, 300 and 140 pixels along the long axis: reductions of 4.0, 8.0 and 17.2.
            for (out, numerator) in [(600, 4), (300, 2), (140, 1)] {
                let options = transposed ? ResizeOptions(width: out, format: .pnm) : ResizeOptions(height: out, format: .pnm)
                let plan = try ResizePlan.make(sourceWidth: width, sourceHeight: height, orientation: .up,
                                               options: options, headroom: ResizePlan.defaultHeadroom)
                XCTAssertEqual(plan.scaleNumerator, numerator, "the reduction the case is meant to test")
                let image = try VariantTests.pixels(
                    try withBytes(jpeg) { raw throws(ImagingError) in try ImagePipeline().resize(raw, options: options) }.image)
                let position = Self.stepPosition(image, alongColumns: !transposed)
                let expected = Double(step * out) / Double(long)
                XCTAssertEqual(position, expected, accuracy: 0.02,
                               "\(transposed ? "column" : "row") step at 1/\(8 / numerator): at \(position), not \(expected)")
                print("\(transposed ? "column" : "row") step at 1/\(8 / numerator): \(position), exactly \(expected)")
            }
        }
    }

    /// Where the step lies along the output's rows (columns, with `alongColumns` false), in
    /// output pixels (pixel `i` spans `i…i + 1`), from the light it lets through: a filter whose
    /// weights sum to one keeps an image's total light, so a step to white at `e` of `n` pixels
    /// sums to `255 · (n − e)` (less well near the borders, which the step keeps away from).
    private static func stepPosition(_ image: PixelBuffer, alongColumns: Bool) -> Double {
        let count = alongColumns ? image.height : image.width
        let across = alongColumns ? image.width : image.height
        let pixels = image.pixels, channels = image.channels
        var light = 0.0
        for y in 0..<image.height {
            for x in 0..<image.width { light += Double(pixels[(y * image.width + x) * channels]) }
        }
        return Double(count) - light / 255 / Double(across)
    }
}
