import XCTest
@testable import Imaging
import TestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Large reductions, up to the largest the pipeline can ask of the resampler on its own: a
/// 65500 px JPEG axis to 1 px. Every ratio must land within one level of exact Lanczos-3
/// (`ResamplerTests.reference`, in `Double`, with the same windows and support scaling).
///
/// The huge axes are one pixel (or a few) across, so the `Double` reference stays cheap.
final class ResamplerPrecisionTests: XCTestCase {
    static let seed: UInt64 = 0x5EED_6550_0000_0001
    private var random = SeededGenerator(seed: ResamplerPrecisionTests.seed)

    override func setUp() {
        random = SeededGenerator(seed: Self.seed)
        print("ResamplerPrecisionTests seed: 0x\(String(Self.seed, radix: 16))")
    }

    /// A 0…255 ramp reduced to one pixel is its middle (about 127.5), on either axis.
    func testRampsReducedToOnePixelLandOnTheMiddle() throws {
        for length in [20000, 65500] {
            for channels in [1, 3, 4] {
                for horizontal in [true, false] {
                    let image = line(length, channels: channels, horizontal: horizontal, ramp(length))
                    let out = try Resampler.resample(image, width: horizontal ? 1 : image.width,
                                                     height: horizontal ? image.height : 1)
                    let label = "\(channels)ch \(image.width)×\(image.height) → \(out.width)×\(out.height)"
                    // Rising in even channels, falling in odd ones: both land on the middle.
                    for sample in out.pixels {
                        XCTAssertTrue((127...128).contains(sample), "\(label): \(out.pixels)")
                    }
                    assertWithinOneLevel(out, of: image, label)
                }
            }
        }
    }

    func testRampsReducedByLargeRatiosOnBothAxes() throws {
        for length in [20000, 65500] {
            for outLength in [2, 3, 7, 16, 61, 300, 1000] {
                try checkEveryLayoutAndAxis(ramp(length), to: outLength, "ramp")
            }
        }
    }

    /// Reduction ratios from the common range up to the largest, on both axes, for noise
    /// (each output a weighted mean of thousands of unrelated samples), smooth "photo-like"
    /// content, hard edges and a ramp.
    func testRatioSweepOnBothAxes() throws {
        for ratio in [2, 3.7, 16, 100, 160, 250, 1000, 5000, 20000, 65500] {
            // As long as the decoder allows for the huge ratios; shorter (fewer outputs, the
            // same windows) for the others, to keep the test quick.
            let length = ratio < 1000 ? 20000 : 65500
            let outLength = max(1, Int((Double(length) / ratio).rounded()))
            let contents = [("noise", noise(length)), ("smooth", smooth(length)),
                            ("edges", edges(length, segment: ratio)), ("ramp", ramp(length))]
            for (name, content) in contents {
                try checkEveryLayoutAndAxis(content, to: outLength, "\(name) ratio \(ratio)")
            }
        }
    }

    /// The tent filter goes through the same windows and boxes.
    func testTentAtLargeRatios() throws {
        for ratio in [100, 250, 1000, 65500] {
            let outLength = 65500 / ratio
            for (name, content) in [("noise", noise(65500)), ("edges", edges(65500, segment: Double(ratio)))] {
                try checkEveryLayoutAndAxis(content, to: outLength, "\(name) ratio \(ratio)", filter: .triangle)
            }
        }
    }

    /// Both axes reduced a lot at once, so that both passes (and a pre-shrink on both axes)
    /// run, in both pass orders.
    func testLargeReductionsOnBothAxes() throws {
        let cases = [((2000, 400), (3, 2)), ((400, 2000), (2, 3)), ((900, 700), (1, 1)), ((1300, 1100), (5, 4)),
                     ((20000, 30), (1, 1)), ((30, 20000), (3, 1)), ((6000, 100), (30, 1))]
        for ((w, h), (ow, oh)) in cases {
            for channels in [1, 3, 4] {
                let images = [("noise", randomImage(w, h, channels)), ("smooth", smoothImage(w, h, channels)),
                              ("blocks", blocksImage(w, h, channels))]
                for (name, image) in images {
                    let out = try Resampler.resample(image, width: ow, height: oh)
                    assertWithinOneLevel(out, of: image, "\(name) \(channels)ch \(w)×\(h) → \(ow)×\(oh)")
                }
            }
        }
    }

    /// Every fixed-point weight is within one unit (`2^-14`) of its exact value, also when a
    /// window covers thousands of pixels; the rounding residue is spread, not piled on one tap.
    func testFixedPointWeightsAreWithinOneUnitOfExact() {
        let sizes = [(7, 3), (100, 7), (1362, 720), (4032, 720), (5000, 1000), (20000, 3), (20000, 1), (65500, 1),
                     (65500, 7), (65500, 400)]
        for filter in [ResampleFilter.lanczos3, .triangle] {
            for (inSize, outSize) in sizes {
                let axis = AxisCoefficients(inSize: inSize, outSize: outSize, filter: filter)
                var worst = 0.0
                for (i, (first, exact)) in ResamplerTests.referenceWeights(inSize, outSize, filter).enumerated() {
                    for k in 0..<axis.taps {
                        let index = axis.starts[i] + k - first
                        let expected = exact.indices.contains(index) ? exact[index] * Double(AxisCoefficients.one) : 0
                        worst = max(worst, abs(Double(axis.weights[i * axis.taps + k]) - expected))
                    }
                }
                XCTAssertLessThan(worst, 1, "\(filter) \(inSize)→\(outSize): worst weight error in units of 2^-14")
            }
        }
    }

    // MARK: Helpers

    /// Resamples `content` as a row and as a column, in gray, RGB and RGBA (see `line`), to
    /// `outLength` pixels along it, and checks each result. All six share one reference: the
    /// RGBA row's.
    func checkEveryLayoutAndAxis(_ content: [UInt8], to outLength: Int, _ what: String,
                                 filter: ResampleFilter = .lanczos3, line: UInt = #line) throws {
        let row = self.line(content.count, channels: 4, horizontal: true, content)
        let expected = ResamplerTests.reference(row, nil, outLength, 1, filter)
        for channels in [1, 3, 4] {
            for horizontal in [true, false] {
                let image = self.line(content.count, channels: channels, horizontal: horizontal, content)
                let (w, h) = horizontal ? (outLength, 1) : (1, outLength)
                let out = try Resampler.resample(image, width: w, height: h, filter: filter)
                let label = "\(what) \(channels)ch \(image.width)×\(image.height) → \(w)×\(h) \(filter)"
                assertWithinOneLevel(out, of: expected, channels: 4, label, line: line)
            }
        }
    }

    /// At most one level off the `Double` reference anywhere.
    func assertWithinOneLevel(_ out: PixelBuffer, of image: PixelBuffer, _ label: String, line: UInt = #line) {
        let expected = ResamplerTests.reference(image, nil, out.width, out.height, .lanczos3)
        assertWithinOneLevel(out, of: expected, channels: image.channels, label, line: line)
    }

    /// At most one level off `expected`, whose pixels have `channels` channels (channel `c`
    /// of `out` is compared with channel `c` of `expected`).
    func assertWithinOneLevel(_ out: PixelBuffer, of expected: [UInt8], channels: Int, _ label: String,
                              line: UInt = #line) {
        var worst = 0, worstIndex = 0, worstExpected: UInt8 = 0
        for (i, sample) in out.pixels.enumerated() {
            let (pixel, c) = i.quotientAndRemainder(dividingBy: out.channels)
            let reference = expected[pixel * channels + c]
            if abs(Int(sample) - Int(reference)) > worst {
                (worst, worstIndex, worstExpected) = (abs(Int(sample) - Int(reference)), i, reference)
            }
        }
        XCTAssertLessThanOrEqual(worst, 1, """
            \(label): sample \(worstIndex) is \(out.pixels[worstIndex]), reference \(worstExpected)
            """, line: line)
    }

    /// A one-pixel row (or column) of `length` pixels: channel `c` of pixel `x` is
    /// `content[x]`, inverted in odd channels so that the channels differ.
    func line(_ length: Int, channels: Int, horizontal: Bool, _ content: [UInt8]) -> PixelBuffer {
        var pixels = [UInt8](repeating: 0, count: length * channels)
        for x in 0..<length {
            for c in 0..<channels { pixels[x * channels + c] = c % 2 == 0 ? content[x] : 255 - content[x] }
        }
        return PixelBuffer(width: horizontal ? length : 1, height: horizontal ? 1 : length, channels: channels,
                           pixels: pixels)
    }

    /// 0…255, each level held for `length / 256` pixels.
    func ramp(_ length: Int) -> [UInt8] {
        (0..<length).map { UInt8($0 * 256 / length) }
    }

    func noise(_ length: Int) -> [UInt8] {
        (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    /// A few slow waves of random phase, plus a little noise: like a row of a photo.
    func smooth(_ length: Int) -> [UInt8] {
        let phases = (0..<3).map { _ in Double(random.next() % 1000) / 1000 * 2 * .pi }
        return (0..<length).map { x in
            let t = Double(x) / Double(length)
            let wave = 90 * sin(2 * .pi * 2 * t + phases[0]) + 25 * sin(2 * .pi * 17 * t + phases[1])
                + 8 * sin(2 * .pi * 151 * t + phases[2])
            let grain = Double(random.next() % 9) - 4
            return UInt8(max(0, min(255, (128 + wave + grain).rounded())))
        }
    }

    /// Flat runs of random levels with hard edges between them, the runs about 0.3 to 3
    /// output pixels long when reducing by `segment`.
    func edges(_ length: Int, segment: Double) -> [UInt8] {
        var content: [UInt8] = []
        content.reserveCapacity(length)
        while content.count < length {
            let run = max(1, Int(segment * Double(3 + random.next() % 28) / 10))
            let level = UInt8(truncatingIfNeeded: random.next())
            content += repeatElement(level, count: min(run, length - content.count))
        }
        return content
    }

    func randomImage(_ width: Int, _ height: Int, _ channels: Int) -> PixelBuffer {
        PixelBuffer(width: width, height: height, channels: channels,
                    pixels: (0..<(width * height * channels)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
    }

    /// Slow gradients and waves across both axes, different per channel.
    func smoothImage(_ width: Int, _ height: Int, _ channels: Int) -> PixelBuffer {
        // Sums of products of waves along each axis, tabulated once per axis.
        func wave(_ i: Int, of length: Int, cycles: Double, phase: Double) -> Double {
            sin(2 * Double.pi * (cycles * Double(i) / Double(length) + phase))
        }
        let across = (0..<width).map { x in
            (0..<channels).map { c in wave(x, of: width, cycles: Double(c + 1), phase: 0.1 * Double(c)) }
        }
        let ripple = (0..<width).map { x in wave(x, of: width, cycles: 7, phase: 0.25) }
        let down = (0..<height).map { y in wave(y, of: height, cycles: 1.5, phase: 0.25) }
        let waves = (0..<height).map { y in (0..<channels).map { c in wave(y, of: height, cycles: 5, phase: 0.15 * Double(c)) } }
        var pixels = [UInt8](repeating: 0, count: width * height * channels)
        for y in 0..<height {
            for x in 0..<width {
                for c in 0..<channels {
                    let value = 128 + 80 * across[x][c] * down[y] + 30 * waves[y][c] + 15 * ripple[x]
                    pixels[(y * width + x) * channels + c] = UInt8(max(0, min(255, value.rounded())))
                }
            }
        }
        return PixelBuffer(width: width, height: height, channels: channels, pixels: pixels)
    }

    /// Black and white rectangles of random sizes, a different pattern per channel.
    func blocksImage(_ width: Int, _ height: Int, _ channels: Int) -> PixelBuffer {
        func bands(_ length: Int) -> [Bool] {
            var bands: [Bool] = []
            while bands.count < length {
                let run = 1 + Int(random.next() % UInt64(max(1, length / 6)))
                bands += repeatElement(random.next() % 2 == 0, count: min(run, length - bands.count))
            }
            return bands
        }
        let columns = bands(width), rows = bands(height)
        var pixels = [UInt8](repeating: 0, count: width * height * channels)
        for y in 0..<height {
            for x in 0..<width {
                for c in 0..<channels { pixels[(y * width + x) * channels + c] = (columns[x] != rows[y]) != (c == 1) ? 255 : 0 }
            }
        }
        return PixelBuffer(width: width, height: height, channels: channels, pixels: pixels)
    }
}
