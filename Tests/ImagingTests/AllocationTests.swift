import ImageModel
import TestSupport
import XCTest

@testable import Imaging

/// Large buffers are allocated so that failure is an `ImagingError` for that request, never
/// a crash: through the per-buffer limit (`DecodeLimits.maxBufferBytes`), and for real when
/// malloc itself fails.
final class AllocationTests: XCTestCase {
    private let photo = "sharp_2569067123_aca715a2ee_o.jpg"  // 2725×2225 baseline

    private func assertTooLarge(_ body: @autoclosure () throws -> Any, mentioning words: [String],
                                file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            guard let error = error as? ImagingError else { return XCTFail("\(error)", file: file, line: line) }
            XCTAssertEqual(error.code, .tooLarge, file: file, line: line)
            for word in words {
                XCTAssert(error.message.contains(word), "'\(error.message)' lacks '\(word)'", file: file, line: line)
            }
        }
    }

    func testMallocFailureIsAnErrorNotACrash() {
        // Far beyond any address space: malloc returns NULL.
        assertTooLarge(try BufferAllocator().allocate(1 << 60, for: "a test buffer"),
                       mentioning: ["out of memory", "a test buffer"])
        assertTooLarge(try BufferAllocator().allocate(1 << 40, of: Int16.self, times: 1 << 30, for: "an overflow"),
                       mentioning: ["impossible"])
    }

    func testEachLargeBufferHonoursTheLimit() throws {
        let small = PixelBuffer(width: 400, height: 300, channels: 3,
                                pixels: [UInt8](repeating: 128, count: 400 * 300 * 3))
        let limit = BufferAllocator(maxBytes: 100_000)
        assertTooLarge(try Resampler.resample(small, width: 399, height: 299, allocator: limit),
                       mentioning: ["resized image", "399×299", "above the limit"])
        assertTooLarge(try Orientation.right.apply(to: small, allocator: limit), mentioning: ["oriented image"])
        assertTooLarge(try Resampler.resample(small, region: PixelRect(x: 0, y: 0, width: 390, height: 290),
                                              width: 390, height: 290, allocator: limit),
                       mentioning: ["cropped image"])
        assertTooLarge(try Encoder.encode(small, format: .pnm, allocator: limit), mentioning: ["PNM output"])
        // Noise does not compress: the JPEG's output buffer must grow past the limit.
        var random = SeededGenerator(seed: 3)
        let noise = PixelBuffer(width: 400, height: 300, channels: 3,
                                pixels: (0..<(400 * 300 * 3)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        assertTooLarge(try Encoder.encode(noise, format: .jpeg, quality: 100, allocator: limit),
                       mentioning: ["encoded output", "100000 bytes"])
        // Progressive output keeps every coefficient in memory: libjpeg's own limit applies.
        assertTooLarge(try Encoder.encode(small, format: .jpeg, progressive: true,
                                          allocator: BufferAllocator(maxBytes: 200_000)), mentioning: ["encoding 400×300"])
        // Within the limit all of them work.
        let roomy = BufferAllocator(maxBytes: 2_000_000)
        XCTAssertEqual(try Resampler.resample(small, width: 200, height: 150, allocator: roomy).width, 200)
        XCTAssertGreaterThan(try Encoder.encode(noise, format: .jpeg, progressive: true, allocator: roomy).byteCount, 0)
    }

    /// `Resampler.workingBytes` (used by the memory estimate) must count the buffer between
    /// the passes that the resampler really allocates: with every buffer capped at the larger
    /// of the output and that figure, the resize still succeeds, for either pass order.
    func testWorkingBytesCoverWhatTheResamplerAllocates() throws {
        var random = SeededGenerator(seed: 11)
        for (source, output) in [((600, 400), (150, 100)), ((600, 400), (599, 100)), ((300, 900), (290, 30)),
                                 ((64, 64), (640, 640)), ((1000, 10), (10, 9)), ((31, 700), (30, 700)),
                                 // Large reductions, through the box pre-shrink.
                                 ((4000, 300), (10, 1)), ((300, 4000), (299, 12)), ((2000, 500), (5, 500))] {
            for channels in [1, 3, 4] {
                let image = PixelBuffer(width: source.0, height: source.1, channels: channels,
                                        pixels: (0..<(source.0 * source.1 * channels)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
                for filter in [ResampleFilter.lanczos3, .triangle] {
                    let working = Resampler.workingBytes(regionWidth: source.0, regionHeight: source.1, width: output.0,
                                                         height: output.1, channels: channels, filter: filter)
                    if channels == 3 {
                        XCTAssertGreaterThanOrEqual(working, intermediateBytes(source, output, filter),
                                                    "\(source) → \(output) \(filter)")
                    }
                    let cap = BufferAllocator(maxBytes: max(working, output.0 * output.1 * channels))
                    XCTAssertNoThrow(try Resampler.resample(image, width: output.0, height: output.1, filter: filter,
                                                            allocator: cap), "\(source) → \(output) ×\(channels) \(filter)")
                }
            }
        }
    }

    func testDecodeFailsCleanlyAboveTheLimitAndTheNextImageDecodes() throws {
        let bytes = try Corpus.good(photo)
        // Full size decode: 2725×2225×3 = 18.2 MB, above a 16 MiB cap.
        let capped = ImagePipeline(limits: DecodeLimits(maxBufferBytes: 16 << 20))
        assertTooLarge(try capped.resize(bytes, options: ResizeOptions(width: 2000)),
                       mentioning: ["the decoded image (2725×2225×3)", "above the limit of 16.0 MiB"])
        // Shrink-on-load to 1/4 needs far less: the same pipeline serves it.
        XCTAssertEqual(try capped.resize(bytes, options: ResizeOptions(width: 300)).image.width, 300)
        // libjpeg's whole-image coefficient buffer (progressive input) is capped too.
        let progressive = try Corpus.good("jxltestdata_flower.png.im_q85_420_progr.jpg")
        assertTooLarge(try ImagePipeline(limits: DecodeLimits(maxBufferBytes: 4 << 20))
            .resize(progressive, options: ResizeOptions(width: 100)), mentioning: ["more memory than the limit"])
    }

    func testEncodedOutputIsNotCopied() throws {
        let image = PixelBuffer(width: 64, height: 64, channels: 1, pixels: [UInt8](repeating: 9, count: 64 * 64))
        let encoded = try Encoder.encode(image, format: .jpeg)
        XCTAssertEqual(encoded.bytes.prefix(2), [0xFF, 0xD8])
        XCTAssertEqual(encoded.byteCount, encoded.bytes.count)
        XCTAssertEqual(encoded, EncodedImage(bytes: encoded.bytes, width: 64, height: 64, format: .jpeg))
        XCTAssertEqual(try Encoder.decodePNM(Encoder.encode(image, format: .pnm).bytes), image)
    }

    /// The buffers an RGB resample allocates besides its output (the boxes of a large
    /// reduction, the buffer between the passes), from the resampler's own objects and decisions.
    private func intermediateBytes(_ source: (Int, Int), _ output: (Int, Int), _ filter: ResampleFilter) -> Int {
        func axis(_ inSize: Int, _ outSize: Int) -> AxisCoefficients? {
            guard inSize != outSize else { return nil }
            return AxisCoefficients(inSize: inSize, outSize: outSize, filter: filter,
                                    box: Resampler.boxFactor(inSize: inSize, outSize: outSize))
        }
        let (xs, ys) = (axis(source.0, output.0), axis(source.1, output.1))
        let job = Resampler.Job(source: PixelBuffer(width: source.0, height: source.1, channels: 3),
                                region: PixelRect(x: 0, y: 0, width: source.0, height: source.1),
                                width: output.0, height: output.1, xs: xs, ys: ys, cancel: nil, allocator: BufferAllocator())
        let boxes = job.boxes ? job.inputWidth * job.inputHeight * 3 * 2 : 0
        guard let xs, let ys else { return boxes }
        let (horizontal, vertical) = (HorizontalTaps<RGBLayout>(xs), VerticalTaps(ys))
        if job.verticalFirstIsCheaper(horizontal, vertical) {
            let rowLength = job.inputWidth * 3
            let rows = job.rowsPerRun(workPerRow: rowLength * vertical.workPerSample + horizontal.workPerRow)
            return boxes + ((rows - 1) * rowLength + max(rowLength, horizontal.readSpan)) * 2
        }
        return boxes + vertical.inputRows.count * output.0 * 3 * 2
    }
}
