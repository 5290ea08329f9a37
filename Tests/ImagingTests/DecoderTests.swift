import Foundation
import ImageModel
import XCTest
@testable import Imaging
import TestSupport

final class DecoderTests: XCTestCase {
    func testLimitsAreCheckedFromTheHeader() throws {
        let photo = try Corpus.bytes("good", "sharp_2569067123_aca715a2ee_o.jpg")  // 2725×2225
        XCTAssertThrowsError(try ImagePipeline(limits: DecodeLimits(maxPixels: 2725 * 2225 - 1)).resize(photo, options: .init(width: 10))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge)
        }
        XCTAssertNoThrow(try ImagePipeline(limits: DecodeLimits(maxPixels: 2725 * 2225)).resize(photo, options: .init(width: 10)))
        XCTAssertThrowsError(try ImagePipeline(limits: DecodeLimits(maxInputBytes: photo.count - 1)).resize(photo, options: .init(width: 10))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge)
        }
    }

    func testOutputPixelsAreLimitedLikeInputPixels() throws {
        let tiny = try Corpus.bytes("good", "ljtseed_1x1_420.jpg")
        XCTAssertThrowsError(try ImagePipeline(limits: DecodeLimits(maxPixels: 1 << 20))
            .resize(tiny, options: .init(width: 2048, height: 2048, fit: .fill, enlarge: true))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge)
        }
        XCTAssertEqual(try ImagePipeline(limits: DecodeLimits(maxPixels: 1 << 20))
            .resize(tiny, options: .init(width: 1024, height: 1024, fit: .fill, enlarge: true)).image.width, 1024)
    }

    func testDecoderMemoryLimitBoundsProgressiveCoefficientBuffers() throws {
        let progressive = try Corpus.bytes("good", "jxltestdata_flower.png.im_q85_420_progr.jpg")  // 2268×1512
        XCTAssertThrowsError(try ImagePipeline(limits: DecodeLimits(maxDecoderMemory: 1 << 20))
            .resize(progressive, options: .init(width: 100))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .tooLarge)
        }
        XCTAssertNoThrow(try ImagePipeline(limits: DecodeLimits(maxDecoderMemory: 64 << 20))
            .resize(progressive, options: .init(width: 100)))
    }

    /// The APP1 and APP2 markers are read where they lie: 32 MiB of them (XMP-like padding in
    /// front of the EXIF and the profile) cost the decoder no copy, yet the first EXIF and the
    /// whole profile are still found. libjpeg's own saving copied every one of them.
    func testMarkersAreReadInPlaceNotCopied() throws {
        let photo = try Corpus.good("bimg_test_exif_full.jpg")
        let plain = try photo.withUnsafeBytes { try JPEGDecoder(data: $0, limits: DecodeLimits(), cancel: nil).header }
        XCTAssertNotNil(plain.iccProfile)
        XCTAssertNotEqual(plain.orientation, .up)
        var padded: [UInt8] = [0xFF, 0xD8]
        let padding = Self.segment(0xE1, Array("http://ns.adobe.com/xmp/extension/\0".utf8)
                                   + [UInt8](repeating: 0x20, count: 65_000))
        for _ in 0..<512 { padded += padding }
        padded += photo.dropFirst(2)
        XCTAssertGreaterThan(padded.count, 32 << 20)
        var header: JPEGHeader?
        let grew = try Peak.measure {
            header = try padded.withUnsafeBytes { try JPEGDecoder(data: $0, limits: DecodeLimits(), cancel: nil).header }
        }
        XCTAssertLessThan(grew, 8 << 20, "the decoder copied the markers")
        XCTAssertTrue(header?.iccProfile == plain.iccProfile, "the profile is found")
        XCTAssertEqual(header?.orientation, plain.orientation)
    }

    /// An ICC profile's chunks are joined in their sequence order, wherever they stand; a set
    /// with a chunk missing or repeated gives no profile (the pixels are taken as sRGB) and
    /// fails nothing.
    func testProfileChunksAreJoinedInSequenceOrder() throws {
        let photo = try Encoder.encode(PixelBuffer(width: 16, height: 16, channels: 3,
                                                   pixels: [UInt8](repeating: 90, count: 16 * 16 * 3)),
                                       format: .jpeg).bytes
        let profile = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
        let chunks = stride(from: 0, to: profile.count, by: 65_519).map { Array(profile[$0..<min($0 + 65_519, profile.count)]) }
        func file(_ order: [Int], count: Int = 3) -> [UInt8] {
            var bytes: [UInt8] = [0xFF, 0xD8]
            for index in order {
                bytes += Self.segment(0xE2, Array("ICC_PROFILE\0".utf8) + [UInt8(index + 1), UInt8(count)] + chunks[index])
            }
            return bytes + photo.dropFirst(2)
        }
        func header(_ bytes: [UInt8]) throws -> JPEGHeader {
            try bytes.withUnsafeBytes { try JPEGDecoder(data: $0, limits: DecodeLimits(), cancel: nil, failOn: .warning).header }
        }
        XCTAssertEqual(chunks.count, 3)
        XCTAssertTrue(try header(file([0, 1, 2])).iccProfile == profile, "in order")
        XCTAssertTrue(try header(file([2, 0, 1])).iccProfile == profile, "out of order")
        XCTAssertNil(try header(file([0, 2])).iccProfile, "a chunk missing")
        XCTAssertNil(try header(file([0, 1, 1, 2])).iccProfile, "a chunk twice")
        XCTAssertNil(try header(file([0, 1, 2], count: 2)).iccProfile, "a chunk past the count")
        // A gain map's decoder reads no metadata at all.
        let bare = try file([0, 1, 2]).withUnsafeBytes {
            try JPEGDecoder(data: $0, limits: DecodeLimits(), cancel: nil, metadata: false).header
        }
        XCTAssertNil(bare.iccProfile)
    }

    private static func segment(_ marker: UInt8, _ payload: [UInt8]) -> [UInt8] {
        let length = payload.count + 2
        return [0xFF, marker, UInt8(length >> 8), UInt8(length & 0xFF)] + payload
    }

    func testScanLimit() throws {
        let progressive = try Corpus.bytes("good", "imagers_progressive_3.jpg")  // 11 scans, no EXIF thumbnail
        // A degraded-only request reads just the first scans, so only a lower limit bites.
        for (delivery, limit) in [(Delivery.final, 5), (.progressive, 5), (.degraded, 1)] {
            XCTAssertThrowsError(try ImagePipeline(limits: DecodeLimits(maxScans: limit)).run(progressive, options: .init(width: 64), delivery: delivery) { _ in }) {
                XCTAssertEqual(($0 as? ImagingError)?.code, .tooManyScans, "\(delivery)")
            }
        }
        XCTAssertNoThrow(try ImagePipeline(limits: DecodeLimits(maxScans: 11)).resize(progressive, options: .init(width: 64)))
    }

    func testEmptyAndTinyInputs() {
        for (bytes, code) in [([], ImagingError.Code.empty), ([0xFF], .unknownFormat), ([0xFF, 0xD8], .truncated),
                              ([0xFF, 0xD8, 0xFF], .truncated), (Array("GIF89a".utf8), .truncated),
                              (Array("GIF8".utf8), .unknownFormat)] as [([UInt8], ImagingError.Code)] {
            XCTAssertThrowsError(try ImagePipeline().resize(bytes, options: .init(width: 10))) {
                XCTAssertEqual(($0 as? ImagingError)?.code, code, "\(bytes)")
            }
        }
    }

    func testInputFileErrors() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-input-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let empty = dir.appendingPathComponent("empty.jpg")
        XCTAssertTrue(FileManager.default.createFile(atPath: empty.path, contents: Data()))
        let big = dir.appendingPathComponent("big.jpg")
        XCTAssertTrue(FileManager.default.createFile(atPath: big.path, contents: Data(count: 1000)))
        let cases: [(String, ImagingError.Code)] = [
            (dir.appendingPathComponent("missing.jpg").path, .notFound),
            (dir.path, .unreadable),
            (empty.path, .empty),
            (empty.path + "/below-a-file.jpg", .unreadable),
            (big.path, .tooLarge),
        ]
        for (path, code) in cases {
            XCTAssertThrowsError(try InputFile.read(path: path, maxBytes: 999)) {
                XCTAssertEqual(($0 as? ImagingError)?.code, code, path)
            }
        }
        XCTAssertEqual(try InputFile.read(path: big.path, maxBytes: 1000).count, 1000)
    }

    /// A large file is read whole and exact (into a buffer whose pages are mapped in first).
    func testALargeFileIsReadExactly() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-large-\(UUID().uuidString)").path
        defer { unlink(path) }
        var random = SeededGenerator(seed: 0x11F_A017)
        let contents = (0..<(6 << 20) + 123).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(contents)))
        XCTAssertTrue(try InputFile.read(path: path, maxBytes: 8 << 20) == contents)
    }

    /// `prefault` maps a fresh buffer's pages in at once: writing them then takes no page
    /// fault (one a page otherwise), where the kernel has MADV_POPULATE_WRITE (Linux 5.14).
    func testPrefaultMapsAFreshBuffersPagesInAtOnce() throws {
        let size = 6 << 20
        guard let base = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              base != MAP_FAILED else { return XCTFail("mmap: \(String(cString: strerror(errno)))") }
        defer { munmap(base, size) }
        let supported = madvise(base, 4096, 23) == 0  // MADV_POPULATE_WRITE on the first page
        InputFile.prefault(UnsafeMutableBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: size))
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let before = usage.ru_minflt
        memset(base, 0xA5, size)
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let faults = usage.ru_minflt - before
        if supported {
            // One fault a page would be 1,536.
            XCTAssertLessThan(faults, 64, "the buffer's pages faulted in one by one")
        } else {
            XCTAssertGreaterThan(faults, 1_000, "the kernel refuses MADV_POPULATE_WRITE, yet the pages were there")
        }
    }

    func testDegradedComesFromTheCheapestSource() throws {
        let cases: [(String, DegradedSource)] = [
            ("bimg_test_exif_full.jpg", .exifThumbnail),
            ("jxltestdata_flower.png.im_q85_420_progr.jpg", .progressiveScans),
            ("sharp_2569067123_aca715a2ee_o.jpg", .decodedBuffer),
        ]
        for (file, source) in cases {
            var results: [StageResult] = []
            try ImagePipeline().run(try Corpus.bytes("good", file), options: .init(width: 720, height: 588), delivery: .progressive) {
                results.append($0)
            }
            XCTAssertEqual(results.map(\.stage), [.degraded, .final], file)
            XCTAssertEqual(results.map(\.isTerminal), [false, true], file)
            XCTAssertEqual(results[0].degradedSource, source, file)
            XCTAssertLessThanOrEqual(results[0].image.width, results[1].image.width, file)
            XCTAssertLessThanOrEqual(results[0].image.height, results[1].image.height, file)
            // Same aspect ratio as the final, within rounding.
            let a = Double(results[0].image.width) / Double(results[0].image.height)
            let b = Double(results[1].image.width) / Double(results[1].image.height)
            XCTAssertEqual(a, b, accuracy: 0.05 * b, file)
            // The contract (common.proto, STAGE_DEGRADED): half the final size from a decode,
            // the thumbnail's own size (never above the final's) from an embedded thumbnail.
            if source != .exifThumbnail {
                func half(_ n: Int) -> Int { max(1, Int((Double(n) * ImagePipeline.degradedScale).rounded())) }
                XCTAssertEqual(results[0].image.width, half(results[1].image.width), file)
                XCTAssertEqual(results[0].image.height, half(results[1].image.height), file)
            }

            var only: [StageResult] = []
            try ImagePipeline().run(try Corpus.bytes("good", file), options: .init(width: 720, height: 588), delivery: .degraded) {
                only.append($0)
            }
            XCTAssertEqual(only.map(\.stage), [.degraded], file)
            XCTAssertEqual(only.map(\.isTerminal), [true], file)
        }
    }

    func testEncoderOptions() throws {
        let bytes = try Corpus.bytes("good", "sharp_flowers.jpeg")
        let progressive = try ImagePipeline().resize(bytes, options: .init(width: 200, progressive: true))
        XCTAssertTrue(try ImagePipeline().header(of: progressive.image.bytes).progressive)
        let baseline = try ImagePipeline().resize(bytes, options: .init(width: 200))
        XCTAssertFalse(try ImagePipeline().header(of: baseline.image.bytes).progressive)
        let small = try ImagePipeline().resize(bytes, options: .init(width: 200, quality: 20))
        XCTAssertLessThan(small.image.bytes.count, baseline.image.bytes.count)
        let full = try ImagePipeline().resize(bytes, options: .init(width: 200, chroma444: true))
        XCTAssertGreaterThan(full.image.bytes.count, baseline.image.bytes.count)
    }

    /// Cancels JPEG encodes of a large noisy image part-way, after the output buffer has
    /// grown several times: the encoder must free exactly its live buffer (a double free
    /// here aborts the process).
    func testCancelledEncodeAfterTheOutputGrewFreesCleanly() throws {
        var generator = SeededGenerator(seed: 11)
        let side = 2000
        let noise = PixelBuffer(width: side, height: side, channels: 3,
                                pixels: (0..<(side * side * 3)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let start = ContinuousClock.now
        let full = try Encoder.jpeg(noise, quality: 95, progressive: false, chroma444: true)
        let duration = ContinuousClock.now - start
        XCTAssertGreaterThan(full.count, 1 << 20, "the output outgrows the first buffer many times")
        var cancelled = 0
        for attempt in 1...8 {
            let flag = CancellationFlag()
            let thread = Thread {
                Thread.sleep(forTimeInterval: Double(milliseconds(duration)) / 1000 * Double(attempt) / 10)
                flag.cancel()
            }
            thread.start()
            do {
                _ = try Encoder.jpeg(noise, quality: 95, progressive: false, chroma444: true, cancel: flag)
            } catch {
                XCTAssertEqual(error.code, .cancelled)
                cancelled += 1
            }
        }
        XCTAssertGreaterThan(cancelled, 0, "some encodes were cancelled part-way")
    }

    func testPNMRoundTrip() throws {
        var generator = SeededGenerator(seed: 3)
        for channels in [1, 3] {
            let image = PixelBuffer(width: 5, height: 3, channels: channels,
                                    pixels: (0..<(15 * channels)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            XCTAssertEqual(try Encoder.decodePNM(try Encoder.pnm(image)), image)
        }
    }

    func testPreCancelledWorkStopsAtTheFirstCheckpoint() throws {
        let flag = CancellationFlag()
        flag.cancel()
        let bytes = try Corpus.bytes("good", "sharp_2569067123_aca715a2ee_o.jpg")
        for delivery in Delivery.allCases {
            XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
                try ImagePipeline().run(raw, options: .init(width: 100), delivery: delivery, cancel: flag) { _ in
                    XCTFail("no result after cancel")
                }
            }) { XCTAssertEqual(($0 as? ImagingError)?.code, .cancelled) }
        }
    }

    /// Cancels the 99.6 MP decode from another thread at several moments; every run must end
    /// with `.cancelled` (the latency is measured by the cancel benchmark, not asserted here).
    func testCancellationFromAnotherThreadDuringALargeDecode() throws {
        let bytes = try Corpus.bytes("good", "thumbor_9643x10328.jpg")
        for delayMilliseconds in [0, 5, 30] {
            let flag = CancellationFlag()
            let thread = Thread {
                usleep(useconds_t(delayMilliseconds * 1000))
                flag.cancel()
            }
            thread.start()
            XCTAssertThrowsError(try withBytes(bytes) { raw throws(ImagingError) in
                // Full-size output keeps the decode at scale 1: the longest the work can take.
                try ImagePipeline().run(raw, options: .init(width: 9643, format: .pnm), cancel: flag) { _ in }
            }) { XCTAssertEqual(($0 as? ImagingError)?.code, .cancelled, "cancel after \(delayMilliseconds) ms") }
        }
    }
}
