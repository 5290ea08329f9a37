import ImageModel
@testable import Imaging
import XCTest

/// The AV1 encoder cannot be interrupted: AVIF outputs over `maxAVIFPixels` are refused
/// before it starts, which bounds how long a cancelled job keeps its thread.
final class AVIFLimitTests: XCTestCase {
    func testTheEncoderRefusesAnAVIFOverTheLimitAndTakesOneAtIt() throws {
        let image = PixelBuffer(width: 40, height: 30, channels: 3, pixels: [UInt8](repeating: 90, count: 40 * 30 * 3))
        XCTAssertThrowsError(try Encoder.encode(image, format: .avif, maxAVIFPixels: 40 * 30 - 1)) { error in
            XCTAssertEqual((error as? ImagingError)?.code, .tooLarge)
        }
        XCTAssertEqual(try Encoder.encode(image, format: .avif, maxAVIFPixels: 40 * 30).format, .avif)
        // Other formats are not limited by it.
        XCTAssertEqual(try Encoder.encode(image, format: .webp, maxAVIFPixels: 1).format, .webp)
    }

    func testAJPEGWhoseAVIFWouldBeOverTheLimitIsRefusedBeforeDecoding() throws {
        let jpeg = try Encoder.jpeg(PixelBuffer(width: 64, height: 48, channels: 3,
                                                pixels: [UInt8](repeating: 128, count: 64 * 48 * 3)),
                                    quality: 80, progressive: false, chroma444: false)
        var limits = DecodeLimits()
        limits.maxAVIFPixels = 32 * 24
        let pipeline = ImagePipeline(limits: limits)
        var options = ResizeOptions(width: 40, enlarge: false)
        options.accept = [.avif]
        XCTAssertThrowsError(try withBytes(jpeg) { raw throws(ImagingError) in
            _ = try pipeline.prepare(raw, options: options)
        }) { error in
            XCTAssertEqual((error as? ImagingError)?.code, .tooLarge, "\(error)")
        }
        options.width = 32
        var formats: [OutputFormat] = []
        try withBytes(jpeg) { raw throws(ImagingError) in
            try pipeline.run(raw, options: options) { formats.append($0.image.format) }
        }
        XCTAssertEqual(formats, [.avif])
        options.accept = [.webp]
        options.width = 64
        formats = []
        try withBytes(jpeg) { raw throws(ImagingError) in
            try pipeline.run(raw, options: options) { formats.append($0.image.format) }
        }
        XCTAssertEqual(formats, [.webp])
    }

    /// A PNG goes through the raster path, whose only check is the encoder's.
    func testARasterImageIsRefusedAnAVIFOverTheLimit() throws {
        var limits = DecodeLimits()
        limits.maxAVIFPixels = 100
        var options = ResizeOptions(width: 64)
        options.accept = [.avif]
        XCTAssertThrowsError(try ImagePipeline(limits: limits).run(try TestImages.bytes("png-rgba8.png"), options: options) { _ in }) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge, "\($0)")
        }
    }
}
