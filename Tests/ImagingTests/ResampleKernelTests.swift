import XCTest
@testable import Imaging
import TestSupport

/// The AVX2 kernels (CResample) against the portable Swift ones: the same samples, bit for
/// bit, for every pixel layout, sample type and filter, over random sizes (upscaling,
/// downscaling, rows shorter than one vector, windows at the edges).
final class ResampleKernelTests: XCTestCase {
    static let seed: UInt64 = 0xA5C2_0026_11_28

    func testTheAVX2KernelsGiveThePortableKernelsSamples() throws {
        guard ResampleKernels.fastest == .avx2 else {
            // Nothing else to compare on this CPU: what runs is the portable kernels.
            XCTAssertEqual(ResampleKernels.fastest, .portable)
            return
        }
        print("ResampleKernelTests seed: 0x\(String(Self.seed, radix: 16))")
        var random = SeededGenerator(seed: Self.seed)
        var compared = 0
        for trial in 0..<240 {
            let inSize = Int.random(in: 1...260, using: &random)
            let outSize = trial % 4 == 0 ? Int.random(in: 1...40, using: &random) : Int.random(in: 1...260, using: &random)
            let filter: ResampleFilter = trial % 3 == 0 ? .triangle : .lanczos3
            let axis = AxisCoefficients(inSize: inSize, outSize: outSize, filter: filter)
            let length = Int.random(in: 1...70, using: &random)
            let label = "trial \(trial): \(inSize) → \(outSize) \(filter), \(length) across"
            compared += compareVertical(axis, rowLength: length, label: label, random: &random)
            for channels in [1, 3, 4] {
                compared += compareHorizontal(axis, channels: channels, rows: 1 + length % 5,
                                                  label: "\(label), \(channels) channels", random: &random)
            }
        }
        // Each trial compares the four sample-type pairs on each axis.
        XCTAssertEqual(compared, 240 * 4 * 4)
    }

    /// Samples of `In` as a pass making `Out` may meet them: any byte; the 16-bit intermediate
    /// (0…255·2^6 and Lanczos overshoot) before the last pass; only the box filter's sums
    /// (0…255·2^6) before a pass that makes 16 bits again.
    private func samples<In: ResampleSample, Out: ResampleSample>(_: In.Type, for _: Out.Type, count: Int,
                                                                   random: inout SeededGenerator) -> [In] {
        let range = Out.self == Int16.self ? 0...(255 << 6) : -1_500...17_800
        return (0..<count).map { _ in
            In.self == UInt8.self ? In(truncatingIfNeeded: random.next()) : In(Int.random(in: range, using: &random))
        }
    }

    private func compareVertical(_ axis: AxisCoefficients, rowLength: Int, label: String,
                                 random: inout SeededGenerator) -> Int {
        let taps = VerticalTaps(axis)
        func run<In: ResampleSample, Out: ResampleSample>(_: In.Type, _: Out.Type) -> Int {
            let input = samples(In.self, for: Out.self, count: axis.inputCount * rowLength, random: &random)
            var outputs: [[Out]] = []
            for kernels in [ResampleKernels.portable, .avx2] {
                var output = [Out](repeating: 0, count: axis.starts.count * rowLength)
                input.withUnsafeBufferPointer { source in
                    output.withUnsafeMutableBufferPointer { destination in
                        verticalPass(taps, rows: 0..<axis.starts.count, from: Plane(samples: source, origin: 0, stride: rowLength),
                                     firstInputRow: 0, rowLength: rowLength,
                                     to: MutablePlane(samples: destination.baseAddress!, stride: rowLength), kernels: kernels)
                    }
                }
                outputs.append(output)
            }
            XCTAssertEqual(outputs[0], outputs[1], "vertical \(In.self) → \(Out.self), \(label)")
            return 1
        }
        return run(UInt8.self, UInt8.self) + run(UInt8.self, Int16.self) + run(Int16.self, UInt8.self)
            + run(Int16.self, Int16.self)
    }

    private func compareHorizontal(_ axis: AxisCoefficients, channels: Int, rows: Int, label: String,
                                   random: inout SeededGenerator) -> Int {
        func layout<Layout: PixelLayout>(_: Layout.Type) -> Int {
            let taps = HorizontalTaps<Layout>(axis)
            let stride = axis.inputCount * channels
            func run<In: ResampleSample, Out: ResampleSample>(_: In.Type, _: Out.Type) -> Int {
                let input = samples(In.self, for: Out.self, count: rows * stride, random: &random)
                var outputs: [[Out]] = []
                for kernels in [ResampleKernels.portable, .avx2] {
                    var output = [Out](repeating: 0, count: rows * axis.starts.count * channels)
                    input.withUnsafeBufferPointer { source in
                        output.withUnsafeMutableBufferPointer { destination in
                            horizontalPass(taps, rows: 0..<rows, from: Plane(samples: source, origin: 0, stride: stride),
                                           to: MutablePlane(samples: destination.baseAddress!, stride: axis.starts.count * channels),
                                           kernels: kernels)
                        }
                    }
                    outputs.append(output)
                }
                XCTAssertEqual(outputs[0], outputs[1], "horizontal \(In.self) → \(Out.self), \(label)")
                return 1
            }
            return run(UInt8.self, UInt8.self) + run(UInt8.self, Int16.self) + run(Int16.self, UInt8.self)
                + run(Int16.self, Int16.self)
        }
        switch channels {
        case 1: return layout(GrayLayout.self)
        case 3: return layout(RGBLayout.self)
        default: return layout(RGBALayout.self)
        }
    }
}
