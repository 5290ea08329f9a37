import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// JPEG XL input (libjxl 0.7) over the test images cjxl made from the PNGs.
final class JXLTests: XCTestCase {

    func testLosslessJXLsDecodeToTheirPNGsPixels() throws {
        for (jxl, png) in [("jxl-lossless.jxl", "png-rgb8.png"), ("jxl-rgba.jxl", "png-rgba8.png"),
                           ("jxl-gray.jxl", "png-gray8.png"), ("jxl-iccp-p3.jxl", "png-iccp-p3.png"),
                           ("jxl-large-lossless.jxl", "png-large.png")] {
            XCTAssertEqual(try TestImages.decode(try TestImages.bytes(jxl)), try TestImages.decode(try TestImages.bytes(png)),
                           jxl)
        }
    }

    /// Colour managed end to end: a P3 image stored losslessly, or lossy in XYB (decoded back
    /// to P3 with the profile libjxl describes it by), comes out as the PNG with the same
    /// profile does.
    func testProfilesAreAppliedLikeThePNGs() throws {
        let options = ResizeOptions(width: 96, format: .pnm)
        let reference = try Encoder.decodePNM(try TestImages.final("png-iccp-p3.png", options).image.bytes)
        let lossless = try Encoder.decodePNM(try TestImages.final("jxl-iccp-p3.jxl", options).image.bytes)
        XCTAssertEqual(lossless, reference)
        let lossy = try Encoder.decodePNM(try TestImages.final("jxl-lossy-p3.jxl", options).image.bytes)
        XCTAssertGreaterThan(TestImages.psnr(lossy, reference), 30)
        // Without the profile the P3 pixels would be taken as sRGB: visibly different.
        let plain = try Encoder.decodePNM(try TestImages.final("png-rgb8.png", options).image.bytes)
        XCTAssertLessThan(TestImages.psnr(plain, reference), TestImages.psnr(lossy, reference) - 3)
    }

    func testLossyAndTranscodedJXLsAreClose() throws {
        let reference = try TestImages.decode(try TestImages.bytes("png-rgb8.png"))
        XCTAssertGreaterThan(TestImages.psnr(try TestImages.decode(try TestImages.bytes("jxl-lossy.jxl")), reference), 30)
        // A JPEG transcoded losslessly decodes to the JPEG's pixels within rounding (libjxl's
        // inverse DCT and upsampling are not libjpeg-turbo's).
        let jpeg = try TestImages.final("jpeg-for-jxl.jpg", ResizeOptions(width: 96, format: .pnm))
        let transcoded = try TestImages.final("jxl-from-jpeg.jxl", ResizeOptions(width: 96, format: .pnm))
        XCTAssertGreaterThan(TestImages.psnr(try Encoder.decodePNM(transcoded.image.bytes),
                                             try Encoder.decodePNM(jpeg.image.bytes)), 40)
        let large = try TestImages.decode(try TestImages.bytes("jxl-large.jxl"))
        XCTAssertGreaterThan(TestImages.psnr(large, try TestImages.decode(try TestImages.bytes("png-large.png"))), 30)
    }

    func testAnAnimatedJXLGivesItsFirstFrameAndSaysSo() throws {
        // cjxl gave the GIF's frames an (opaque) alpha channel.
        let first = try TestImages.decode(try TestImages.bytes("jxl-animated.jxl"))
        XCTAssertEqual(first.channels, 4)
        XCTAssert(stride(from: 3, to: first.pixels.count, by: 4).allSatisfy { first.pixels[$0] == 255 })
        // Its alpha is no extra plane of the estimate's.
        let header = try TestImages.bytes("jxl-animated.jxl").withUnsafeBytes { raw throws(ImagingError) in
            try RasterDecoders.make(.jxl, data: raw, limits: DecodeLimits(), cancel: nil, failOn: .error).header
        }
        XCTAssertTrue(header.hasAlpha)
        XCTAssertEqual(header.extraPlanes, 0)
        let rgb = PixelBuffer(width: first.width, height: first.height, channels: 3,
                              pixels: stride(from: 0, to: first.pixels.count, by: 4).flatMap { first.pixels[$0..<$0 + 3] })
        XCTAssertEqual(rgb, try TestImages.decode(try TestImages.bytes("gif-rgb.gif")))
        let final = try TestImages.final("jxl-animated.jxl", ResizeOptions(width: 48, format: .png))
        XCTAssert(final.notes.contains { $0.contains("first frame") }, "\(final.notes)")
        XCTAssertFalse(try TestImages.final("jxl-lossy.jxl", ResizeOptions(width: 48, format: .png)).notes
            .contains { $0.contains("first frame") })
    }

    /// A cut file fails as truncated at every level but `none`. At `none` libjxl renders what
    /// the data there is completes, and the result says the file is cut; a file cut before
    /// anything completes (the small one: a single group) still fails.
    func testACutJXLFailsAboveFailOnNone() throws {
        let bytes = try TestImages.bytes("jxl-bad-truncated.jxl")
        for level in FailOn.allCases {
            XCTAssertThrowsError(try TestImages.run(bytes, ResizeOptions(width: 48, format: .png, failOn: level))) {
                XCTAssertEqual(($0 as? ImagingError)?.code, .truncated, "\(level)")
            }
        }
        let large = try TestImages.bytes("jxl-large.jxl")
        let cut = Array(large[..<(large.count * 3 / 4)])
        XCTAssertThrowsError(try TestImages.run(cut, ResizeOptions(width: 400, format: .png))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .truncated)
        }
        let kept = try TestImages.run(cut, ResizeOptions(width: 400, format: .pnm, failOn: FailOn.none)).last!
        XCTAssert(kept.notes.contains { $0.contains("the file is cut") }, "\(kept.notes)")
        // What was rendered is the picture (its top rows, at least), not zeros.
        let whole = try Encoder.decodePNM(try TestImages.run(large, ResizeOptions(width: 400, format: .pnm)).last!.image.bytes)
        let partial = try Encoder.decodePNM(kept.image.bytes)
        let top = 400 * 3 * 50
        XCTAssertGreaterThan(TestImages.psnr(PixelBuffer(width: 400, height: 50, channels: 3, pixels: Array(partial.pixels[..<top])),
                                             PixelBuffer(width: 400, height: 50, channels: 3, pixels: Array(whole.pixels[..<top]))), 30)
    }

    func testCancellationDuringALargeJXLDecode() throws {
        let bytes = try TestImages.bytes("jxl-large.jxl")
        TestImages.assertCancelled(bytes, as: .jxl) { flag in
            _ = try TestImages.run(bytes, ResizeOptions(width: 1600, format: .pnm), cancel: flag)
        }
    }

    /// A layer larger than the image (4000×3000 behind 96×64): libjxl decodes it whole before
    /// it crops it, so its size is what the pixel limit and the memory estimate go by. A few
    /// hundred bytes of flat colour could otherwise make gigapixels behind a tiny header.
    func testALayerLargerThanTheImageIsWhatTheLimitsAndTheEstimateCount() throws {
        let bytes = try TestImages.bytes("jxl-layer-larger.jxl")
        func header(_ file: [UInt8], _ limits: DecodeLimits = DecodeLimits()) throws -> RasterHeader {
            try withBytes(file) { raw throws(ImagingError) in
                try RasterDecoders.make(.jxl, data: raw, limits: limits, cancel: nil, failOn: .error).header
            }
        }
        let layered = try header(bytes)
        XCTAssertEqual([layered.width, layered.height, layered.largestLayerPixels], [96, 64, 4000 * 3000])
        let limits = DecodeLimits(maxPixels: 10_000_000)
        XCTAssertThrowsError(try header(bytes, limits)) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge)
            XCTAssert("\($0)".contains("a layer of 12000000 pixels"), "\($0)")
        }
        XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
            try ImagePipeline(limits: limits).info(of: raw)
        }) { XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge) }
        // An ordinary image's one layer is the image; an animation's first frame is its own.
        XCTAssertEqual(try header(try TestImages.bytes("jxl-lossy.jxl")).largestLayerPixels, 96 * 64)
        XCTAssertEqual(try header(try TestImages.bytes("jxl-large-lossless.jxl")).largestLayerPixels, 1600 * 1200)
        XCTAssertEqual(try header(try TestImages.bytes("jxl-animated.jxl")).largestLayerPixels, 96 * 64)
        // The estimate counts what the layer has beyond the image (measured at up to 3.6 bytes a
        // pixel; MemoryEstimateTests measures this file's peak against it).
        let options = ResizeOptions(width: 48)
        let plan = try ResizePlan.make(sourceWidth: 96, sourceHeight: 64, orientation: .up, options: options)
        func estimate(_ header: RasterHeader) -> Int {
            MemoryEstimate(raster: header, plan: plan, shrink: 1, options: options, delivery: .final, inputBytes: 0).bytes
        }
        var flat = layered
        flat.largestLayerPixels = 96 * 64
        XCTAssertGreaterThanOrEqual(estimate(layered) - estimate(flat), (4000 * 3000 - 96 * 64) * 36 / 10)
        // It decodes: the image's part of the flat grey layer.
        let decoded = try TestImages.decode(bytes)
        XCTAssertEqual([decoded.width, decoded.height], [96, 64])
        XCTAssert(decoded.pixels.allSatisfy { abs(Int($0) - 96) <= 3 }, "\(decoded.pixels.prefix(12))")
    }

    func testLimitsAreCheckedFromTheHeader() throws {
        let bytes = try TestImages.bytes("jxl-large.jxl")
        XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
            try ImagePipeline(limits: DecodeLimits(maxPixels: 1_000_000)).info(of: raw)
        }) { XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge) }
        XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
            try RasterDecoders.make(.jxl, data: raw, limits: DecodeLimits(maxBufferBytes: 4 << 20), cancel: nil,
                                    failOn: .error).decode(shrink: 1)
        }) { XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge) }
        let info = try withBytes(bytes) { raw throws(ImagingError) in try ImagePipeline().info(of: raw) }
        XCTAssertEqual([info.width, info.height, info.channels], [1600, 1200, 3])
        XCTAssertEqual(info.colorSpace, "xyb")
        XCTAssertEqual(try InputFormat.of([0xFF, 0x0A, 0, 0]), .jxl)
        XCTAssertThrowsError(try InputFormat.of([0, 0, 0, 0x0C, 0x4A, 0x58, 0x4C, 0x20, 0, 0, 0, 0])) {
            XCTAssert("\($0)".contains("a JPEG XL container with a damaged signature"), "\($0)")
        }
    }
}
