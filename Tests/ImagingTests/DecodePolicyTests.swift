import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// `fail_on`: which damage fails a decode, at each level, over the corpus's bad files.
final class DecodePolicyTests: XCTestCase {
    /// What each level does with each bad file of the corpus. Each level fails on what the
    /// less sensitive ones fail on, and more; the limits refuse the bombs at every level.
    func testEachLevelOverTheBadCorpus() throws {
        // A PNG named .jpg is read by its content (CorpusTests): no JPEG policy applies.
        let entries = Corpus.manifest("bad").filter { CorpusTests.otherFormats[$0.file] == nil }
        XCTAssertGreaterThan(entries.count, 20, "the bad corpus is missing")
        var accepted: [String: [FailOn]] = [:]
        var codes: [String: [FailOn: ImagingError.Code]] = [:]
        for entry in entries {
            let bytes = try Corpus.bad(entry.file)
            for level in FailOn.allCases {
                do {
                    let result = try ImagePipeline().resize(bytes, options: ResizeOptions(width: 64, failOn: level))
                    XCTAssertGreaterThan(result.image.bytes.count, 0)
                    accepted[entry.file, default: []].append(level)
                } catch let error as ImagingError {
                    codes[entry.file, default: [:]][level] = error.code
                }
            }
            // Monotone: accepted at a level means accepted at every less sensitive one.
            if let most = accepted[entry.file]?.max() {
                XCTAssertEqual(accepted[entry.file], FailOn.allCases.filter { $0 <= most }, entry.file)
            }
        }
        // The corpus's strict expectation (its MANIFEST) is `warning`: every bad file refused.
        for entry in entries {
            XCTAssertFalse(accepted[entry.file, default: []].contains(.warning), "\(entry.file) decoded under warning")
        }
        // Stray bytes between header segments lose nothing: only `warning` refuses them.
        XCTAssertEqual(accepted["pillow_junk_jpeg_header.jpg"], [.none, .truncated, .error])
        XCTAssertEqual(codes["pillow_junk_jpeg_header.jpg"]?[.warning], .corrupt)
        // Truncation: refused from `truncated` on, with its own code; `none` decodes what is there.
        for file in ["sharp_truncated.jpg", "pillow_truncated_jpeg.jpg"] {
            XCTAssertEqual(accepted[file], [.none], file)
            XCTAssertEqual(codes[file]?[.truncated], .truncated, file)
            XCTAssertEqual(codes[file]?[.error], .truncated, file)
        }
        // Damaged entropy-coded data: refused from `error` (the default) on.
        XCTAssertEqual(accepted["bimg_corrupt.jpg"], [.none, .truncated])
        XCTAssertEqual(codes["bimg_corrupt.jpg"]?[.error], .corrupt)
        // Damaged in more than 100 places, or fuzzed so that libjpeg resyncs over and over
        // (seconds of CPU): refused at every level, in milliseconds.
        for file in ["exifsamples_corrupted.jpg", "ljtseed_FuzzTimeout.jpg"] {
            let start = ContinuousClock.now
            XCTAssertNil(try? ImagePipeline().resize(try Corpus.bad(file), options: ResizeOptions(width: 64, failOn: .none)))
            XCTAssertLessThan(ContinuousClock.now - start, .seconds(1), file)
            XCTAssertNil(accepted[file], file)
            XCTAssertEqual(codes[file]?[.none], .corrupt, file)
        }
        // Memory safety does not depend on the level: bombs are refused from their headers.
        for file in ["jpegdecoder_max_size.jpg", "sharp_giant-image.jpg"] {
            XCTAssertNil(accepted[file], file)
            XCTAssertEqual(Set(codes[file, default: [:]].values), [.tooLarge], file)
        }
        // Under the default, every bad file but the stray bytes is refused.
        let byDefault = entries.map(\.file).filter { accepted[$0, default: []].contains(.error) }
        XCTAssertEqual(byDefault, ["pillow_junk_jpeg_header.jpg"])
    }

    /// Libvips and Pillow decode the file with stray header bytes to exactly the pixels of its
    /// clean twin; so must the default policy. The twin is the file without the stray bytes.
    func testStrayBytesDecodeToTheCleanTwinsPixels() throws {
        let junk = try Corpus.bad("pillow_junk_jpeg_header.jpg")
        let (clean, removed) = Self.withoutStrayBytes(junk)
        XCTAssertEqual(removed, 5, "the manifest says 5 stray bytes before DQT")
        let full = ResizeOptions(width: 1024, format: .pnm)
        let fromJunk = try ImagePipeline().resize(junk, options: full)
        let fromClean = try ImagePipeline().resize(clean, options: ResizeOptions(width: 1024, format: .pnm, failOn: .warning))
        XCTAssertEqual(fromJunk.image.width, 1024)
        XCTAssertEqual(fromJunk.image.bytes, fromClean.image.bytes)
        XCTAssertThrowsError(try ImagePipeline().resize(junk, options: ResizeOptions(width: 1024, failOn: .warning)))
    }

    /// The JPEG with bytes that are not part of any segment (between the header's segments)
    /// removed, and how many were removed.
    static func withoutStrayBytes(_ bytes: [UInt8]) -> ([UInt8], Int) {
        var out = Array(bytes[0..<2])  // SOI
        var index = 2, removed = 0
        while index + 4 <= bytes.count {
            guard bytes[index] == 0xFF, bytes[index + 1] != 0x00, bytes[index + 1] != 0xFF else {
                index += 1
                removed += 1
                continue
            }
            let marker = bytes[index + 1]
            let length = Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
            if marker == 0xDA {  // the scan and everything after it, as is
                out += bytes[index...]
                return (out, removed)
            }
            out += bytes[index..<min(bytes.count, index + 2 + length)]
            index += 2 + length
        }
        return (out, removed)
    }
}
