import Dispatch
import ImageModel
import XCTest
@testable import Imaging
import TestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

final class ResamplerTests: XCTestCase {
    // Random images come from one fixed seed, printed so that a failure names what to replay.
    static let seed: UInt64 = 0x5EED_2024_0C0F_FEE5
    private var random = SeededGenerator(seed: ResamplerTests.seed)

    override func setUp() {
        random = SeededGenerator(seed: Self.seed)
        print("ResamplerTests seed: 0x\(String(Self.seed, radix: 16))")
    }

    // MARK: Golden properties

    func testConstantImageStaysConstant() throws {
        let sizes = [(37, 23, 10, 7), (5, 4, 23, 17), (40, 6, 9, 20), (64, 64, 3, 50), (1, 9, 6, 2)]
        for filter in [ResampleFilter.lanczos3, .triangle] {
            for channels in [1, 3, 4] {
                let value = Array([0, 255, 137, 1].prefix(channels)) as [UInt8]
                for (w, h, ow, oh) in sizes {
                    let image = PixelBuffer(width: w, height: h, channels: channels,
                                            pixels: Array(repeatElement(value, count: w * h).joined()))
                    let out = try Resampler.resample(image, width: ow, height: oh, filter: filter)
                    for (i, sample) in out.pixels.enumerated() where sample != value[i % channels] {
                        XCTFail("\(filter) \(channels)ch \(w)×\(h)→\(ow)×\(oh): sample \(i) is \(sample)")
                        break
                    }
                }
            }
        }
    }

    func testIdentitySizeReturnsIdenticalPixels() throws {
        for channels in [1, 3, 4] {
            let image = randomImage(width: 31, height: 17, channels: channels)
            XCTAssertEqual(try Resampler.resample(image, width: 31, height: 17), image)
            XCTAssertEqual(try Resampler.resample(image, width: 31, height: 17, filter: .triangle), image)
            let region = PixelRect(x: 3, y: 2, width: 20, height: 9)
            XCTAssertEqual(try Resampler.resample(image, region: region, width: 20, height: 9), crop(image, region))
        }
    }

    func testOnePixelWideAndOnePixelTall() throws {
        for channels in [1, 3, 4] {
            let column = randomImage(width: 1, height: 50, channels: channels)
            let row = randomImage(width: 50, height: 1, channels: channels)
            let cases = [(column, 1, 7), (column, 1, 120), (column, 4, 9), (row, 7, 1), (row, 120, 1), (row, 9, 4)]
            for (image, w, h) in cases {
                let out = try Resampler.resample(image, width: w, height: h)
                XCTAssertEqual(out.width, w)
                XCTAssertEqual(out.height, h)
                assertMatchesReference(out, image, nil, .lanczos3, "\(image.width)×\(image.height)→\(w)×\(h)")
            }
        }
    }

    func testMatchesDoublePrecisionReference() throws {
        // (source, output): down, up, mixed, non-integer ratios, one axis only, and both pass
        // orders (checked below, so the list cannot drift to one of them).
        let cases = [
            ((64, 48), (20, 30)), ((17, 13), (5, 4)), ((100, 7), (33, 21)), ((9, 9), (31, 40)),
            ((300, 200), (11, 7)), ((97, 61), (45, 60)), ((64, 10), (20, 50)), ((20, 64), (60, 9)),
            ((40, 30), (40, 11)), ((40, 30), (13, 30)), ((23, 29), (71, 29)), ((136, 111), (72, 58)),
        ]
        let orders = Set(cases.compactMap { verticalFirst(source: $0.0, output: $0.1) })
        XCTAssertEqual(orders, [true, false], "the cases cover both pass orders")

        for channels in [1, 3, 4] {
            for ((w, h), (ow, oh)) in cases {
                // Noise has no exact ties, so rounding must match on average too; black and
                // white blocks ring the most but are full of exact ties.
                let images = [(randomImage(width: w, height: h, channels: channels), true),
                              (blocksImage(width: w, height: h, channels: channels), false)]
                for (image, isNoise) in images {
                    for filter in [ResampleFilter.lanczos3, .triangle] {
                        let out = try Resampler.resample(image, width: ow, height: oh, filter: filter)
                        let label = "\(channels)ch \(w)×\(h)→\(ow)×\(oh) \(filter)"
                        assertMatchesReference(out, image, nil, filter, label, checkMean: isNoise)
                    }
                }
            }
        }
    }

    func testRegionEqualsResamplingACroppedCopy() throws {
        let regions = [PixelRect(x: 7, y: 5, width: 31, height: 22), PixelRect(x: 0, y: 0, width: 50, height: 40),
                       PixelRect(x: 19, y: 28, width: 31, height: 12), PixelRect(x: 49, y: 0, width: 1, height: 40)]
        let outputs = [(12, 9), (40, 30), (31, 5), (7, 22), (3, 60)]
        for channels in [1, 3, 4] {
            let image = randomImage(width: 50, height: 40, channels: channels)
            for region in regions {
                let cropped = crop(image, region)
                for (w, h) in outputs {
                    let label = "\(channels)ch \(region) → \(w)×\(h)"
                    let fromRegion = try Resampler.resample(image, region: region, width: w, height: h)
                    XCTAssertEqual(fromRegion, try Resampler.resample(cropped, width: w, height: h), label)
                    assertMatchesReference(fromRegion, image, region, .lanczos3, label)
                }
            }
        }
    }

    func testHorizontalGradientStaysMonotonic() throws {
        // Red and green rise, blue falls, along every row.
        let width = 256, height = 6
        let row = (0..<width).flatMap { x in [UInt8(x), UInt8(x), UInt8(255 - x)] }
        let image = PixelBuffer(width: width, height: height, channels: 3,
                                pixels: Array(repeatElement(row, count: height).joined()))
        for (w, h) in [(97, 5), (700, 9), (13, 2), (256, 3)] {
            for filter in [ResampleFilter.lanczos3, .triangle] {
                let out = try Resampler.resample(image, width: w, height: h, filter: filter).pixels
                for y in 0..<h {
                    for x in 1..<w {
                        let previous = (y * w + x - 1) * 3, current = (y * w + x) * 3
                        let label = "\(w)×\(h) \(filter) at (\(x), \(y))"
                        XCTAssertLessThanOrEqual(out[previous], out[current], label)
                        XCTAssertLessThanOrEqual(out[previous + 1], out[current + 1], label)
                        XCTAssertGreaterThanOrEqual(out[previous + 2], out[current + 2], label)
                    }
                }
            }
        }
    }

    func testHandComputedTriangleValues() throws {
        // Downscale 4 → 2: windows of three pixels weighted 3:3:1 (a tent of half-width 2).
        let row = PixelBuffer(width: 4, height: 1, channels: 1, pixels: [10, 20, 30, 40])
        XCTAssertEqual(try Resampler.resample(row, width: 2, height: 1, filter: .triangle).pixels, [17, 33])
        // Downscale 2 → 1: 127.5 rounds half up.
        let pair = PixelBuffer(width: 2, height: 1, channels: 1, pixels: [0, 255])
        XCTAssertEqual(try Resampler.resample(pair, width: 1, height: 1, filter: .triangle).pixels, [128])
        // Upscale 2 → 4: output centres at 0.25, 0.75, 1.25, 1.75; the outer two see one pixel.
        let up = PixelBuffer(width: 1, height: 2, channels: 1, pixels: [0, 100])
        XCTAssertEqual(try Resampler.resample(up, width: 1, height: 4, filter: .triangle).pixels, [0, 25, 75, 100])
    }

    func testWeightsSumToExactlyOneInFixedPoint() {
        let sizes = [(1, 1), (1, 100), (7, 3), (100, 7), (1362, 720), (4032, 720), (3, 1000), (5, 4)]
        for filter in [ResampleFilter.lanczos3, .triangle] {
            for (inSize, outSize) in sizes {
                let axis = AxisCoefficients(inSize: inSize, outSize: outSize, filter: filter)
                for i in 0..<outSize {
                    let weights = axis.weights[(i * axis.taps)..<((i + 1) * axis.taps)].map { Int32($0) }
                    XCTAssertEqual(weights.reduce(0, +), 1 << 14, "\(filter) \(inSize)→\(outSize) output \(i)")
                    XCTAssertLessThan(weights.reduce(0) { $0 + abs($1) }, 2 << 14)
                    XCTAssertTrue(axis.starts[i] >= 0 && axis.starts[i] + axis.taps <= inSize)
                }
            }
        }
    }

    // MARK: Errors and cancellation

    func testInvalidArgumentsThrowInvalidArgument() {
        let image = randomImage(width: 20, height: 10, channels: 3)
        let bad: [(PixelRect?, Int, Int)] = [
            (nil, 0, 5), (nil, 5, 0), (nil, -1, 5), (nil, 5, Int.max),
            (PixelRect(x: -1, y: 0, width: 5, height: 5), 3, 3), (PixelRect(x: 0, y: -1, width: 5, height: 5), 3, 3),
            (PixelRect(x: 16, y: 0, width: 5, height: 5), 3, 3), (PixelRect(x: 0, y: 6, width: 5, height: 5), 3, 3),
            (PixelRect(x: 0, y: 0, width: 0, height: 5), 3, 3), (PixelRect(x: 0, y: 0, width: 5, height: 0), 3, 3),
            (PixelRect(x: Int.max, y: 0, width: 5, height: 5), 3, 3),
        ]
        for (region, w, h) in bad {
            XCTAssertThrowsError(try Resampler.resample(image, region: region, width: w, height: h)) { error in
                XCTAssertEqual((error as? ImagingError)?.code, .invalidArgument,
                               "\(String(describing: region)) \(w)×\(h)")
            }
        }
    }

    func testPreCancelledFlagThrowsCancelled() {
        let flag = CancellationFlag()
        flag.cancel()
        let image = randomImage(width: 40, height: 30, channels: 3)
        XCTAssertThrowsError(try Resampler.resample(image, width: 10, height: 10, cancel: flag)) { error in
            XCTAssertEqual((error as? ImagingError)?.code, .cancelled)
        }
    }

    func testCancellingDuringWorkStopsPromptly() throws {
        // Vertical first, one vertical pass, one horizontal pass, horizontal first, and a box
        // pre-shrink.
        let image = PixelBuffer(width: 4000, height: 3000, channels: 3)
        var stoppedByCancel = 0
        for (w, h) in [(500, 375), (4000, 375), (500, 3000), (700, 7500), (2, 2)] {
            let flag = CancellationFlag()
            let cancelledAt = Instant()
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(2)) {
                cancelledAt.record()
                flag.cancel()
            }
            var threw = false
            do {
                _ = try Resampler.resample(image, width: w, height: h, cancel: flag)
            } catch {
                threw = true
                XCTAssertEqual((error as? ImagingError)?.code, .cancelled, "\(w)×\(h)")
            }
            let stopped = DispatchTime.now().uptimeNanoseconds
            let cancelled = cancelledAt.wait()
            guard threw else {
                // A fast machine may finish a small output before the cancel is even asked for.
                XCTAssertGreaterThan(cancelled, stopped, "\(w)×\(h): ran on past its cancel")
                continue
            }
            stoppedByCancel += 1
            // Generous: tests may run unoptimised, where a run of rows is far slower.
            XCTAssertLessThan(Double(stopped - cancelled) / 1e6, 250, "\(w)×\(h): ms from cancel to throw")
        }
        XCTAssertGreaterThanOrEqual(stoppedByCancel, 3, "the cancel should land mid-work for most shapes")
    }

    /// A time recorded on one thread and read on another.
    final class Instant: @unchecked Sendable {
        private var nanoseconds: UInt64 = 0
        private let recorded = DispatchSemaphore(value: 0)

        func record() {
            nanoseconds = DispatchTime.now().uptimeNanoseconds
            recorded.signal()
        }

        func wait() -> UInt64 {
            recorded.wait()
            return nanoseconds
        }
    }

    // MARK: Size table

    func testSizeTable() throws {
        let cases: [(source: (Int, Int), output: (Int, Int))] = [
            ((1, 37), (23, 1)), ((37, 1), (1, 23)), ((1, 1), (1, 1)), ((1, 1), (64, 48)), ((64, 48), (1, 1)),
            ((1, 200), (1, 3)), ((200, 1), (3, 1)), ((13, 1), (5, 1)), ((1, 13), (1, 5)), ((2, 2), (3, 3)),
            ((7, 11), (13, 17)), ((101, 103), (37, 41)), ((97, 89), (3, 2)), ((31, 29), (93, 87)),
            ((16, 16), (48, 48)), ((3, 5), (1000, 2)), ((500, 3), (2, 700)), ((1, 5), (1, 16)), ((6, 1), (16, 1)),
        ]
        for channels in [1, 3, 4] {
            for (source, output) in cases {
                let image = randomImage(width: source.0, height: source.1, channels: channels)
                let label = "\(channels)ch \(source.0)×\(source.1)→\(output.0)×\(output.1)"
                let out = try Resampler.resample(image, width: output.0, height: output.1)
                XCTAssertEqual(out.width, output.0, label)
                XCTAssertEqual(out.height, output.1, label)
                XCTAssertEqual(out.channels, channels, label)
                XCTAssertEqual(out.pixels.count, output.0 * output.1 * channels, label)
                assertMatchesReference(out, image, nil, .lanczos3, label)
            }
        }
    }

    // MARK: Reference and helpers

    /// Resamples in `Double`, with no intermediate rounding or clamping, and rounds the result
    /// half up. Each output pixel is centred on input coordinate `(i + 0.5) · scale`, the
    /// kernel is stretched by `scale` when downscaling, and windows are cut at the region's
    /// borders and renormalised.
    static func reference(_ image: PixelBuffer, _ region: PixelRect?, _ width: Int, _ height: Int,
                          _ filter: ResampleFilter) -> [UInt8] {
        let region = region ?? PixelRect(x: 0, y: 0, width: image.width, height: image.height)
        let c = image.channels
        let pixels = image.pixels
        var rows = [Double](repeating: 0, count: region.height * width * c)
        let columnWeights = referenceWeights(region.width, width, filter)
        for y in 0..<region.height {
            let rowStart = ((region.y + y) * image.width + region.x) * c
            for (x, (first, weights)) in columnWeights.enumerated() {
                for ch in 0..<c {
                    var sum = 0.0
                    for (k, w) in weights.enumerated() {
                        sum += w * Double(pixels[rowStart + (first + k) * c + ch])
                    }
                    rows[(y * width + x) * c + ch] = sum
                }
            }
        }
        var out = [UInt8](repeating: 0, count: width * height * c)
        for (y, (first, weights)) in referenceWeights(region.height, height, filter).enumerated() {
            for i in 0..<(width * c) {
                var sum = 0.0
                for (k, w) in weights.enumerated() { sum += w * rows[(first + k) * width * c + i] }
                // The epsilon keeps float noise from splitting exact ties (common with the tent
                // filter) both ways.
                out[y * width * c + i] = UInt8(max(0, min(255, (sum + 0.5 + 1e-9).rounded(.down))))
            }
        }
        return out
    }

    /// Per output index: the first input index and the normalised weights from there on.
    static func referenceWeights(_ inSize: Int, _ outSize: Int, _ filter: ResampleFilter) -> [(Int, [Double])] {
        let scale = Double(inSize) / Double(outSize)
        let stretch = max(1, scale)
        let support: Double
        let kernel: (Double) -> Double
        switch filter {
        case .lanczos3:
            support = 3
            kernel = { x in
                guard x != 0 else { return 1 }
                guard abs(x) < 3 else { return 0 }
                return 3 * sin(.pi * x) * sin(.pi * x / 3) / (.pi * .pi * x * x)
            }
        case .triangle:
            support = 1
            kernel = { x in max(0, 1 - abs(x)) }
        }
        return (0..<outSize).map { i in
            let center = (Double(i) + 0.5) * scale
            let first = max(0, Int(floor(center - support * stretch + 0.5)))
            let end = min(inSize, Int(floor(center + support * stretch + 0.5)))
            let raw = (first..<end).map { kernel((Double($0) + 0.5 - center) / stretch) }
            let total = raw.reduce(0, +)
            return (first, raw.map { $0 / total })
        }
    }

    /// At most one level off the reference anywhere; with `checkMean`, also within 0.05
    /// levels of it on average (over enough samples to tell): rounded, not truncated. Exact
    /// ties in the reference may go either way in fixed point, so `checkMean` is for noise.
    func assertMatchesReference(_ out: PixelBuffer, _ image: PixelBuffer, _ region: PixelRect?,
                                _ filter: ResampleFilter, _ label: String, checkMean: Bool = true,
                                line: UInt = #line) {
        let expected = Self.reference(image, region, out.width, out.height, filter)
        let actual = out.pixels
        var worst = 0, worstIndex = 0, bias = 0
        for (i, (a, b)) in zip(actual, expected).enumerated() {
            let difference = Int(a) - Int(b)
            bias += difference
            if abs(difference) > worst {
                worst = abs(difference)
                worstIndex = i
            }
        }
        XCTAssertLessThanOrEqual(
            worst, 1, "\(label): sample \(worstIndex) is \(actual[worstIndex]), reference \(expected[worstIndex])",
            line: line)
        if checkMean && actual.count >= 200 {
            XCTAssertLessThan(abs(Double(bias) / Double(actual.count)), 0.05, "\(label): mean difference",
                              line: line)
        }
    }

    /// Whether the resampler would run the vertical pass first (nil if one axis is unchanged).
    func verticalFirst(source: (Int, Int), output: (Int, Int)) -> Bool? {
        guard source.0 != output.0, source.1 != output.1 else { return nil }
        let xs = AxisCoefficients(inSize: source.0, outSize: output.0, filter: .lanczos3)
        let ys = AxisCoefficients(inSize: source.1, outSize: output.1, filter: .lanczos3)
        let job = Resampler.Job(
            source: PixelBuffer(width: source.0, height: source.1, channels: 3),
            region: PixelRect(x: 0, y: 0, width: source.0, height: source.1),
            width: output.0, height: output.1, xs: xs, ys: ys, cancel: nil, allocator: BufferAllocator())
        return job.verticalFirstIsCheaper(HorizontalTaps<RGBLayout>(xs), VerticalTaps(ys))
    }

    func randomImage(width: Int, height: Int, channels: Int) -> PixelBuffer {
        PixelBuffer(width: width, height: height, channels: channels,
                    pixels: (0..<(width * height * channels)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
    }

    /// Random blocks of black and white, a different pattern per channel: the strongest
    /// ringing Lanczos can produce.
    func blocksImage(width: Int, height: Int, channels: Int) -> PixelBuffer {
        let columns = (0..<width).map { _ in random.next() % 3 == 0 }
        let rows = (0..<height).map { _ in random.next() % 3 == 0 }
        var pixels: [UInt8] = []
        for y in 0..<height {
            for x in 0..<width {
                let white = columns[x] != rows[y]
                pixels += (0..<channels).map { c in white != (c == 1) ? 255 : 0 }
            }
        }
        return PixelBuffer(width: width, height: height, channels: channels, pixels: pixels)
    }

    func crop(_ image: PixelBuffer, _ r: PixelRect) -> PixelBuffer {
        var pixels: [UInt8] = []
        for y in r.y..<(r.y + r.height) {
            let start = (y * image.width + r.x) * image.channels
            pixels += image.pixels[start..<(start + r.width * image.channels)]
        }
        return PixelBuffer(width: r.width, height: r.height, channels: image.channels, pixels: pixels)
    }
}
