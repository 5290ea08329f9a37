#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Filter kernels, and the per-axis tables of taps. Everything here runs once per axis per
// call, in `Double`; the inner loops only ever see the fixed-point result.

extension ResampleFilter {
    /// Half-width of the kernel, in source pixels, when not downscaling.
    var support: Double {
        switch self {
        case .lanczos3: 3
        case .triangle: 1
        }
    }

    /// The kernel at `x` (in units of the filter's scale), before normalisation.
    func weight(_ x: Double) -> Double {
        switch self {
        case .triangle:
            return max(0, 1 - abs(x))
        case .lanczos3:
            // 3·sin(πx)·sin(πx/3) / (πx)², with sin(πx) = 3s − 4s³ for s = sin(πx/3):
            // one `sin` per tap.
            if x == 0 { return 1 }
            if abs(x) >= 3 { return 0 }
            let px = Double.pi * x
            let s = sin(px / 3)
            return 3 * s * s * (3 - 4 * s * s) / (px * px)
        }
    }
}

/// The filter taps of one axis: for each output index, a window of `taps` consecutive input
/// indices starting at `starts[i]` (relative to the region's origin on that axis) and its
/// weights in fixed point.
///
/// Precision: each weight is `round(w · 2^14)` held in an `Int16`, and the weights of every
/// output sum to exactly `2^14`, so a constant image stays constant. Integer samples times
/// these weights are summed in `Int32`: a window's `Σ|w|` stays below `2 · 2^14` (checked
/// here; about 1.6 at most in practice), which keeps every sum the passes compute inside
/// `Int32` and the intermediate values inside `Int16` (see `ResampleSample`).
///
/// Windows are Pillow's: the output pixel `i` is centred on input coordinate
/// `(i + 0.5) · scale`, the kernel is stretched by `scale` when downscaling, and the window
/// is cut at the region's borders and renormalised there. Every window is then widened to the
/// same `taps` (with zero weights) so the inner loops run a fixed count with no edge cases;
/// a widened window is moved, not extended, at the far border so it never leaves the region.
struct AxisCoefficients {
    static let weightBits = 14
    static let one = Int32(1) << weightBits

    let taps: Int
    let starts: [Int]
    /// `outSize × taps`, row-major by output index.
    let weights: [Int16]

    init(inSize: Int, outSize: Int, filter: ResampleFilter) {
        let scale = Double(inSize) / Double(outSize)
        let inverseFilterScale = 1 / max(scale, 1)
        let windows = (0..<outSize).map { Self.window($0, inSize: inSize, outSize: outSize, filter: filter) }
        let taps = windows.map(\.count).max()!

        var starts = [Int](repeating: 0, count: outSize)
        var weights = [Int16](repeating: 0, count: outSize * taps)
        var exact = [Double](repeating: 0, count: taps)
        for (i, window) in windows.enumerated() {
            let center = (Double(i) + 0.5) * scale
            let start = min(window.lowerBound, inSize - taps)
            starts[i] = start

            var sum = 0.0
            for j in window {
                let w = filter.weight((Double(j) + 0.5 - center) * inverseFilterScale)
                exact[j - window.lowerBound] = w
                sum += w
            }
            // Round each normalised weight, then give the rounding residue to the largest
            // so that the sum is exactly one.
            let offset = i * taps + window.lowerBound - start
            let normalise = Double(Self.one) / sum
            var total: Int32 = 0, magnitude: Int32 = 0, largest = offset
            for k in 0..<window.count {
                let w = Int32((exact[k] * normalise).rounded())
                weights[offset + k] = Int16(w)
                total += w
                magnitude += abs(w)
                if w > weights[largest] { largest = offset + k }
            }
            weights[largest] += Int16(Self.one - total)
            precondition(magnitude + abs(Self.one - total) < 2 * Self.one, "weights exceed the accumulator bounds")
        }
        self.taps = taps
        self.starts = starts
        self.weights = weights
    }

    /// The input indices output `i`'s kernel covers, cut at the borders.
    static func window(_ i: Int, inSize: Int, outSize: Int, filter: ResampleFilter) -> Range<Int> {
        let scale = Double(inSize) / Double(outSize)
        let support = filter.support * max(scale, 1)
        let center = (Double(i) + 0.5) * scale
        let lo = max(0, Int((center - support + 0.5).rounded(.down)))
        let hi = min(inSize, Int((center + support + 0.5).rounded(.down)))
        return lo..<hi
    }

    /// `taps` and the first and last window starts the initialiser would compute, without the
    /// weights (for memory estimates).
    static func shape(inSize: Int, outSize: Int, filter: ResampleFilter) -> (taps: Int, firstStart: Int, lastStart: Int) {
        var taps = 0
        for i in 0..<outSize { taps = max(taps, window(i, inSize: inSize, outSize: outSize, filter: filter).count) }
        let first = window(0, inSize: inSize, outSize: outSize, filter: filter).lowerBound
        let last = window(outSize - 1, inSize: inSize, outSize: outSize, filter: filter).lowerBound
        return (taps, min(first, inSize - taps), min(last, inSize - taps))
    }
}
