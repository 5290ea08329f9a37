import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// `info`: the header's facts, without decoding pixels.
final class InfoTests: XCTestCase {
    private func info(_ file: String, set: String = "good") throws -> ImageInfo {
        let bytes = try Corpus.bytes(set, file)
        return try bytes.withUnsafeBytes { raw throws(ImagingError) in try ImagePipeline().info(of: raw) }
    }

    func testWhatHeadersSay() throws {
        let p3 = try info("bimg_test_exif_full.jpg")
        XCTAssertEqual(p3, ImageInfo(format: "jpeg", width: 3024, height: 4032, orientation: 6, channels: 3, hasAlpha: false,
                                     bitDepth: 8, colorSpace: "ycbcr", profileDescription: "Display P3", profileBytes: 548,
                                     progressive: false, hasEmbeddedThumbnail: true, byteSize: 3970480))
        XCTAssertEqual(try info("bimg_test_icc_prophoto.jpg").profileDescription, "ProPhoto RGB")
        let cmyk = try info("sharp_Channel_digital_image_CMYK_color.jpg")
        XCTAssertEqual(cmyk.colorSpace, "ycck")
        XCTAssertEqual(cmyk.profileDescription, "U.S. Web Coated (SWOP) v2")
        let grey = try info("thumbor_grayscale-icc.jpg")
        XCTAssertEqual(grey.channels, 1)
        XCTAssertEqual(grey.colorSpace, "gray")
        XCTAssertEqual(grey.profileDescription, "Dot Gain 20%")
        XCTAssertTrue(try info("jxltestdata_flower.png.im_q85_420_progr.jpg").progressive)
        let plain = try info("sharp_flowers.jpeg")
        XCTAssertNil(plain.profileDescription)
        XCTAssertEqual(plain.profileBytes, 0)
    }

    /// Every good corpus file: the displayed size is the manifest's size after orientation,
    /// and info agrees with a full resize about the size it plans from.
    func testEveryGoodFileAgreesWithItsManifest() throws {
        let entries = Corpus.manifest("good")
        XCTAssertGreaterThanOrEqual(entries.count, 100)
        for entry in entries {
            guard let width = entry.width, let height = entry.height else { continue }
            let facts = try info(entry.file)
            let swapped = facts.orientation >= 5
            XCTAssertEqual(swapped ? facts.height : facts.width, width, entry.file)
            XCTAssertEqual(swapped ? facts.width : facts.height, height, entry.file)
            XCTAssertEqual(facts.byteSize, try Corpus.good(entry.file).count, entry.file)
        }
    }

    /// Limits and damage are judged as a resize would judge them.
    func testBombsAndDamageAreRefusedFromTheHeader() throws {
        XCTAssertThrowsError(try info("jpegdecoder_max_size.jpg", set: "bad")) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge)
        }
        XCTAssertThrowsError(try info("thumbor_image_invalid.jpg", set: "bad"))
        XCTAssertEqual(try info("pillow_junk_jpeg_header.jpg", set: "bad").width, 1024, "stray bytes lose nothing")
    }

    /// The profile parser survives any damage: every truncation and thousands of random byte
    /// changes of real profiles, without a crash or an out-of-bounds read.
    func testTheProfileParserSurvivesDamage() throws {
        var profiles: [[UInt8]] = []
        for file in ["bimg_test_exif_full.jpg", "bimg_test_icc_prophoto.jpg", "thumbor_grayscale-icc.jpg"] {
            let bytes = try Corpus.good(file)
            let header = try bytes.withUnsafeBytes { raw throws(ImagingError) in try ImagePipeline().header(of: raw) }
            profiles.append(try XCTUnwrap(header.iccProfile, file))
        }
        XCTAssertEqual(ICCProfile(profiles[0]).majorVersion, 4, "Display P3 is a v4 profile (an mluc description)")
        XCTAssertEqual(ICCProfile(profiles[0]).colorSpace, "RGB")
        XCTAssertEqual(ICCProfile(profiles[2]).colorSpace, "GRAY")
        var generator = SeededGenerator(seed: 7)
        for profile in profiles {
            for length in stride(from: 0, through: profile.count, by: 3) { _ = ICCProfile(Array(profile.prefix(length))) }
            for _ in 0..<3000 {
                var damaged = profile
                for _ in 0..<Int.random(in: 1...8, using: &generator) {
                    damaged[Int.random(in: 0..<damaged.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
                }
                _ = ICCProfile(damaged)
            }
        }
    }
}
