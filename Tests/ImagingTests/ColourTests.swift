import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// Embedded ICC profiles: the output is converted to sRGB (the ΔE2000 figures against an
/// exact reference are `Benchmarks/colour`); here, what can be checked exactly.
final class ColourTests: XCTestCase {
    /// The output at `width` as PNM pixels, converted (the default) or not.
    private static func pixels(_ file: String, width: Int, converted: Bool) throws -> PixelBuffer {
        let bytes = try Corpus.good(file)
        return try bytes.withUnsafeBytes { raw throws(ImagingError) in
            // Unconverted: as before colour management (CMYK through the plain formula).
            let pipeline = ImagePipeline()
            let prepared = try pipeline.prepare(raw, options: ResizeOptions(width: width, format: .pnm))
            if !converted {
                guard prepared.colour?.inputChannels != 4 else {
                    let plain = try pipeline.prepare(raw, options: ResizeOptions(width: width, format: .pnm), colour: false)
                    var final: StageResult?
                    try plain.run { final = $0 }
                    return try Encoder.decodePNM(final!.image.bytes)
                }
                prepared.colour = nil
            }
            var final: StageResult?
            try prepared.run { final = $0 }
            return try Encoder.decodePNM(final!.image.bytes)
        }
    }

    private static func differences(_ a: PixelBuffer, _ b: PixelBuffer) -> (mean: Double, max: Int) {
        let x = a.pixels, y = b.pixels
        var sum = 0, largest = 0
        for index in x.indices {
            let d = abs(Int(x[index]) - Int(y[index]))
            sum += d
            largest = max(largest, d)
        }
        return (Double(sum) / Double(x.count), largest)
    }

    /// A test profile whose primaries are the sRGB ones in another order (BRG): converting is
    /// exactly a permutation of the channels, which the unconverted output must show.
    func testAProfileWithPermutedPrimariesPermutesTheChannels() throws {
        let converted = try Self.pixels("jxltestdata_sideways_bench.jpg", width: 243, converted: true)
        let raw = try Self.pixels("jxltestdata_sideways_bench.jpg", width: 243, converted: false)
        let a = converted.pixels, b = raw.pixels
        var fits: [[Int]] = []
        for permutation in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            var largest = 0
            for pixel in 0..<(a.count / 3) {
                for channel in 0..<3 {
                    largest = max(largest, abs(Int(a[pixel * 3 + channel]) - Int(b[pixel * 3 + permutation[channel]])))
                }
            }
            if largest <= 1 { fits.append(permutation) }
        }
        XCTAssertEqual(fits.count, 1, "exactly one channel order explains the conversion: \(fits)")
        XCTAssertNotEqual(fits.first, [0, 1, 2], "the conversion did nothing")
    }

    /// An sRGB-tagged photo barely changes; wide-gamut ones change a lot.
    func testSRGBStaysAndWideGamutMoves() throws {
        let srgb = Self.differences(try Self.pixels("bimg_vertical.jpg", width: 300, converted: true),
                               try Self.pixels("bimg_vertical.jpg", width: 300, converted: false))
        XCTAssertLessThan(srgb.mean, 0.5)
        XCTAssertLessThanOrEqual(srgb.max, 3)
        let prophoto = Self.differences(try Self.pixels("bimg_test_icc_prophoto.jpg", width: 300, converted: true),
                                   try Self.pixels("bimg_test_icc_prophoto.jpg", width: 300, converted: false))
        XCTAssertGreaterThan(prophoto.mean, 5)
    }

    /// CMYK with its profile is decoded as CMYK, resized, then converted through the profile;
    /// the plain formula it replaces is far off for a press profile (SWOP's black is not 0 ink).
    func testCMYKGoesThroughItsProfile() throws {
        for file in ["sharp_Channel_digital_image_CMYK_color.jpg", "thumbor_cmyk-icc.jpg"] {
            let bytes = try Corpus.good(file)
            let prepared = try bytes.withUnsafeBytes { raw throws(ImagingError) in
                try ImagePipeline().prepare(raw, options: ResizeOptions(width: 200, format: .pnm))
            }
            XCTAssertEqual(prepared.colour?.inputChannels, 4, file)
            XCTAssertEqual(prepared.header?.decodedChannels, 4, file)
            let managed = try Self.pixels(file, width: 200, converted: true)
            let plain = try Self.pixels(file, width: 200, converted: false)
            XCTAssertEqual(managed.channels, 3, file)
            XCTAssertEqual(plain.channels, 3, file)
            XCTAssertGreaterThan(Self.differences(managed, plain).mean, 5, file)
        }
        // Without a profile: the plain formula, 3 channels from the decoder.
        let bare = try Corpus.good("jpegdecoder_jpg-cmyk-1.jpg").withUnsafeBytes { raw throws(ImagingError) in
            try ImagePipeline().prepare(raw, options: ResizeOptions(width: 16))
        }
        XCTAssertNil(bare.colour)
        XCTAssertEqual(bare.header?.decodedChannels, 3)
    }

    /// `keepProfile`: RGB pixels stay as they were and the JPEG carries the source's profile;
    /// by default the output is sRGB with no profile. CMYK is converted either way.
    func testKeepingTheSourceProfile() throws {
        let bytes = try Corpus.good("bimg_test_icc_prophoto.jpg")
        let source = try bytes.withUnsafeBytes { raw throws(ImagingError) in try ImagePipeline().header(of: raw) }
        var results: [StageResult] = []
        try ImagePipeline().run(bytes, options: ResizeOptions(width: 300, keepProfile: true), delivery: .progressive) {
            results.append($0)
        }
        XCTAssertEqual(results.count, 2)
        for result in results {
            let header = try result.image.bytes.withUnsafeBytes { raw throws(ImagingError) in try ImagePipeline().header(of: raw) }
            XCTAssertEqual(header.iccProfile, source.iccProfile, "\(result.stage) carries the source profile")
        }
        let kept = try ImagePipeline().resize(bytes, options: ResizeOptions(width: 300, format: .pnm, keepProfile: true))
        XCTAssertEqual(try Encoder.decodePNM(kept.image.bytes), try Self.pixels("bimg_test_icc_prophoto.jpg", width: 300, converted: false))
        let converted = try ImagePipeline().resize(bytes, options: ResizeOptions(width: 300))
        let header = try converted.image.bytes.withUnsafeBytes { raw throws(ImagingError) in try ImagePipeline().header(of: raw) }
        XCTAssertNil(header.iccProfile, "sRGB output carries no profile")
        let cmyk = try Corpus.good("thumbor_cmyk-icc.jpg")
        let managed = try ImagePipeline().resize(cmyk, options: ResizeOptions(width: 200, format: .pnm))
        let keptCMYK = try ImagePipeline().resize(cmyk, options: ResizeOptions(width: 200, format: .pnm, keepProfile: true))
        XCTAssertEqual(keptCMYK.image.bytes, managed.image.bytes, "CMYK is converted whatever keepProfile says")
    }

    /// A grey profile keeps the image one channel and converts its tone curve.
    func testGreyStaysGrey() throws {
        let converted = try Self.pixels("thumbor_grayscale-icc.jpg", width: 50, converted: true)
        let raw = try Self.pixels("thumbor_grayscale-icc.jpg", width: 50, converted: false)
        XCTAssertEqual(converted.channels, 1)
        XCTAssertGreaterThan(Self.differences(converted, raw).mean, 1, "Dot Gain 20% is not sRGB's curve")
    }

    /// A damaged or mismatched profile is ignored: the pixels are taken as sRGB, nothing fails.
    func testUnusableProfilesAreIgnored() throws {
        let bytes = try Corpus.good("bimg_test_icc_prophoto.jpg")
        let header = try bytes.withUnsafeBytes { raw throws(ImagingError) in try ImagePipeline().header(of: raw) }
        var profile = try XCTUnwrap(header.iccProfile)
        XCTAssertNotNil(try? ColourTransforms.transform(for: profile, channels: 3).get())
        XCTAssertNil(try? ColourTransforms.transform(for: profile, channels: 1).get(), "an RGB profile on grey pixels")
        profile.replaceSubrange(0..<128, with: [UInt8](repeating: 0xEE, count: 128))
        XCTAssertNil(try? ColourTransforms.transform(for: profile, channels: 3).get())
        XCTAssertNil(try? ColourTransforms.transform(for: [1, 2, 3], channels: 3).get())
        // In a file: the APP2 chunk's profile bytes overwritten with garbage.
        var damaged = bytes
        let marker = try XCTUnwrap(Self.find(Array("ICC_PROFILE".utf8), in: damaged))
        for index in (marker + 14)..<(marker + 14 + 128) { damaged[index] = 0xEE }
        let result = try ImagePipeline().resize(damaged, options: ResizeOptions(width: 300, format: .pnm))
        let plain = try Self.pixels("bimg_test_icc_prophoto.jpg", width: 300, converted: false)
        XCTAssertEqual(try Encoder.decodePNM(result.image.bytes), plain)
    }

    /// One transform per profile, shared by every image and thread that needs it.
    func testTransformsAreSharedAcrossThreads() throws {
        let header = try Corpus.good("bimg_test_exif_full.jpg").withUnsafeBytes { raw throws(ImagingError) in
            try ImagePipeline().header(of: raw)
        }
        let profile = try XCTUnwrap(header.iccProfile)
        let first = try ColourTransforms.transform(for: profile, channels: 3).get()
        XCTAssertTrue(first === (try ColourTransforms.transform(for: profile, channels: 3).get()))
        let expected = try Self.pixels("bimg_test_exif_full.jpg", width: 200, converted: true)
        let mismatches = LockedCount()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            if (try? Self.pixels("bimg_test_exif_full.jpg", width: 200, converted: true)) != expected { mismatches.add() }
        }
        XCTAssertEqual(mismatches.value, 0)
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start..<start + needle.count].elementsEqual(needle) {
            return start
        }
        return nil
    }

    /// A translucent image with an RGB profile, in every input format that carries both, is
    /// converted as RGBA for every output format: the alpha passes through unchanged and the
    /// colour is converted exactly as the same opaque pixels are.
    func testTranslucentImagesWithAProfileAreConvertedForEveryOutput() throws {
        let p3 = try withBytes(try TestImages.bytes("png-iccp-p3.png")) { raw throws(ImagingError) in
            try RasterDecoders.make(.png, data: raw, limits: DecodeLimits(), cancel: nil, failOn: .error).header.iccProfile
        }
        // A flat saturated red, half transparent, and the same red opaque.
        let (width, height) = (16, 12)
        let translucent = PixelBuffer(width: width, height: height, channels: 4,
                                      pixels: Array([UInt8]([220, 40, 30, 128]).repeated(width * height)))
        let opaque = PixelBuffer(width: width, height: height, channels: 3,
                                 pixels: Array([UInt8]([220, 40, 30]).repeated(width * height)))
        for input in [OutputFormat.png, .webp] {
            let source = try Encoder.encode(translucent, format: input, lossless: true, iccProfile: p3).bytes
            let reference = try Encoder.encode(opaque, format: input, lossless: true, iccProfile: p3).bytes
            let expected = try Encoder.decodePNM(try TestImages.run(reference, ResizeOptions(width: 8, format: .pnm)).last!.image.bytes)
            XCTAssertNotEqual(Array(expected.pixels.prefix(3)), [220, 40, 30], "\(input): the profile converted nothing")
            for output in [OutputFormat.png, .webp, .avif, .jpeg, .pnm] {
                var options = ResizeOptions(width: 8, format: output)
                options.lossless = true
                let results = try TestImages.run(source, options, delivery: .progressive)
                XCTAssertEqual(results.map(\.stage), [.degraded, .final], "\(input) → \(output)")
                XCTAssertEqual(results.last!.image.width, 8, "\(input) → \(output)")
                XCTAssertEqual(results.last!.image.format, output)
                guard output.carriesAlpha else { continue }  // flattened: checked for not crashing
                let final = try TestImages.decode(results.last!.image.bytes)
                XCTAssertEqual(final.channels, 4, "\(input) → \(output) keeps the alpha")
                let centre = (final.height / 2 * final.width + final.width / 2) * 4
                XCTAssertEqual(Int(final.pixels[centre + 3]), 128, accuracy: 1, "\(input) → \(output): alpha")
                guard output != .avif else { continue }  // lossy colour: the alpha was the point
                for channel in 0..<3 {
                    XCTAssertEqual(Int(final.pixels[centre + channel]), Int(expected.pixels[channel]), accuracy: 2,
                                   "\(input) → \(output): channel \(channel) converted like the opaque pixels")
                }
            }
        }
    }
}

private final class LockedCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

private extension Array {
    func repeated(_ count: Int) -> [Element] { (0..<count).flatMap { _ in self } }
}
