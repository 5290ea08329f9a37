// The inner loops, on raw pointers the passes have checked. They are shaped for the baseline
// x86-64 target, which has only SSE2: its fastest integer multiply-add is `pmaddwd` (eight
// 16-bit products, added in pairs into four 32-bit sums), which LLVM emits for the exact form
// in `pairSums`. So every kernel feeds it pairs of samples that share an output, interleaved
// lane by lane: two input rows (vertical) or two input pixels (horizontal).

/// The sample types a pass reads and writes: `UInt8` for images, `Int16` for the intermediate
/// between the two passes and for the boxes of a large reduction (`0…255 · 2^6`, see
/// `Resampler+Box.swift`). (`Codable` only because `SIMD` vectors require it of their scalars.)
///
/// The intermediate keeps 6 fraction bits and is not clamped, so Lanczos overshoot survives
/// to the final clamp and the result does not depend on the pass order. As a window's `Σ|w|`
/// is below 2 (at most about 1.6), its range is below `255 · 2 · 2^6 = 32640`, inside
/// `Int16`, and a pass reading it sums less than `32640 · 2 · 2^14 ≈ 2^30`, inside `Int32`.
protocol ResampleSample: FixedWidthInteger, SIMDScalar, Codable {
    static var fractionBits: Int { get }
    /// Brings rounded sums into this type's range (lane-wise) before truncation.
    static func inRange<V: SIMD>(_ sums: V) -> V where V.Scalar == Int32
}

extension UInt8: ResampleSample {
    static var fractionBits: Int { 0 }

    // A branch-free clamp to 0…255 that LLVM lowers to compares and masks (the generic
    // `clamped(lowerBound:upperBound:)` and `replace(with:where:)` compile to scalar loops).
    @inline(__always)
    static func inRange<V: SIMD>(_ sums: V) -> V where V.Scalar == Int32 {
        let nonNegative = sums & ~(sums &>> 31)
        return nonNegative | ((255 &- nonNegative) &>> 31)
    }
}

extension Int16: ResampleSample {
    static var fractionBits: Int { 6 }

    @inline(__always)
    static func inRange<V: SIMD>(_ sums: V) -> V where V.Scalar == Int32 { sums }
}

/// Rounds (half up) sums of `In` samples times 14-bit weights to the scale and range of `Out`.
@inline(__always)
func rounded<In: ResampleSample, Out: ResampleSample, V: SIMD>(_ sums: V, from _: In.Type, to _: Out.Type) -> V
where V.Scalar == Int32 {
    let shift = Int32(AxisCoefficients.weightBits + In.fractionBits - Out.fractionBits)
    return Out.inRange((sums &+ V(repeating: 1 &<< (shift - 1))) &>> V(repeating: shift))
}

/// `pairSums(v, w)[j] = v[2j] · w[2j] + v[2j + 1] · w[2j + 1]`: one `pmaddwd`.
@inline(__always)
func pairSums(_ v: SIMD8<Int16>, _ w: SIMD8<Int16>) -> SIMD4<Int32> {
    let products = SIMD8<Int32>(truncatingLanes: v) &* SIMD8<Int32>(truncatingLanes: w)
    return products.evenHalf &+ products.oddHalf
}

/// Sixteen pairs of samples, interleaved lane by lane for `pairSums`: pair `j` is
/// `(a[j], b[j])`, in vector `j / 4`.
struct SamplePairs {
    let q0: SIMD8<Int16>, q1: SIMD8<Int16>, q2: SIMD8<Int16>, q3: SIMD8<Int16>

    @inline(__always)
    init<In: ResampleSample>(_ a: SIMD16<In>, _ b: SIMD16<In>) {
        var low = SIMD16<In>(), high = SIMD16<In>()
        low.evenHalf = a.lowHalf
        low.oddHalf = b.lowHalf
        high.evenHalf = a.highHalf
        high.oddHalf = b.highHalf
        q0 = SIMD8(truncatingIfNeeded: low.lowHalf)
        q1 = SIMD8(truncatingIfNeeded: low.highHalf)
        q2 = SIMD8(truncatingIfNeeded: high.lowHalf)
        q3 = SIMD8(truncatingIfNeeded: high.highHalf)
    }
}

/// Sixteen `Int32` sums as four vectors, each fed by its own `pairSums`. (Summing into one
/// `SIMD16` instead lets LLVM split the products apart and lose the `pmaddwd`.)
struct LaneSums {
    var q0 = SIMD4<Int32>(), q1 = SIMD4<Int32>(), q2 = SIMD4<Int32>(), q3 = SIMD4<Int32>()

    var lanes: SIMD16<Int32> {
        SIMD16(lowHalf: SIMD8(lowHalf: q0, highHalf: q1), highHalf: SIMD8(lowHalf: q2, highHalf: q3))
    }

    /// Adds `a[j] · w[2j] + b[j] · w[2j + 1]` to lane `j` for `pairs` of `a` and `b`, the 32
    /// weights given as four vectors.
    @inline(__always)
    mutating func add(
        _ pairs: SamplePairs, _ w0: SIMD8<Int16>, _ w1: SIMD8<Int16>, _ w2: SIMD8<Int16>, _ w3: SIMD8<Int16>
    ) {
        q0 &+= pairSums(pairs.q0, w0)
        q1 &+= pairSums(pairs.q1, w1)
        q2 &+= pairSums(pairs.q2, w2)
        q3 &+= pairSums(pairs.q3, w3)
    }
}

@inline(__always)
func load<In: ResampleSample>(_ pointer: UnsafePointer<In>) -> SIMD16<In> {
    UnsafeRawPointer(pointer).loadUnaligned(as: SIMD16<In>.self)
}

// The vertical kernel is blind to channels: output sample `x` of a row is the weighted sum of
// sample `x` of `taps` consecutive input rows, so a row is one long loop over 16 samples at a
// time, two input rows per step.

/// The vertical axis's weights for `LaneSums.add`: per output row, `pairCount` vectors each
/// holding the weights of two consecutive input rows, repeated four times; an odd last row
/// is paired with a zero weight.
struct VerticalTaps {
    let starts: [Int]
    let taps: Int
    let pairCount: Int
    let pairs: [SIMD8<Int16>]

    init(_ axis: AxisCoefficients) {
        let pairCount = (axis.taps + 1) / 2
        var pairs: [SIMD8<Int16>] = []
        pairs.reserveCapacity(axis.starts.count * pairCount)
        for i in axis.starts.indices {
            for k in Swift.stride(from: 0, to: axis.taps, by: 2) {
                let first = axis.weights[i * axis.taps + k]
                let second = k + 1 < axis.taps ? axis.weights[i * axis.taps + k + 1] : 0
                pairs.append(SIMD8(first, second, first, second, first, second, first, second))
            }
        }
        self.starts = axis.starts
        self.taps = axis.taps
        self.pairCount = pairCount
        self.pairs = pairs
    }

    /// The input rows some output row's window touches.
    var inputRows: Range<Int> { starts.first!..<(starts.last! + taps) }

    /// Multiply-adds per output sample, as executed.
    var workPerSample: Int { 2 * pairCount }
}

/// Writes `count` samples of one output row from the `taps` input rows at `input`,
/// `inputStride` samples apart, weighted by one output row's `VerticalTaps.pairs`.
@inline(__always)
func verticalKernel<In: ResampleSample, Out: ResampleSample>(
    input: UnsafePointer<In>, inputStride: Int, taps: Int, pairs: UnsafePointer<SIMD8<Int16>>,
    output: UnsafeMutablePointer<Out>, count: Int
) {
    var x = 0
    while x + 16 <= count {
        var sums = LaneSums()
        var row = input + x
        for pair in 0..<(taps / 2) {
            let w = pairs[pair]
            sums.add(SamplePairs(load(row), load(row + inputStride)), w, w, w, w)
            row += 2 &* inputStride
        }
        if taps % 2 == 1 {
            // The last row pairs with itself; its partner's weight is zero.
            let w = pairs[taps / 2]
            let samples = load(row)
            sums.add(SamplePairs(samples, samples), w, w, w, w)
        }
        let result = SIMD16<Out>(truncatingIfNeeded: rounded(sums.lanes, from: In.self, to: Out.self))
        UnsafeMutableRawPointer(output + x).storeBytes(of: result, as: SIMD16<Out>.self)
        x += 16
    }
    // The last few samples of the row, one at a time.
    let shift = Int32(AxisCoefficients.weightBits + In.fractionBits - Out.fractionBits)
    while x < count {
        var sum = Int32(1) << (shift - 1)
        var row = input + x
        for k in 0..<taps {
            sum &+= Int32(truncatingIfNeeded: row.pointee) &* Int32(pairs[k / 2][k % 2])
            row += inputStride
        }
        output[x] = Out(clamping: sum &>> shift)
        x += 1
    }
}

// The horizontal kernel works per output pixel. One step loads two runs of `groupPixels`
// input pixels, `groupPixels` apart, so lane `j` of the first run pairs with the same channel
// of the pixel `groupPixels` further on, in lane `j` of the second: one `LaneSums.add` covers
// `2 · groupPixels` taps. The lanes of each channel are added up once per output pixel.

/// How the horizontal kernel packs a pixel format into 16 lanes.
protocol PixelLayout {
    static var channels: Int { get }
    /// Whole pixels in 16 lanes.
    static var groupPixels: Int { get }
    /// Adds up the lanes of each channel (lane `l` holds channel `l % channels`), giving
    /// channel `c` in lane `c`.
    static func channelSums(_ lanes: SIMD16<Int32>) -> SIMD4<Int32>
}

enum GrayLayout: PixelLayout {
    static var channels: Int { 1 }
    static var groupPixels: Int { 16 }

    @inline(__always)
    static func channelSums(_ lanes: SIMD16<Int32>) -> SIMD4<Int32> {
        let eight = lanes.lowHalf &+ lanes.highHalf
        let four = eight.lowHalf &+ eight.highHalf
        let two = four.lowHalf &+ four.highHalf
        return SIMD4(two[0] &+ two[1], 0, 0, 0)
    }
}

enum RGBLayout: PixelLayout {
    static var channels: Int { 3 }
    static var groupPixels: Int { 5 }

    // Lanes 0…14 hold five pixels; lane 15 weighs zero. Each quarter is rotated so that its
    // red, green and blue lanes line up with lanes 0, 1, 2; the three lanes that land in
    // slot 3 instead are added in separately.
    @inline(__always)
    static func channelSums(_ lanes: SIMD16<Int32>) -> SIMD4<Int32> {
        let q0 = lanes.lowHalf.lowHalf, q1 = lanes.lowHalf.highHalf
        let q2 = lanes.highHalf.lowHalf, q3 = lanes.highHalf.highHalf
        let aligned = q0 &+ q3 &+ SIMD4(q1[2], q1[0], q1[1], q1[3]) &+ SIMD4(q2[1], q2[2], q2[0], q2[3])
        return aligned &+ SIMD4(q0[3], q1[3], q2[3], 0)
    }
}

enum RGBALayout: PixelLayout {
    static var channels: Int { 4 }
    static var groupPixels: Int { 4 }

    @inline(__always)
    static func channelSums(_ lanes: SIMD16<Int32>) -> SIMD4<Int32> {
        let eight = lanes.lowHalf &+ lanes.highHalf
        return eight.lowHalf &+ eight.highHalf
    }
}

/// The horizontal axis's weights for `LaneSums.add`: per output pixel, `groupCount` steps of
/// four vectors. With `G = Layout.groupPixels`, in step `g` lane `j` (channel `j % channels`
/// of pixel `q = j / channels` of the run) weighs tap `2Gg + q` and pairs it with tap
/// `2Gg + G + q`; unused lanes and taps past the window weigh zero.
struct HorizontalTaps<Layout: PixelLayout> {
    let starts: [Int]
    let groupCount: Int
    let weights: [SIMD8<Int16>]
    /// How many samples from the start of an input row the kernel may read: the second
    /// load of the last step ends up to `G` pixels plus 16 samples past the window.
    let readSpan: Int

    init(_ axis: AxisCoefficients) {
        let run = Layout.groupPixels
        let groupCount = (axis.taps + 2 * run - 1) / (2 * run)
        var weights = [SIMD8<Int16>](repeating: .zero, count: axis.starts.count * groupCount * 4)
        weights.withUnsafeMutableBytes { bytes in
            // As 16-bit lanes: 32 per step, lane `j`'s pair at `2j` and `2j + 1`.
            let lanes = bytes.bindMemory(to: Int16.self)
            for i in axis.starts.indices {
                for k in 0..<axis.taps {
                    let (group, offset) = k.quotientAndRemainder(dividingBy: 2 * run)
                    let (partner, pixel) = offset.quotientAndRemainder(dividingBy: run)
                    let step = (i * groupCount + group) * 32
                    for c in 0..<Layout.channels {
                        lanes[step + 2 * (pixel * Layout.channels + c) + partner] = axis.weights[i * axis.taps + k]
                    }
                }
            }
        }
        self.starts = axis.starts
        self.groupCount = groupCount
        self.weights = weights
        self.readSpan = (axis.starts.last! + (2 * groupCount - 1) * run) * Layout.channels + 16
    }

    /// Multiply-adds per output row, as executed.
    var workPerRow: Int { starts.count * groupCount * 32 }
}

/// Writes `starts.count` output pixels of one row from the input row at `input`, reading
/// up to `HorizontalTaps.readSpan` samples of it.
@inline(__always)
func horizontalKernel<Layout: PixelLayout, In: ResampleSample, Out: ResampleSample>(
    _: Layout.Type, input: UnsafePointer<In>, starts: UnsafeBufferPointer<Int>,
    weights: UnsafePointer<SIMD8<Int16>>, groupCount: Int, output: UnsafeMutablePointer<Out>
) {
    let run = Layout.groupPixels &* Layout.channels
    var w = weights
    var pixel = output
    for start in starts {
        var samples = input + start &* Layout.channels
        var sums = LaneSums()
        for _ in 0..<groupCount {
            sums.add(SamplePairs(load(samples), load(samples + run)), w[0], w[1], w[2], w[3])
            samples += 2 &* run
            w += 4
        }
        let channels = rounded(Layout.channelSums(sums.lanes), from: In.self, to: Out.self)
        let result = SIMD4<Out>(truncatingIfNeeded: channels)
        for c in 0..<Layout.channels { pixel[c] = result[c] }
        pixel += Layout.channels
    }
}
