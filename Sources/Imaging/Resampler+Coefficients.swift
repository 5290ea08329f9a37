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
/// samples starting at `starts[i]` (relative to the region's origin on that axis) and its
/// weights in fixed point.
///
/// An input sample is a pixel, or with `box` above 1 the average of a box of `box` pixels
/// (the last one cut at the region's border) that a pre-shrink computed (see
/// `Resampler+Box.swift`). A box is weighed as its pixels would be, by its pixel count times
/// the kernel at its centre.
///
/// Precision: each weight is the exact normalised weight `w · 2^14`, rounded down or up so
/// that the weights of every output sum to exactly `2^14` (the ones with the largest
/// fractions round up), held in an `Int16`. So every weight is within `2^-14` of exact and
/// a constant image stays constant. Integer samples times these weights are summed in
/// `Int32`: a window's `Σ|w|` stays below `2 · 2^14` (checked here; about 1.6 at most in
/// practice), which keeps every sum the passes compute inside `Int32` and the intermediate
/// values inside `Int16` (see `ResampleSample`). Rounding the `n` weights of a window moves
/// its result by at most `n · 2^-14` of the sample range, for content in step with the
/// rounding errors, and by about `√n · 2^-16` of it for anything else: with windows of at
/// most about 1500 taps (the box pre-shrink takes over beyond), a small fraction of a level.
///
/// Windows are Pillow's: the output pixel `i` is centred on input coordinate
/// `origin + (i + 0.5) · scale`, with `scale = extent / outSize`, the kernel is stretched by
/// `scale` when downscaling, and the window is cut at the region's borders and renormalised
/// there. The span (`origin`, `extent`) is the region's pixels, `0` and `inSize`, unless the
/// picture covers only part of them: a decode reduced in the DCT covers `size · scale` pixels
/// of the image, and its last pixel, rounded up, lies partly beyond (see `SourceSpan`). Every window is then widened to the
/// same `taps` (with zero weights) so the inner loops run a fixed count with no edge cases;
/// a widened window is moved, not extended, at the far border so it never leaves the region.
struct AxisCoefficients {
    static let weightBits = 14
    static let one = Int32(1) << weightBits

    /// Pixels per input sample: 1, or the width of the pre-shrink's boxes.
    let box: Int
    /// Input samples: the region's pixels on this axis, or its boxes.
    let inputCount: Int
    let taps: Int
    let starts: [Int]
    /// `outSize × taps`, row-major by output index.
    let weights: [Int16]

    init(inSize: Int, outSize: Int, filter: ResampleFilter, box: Int = 1, span: AxisSpan? = nil) {
        let samples = AxisSamples(pixels: inSize, box: box)
        let span = span ?? AxisSpan(pixels: inSize)
        let scale = span.extent / Double(outSize)
        let inverseFilterScale = 1 / max(scale, 1)
        let windows = (0..<outSize).map {
            Self.window($0, inSize: inSize, outSize: outSize, filter: filter, box: box, span: span)
        }
        let taps = windows.map { $0.count }.max()!

        var starts = [Int](repeating: 0, count: outSize)
        var weights = [Int16](repeating: 0, count: outSize * taps)
        var exact = [Double](repeating: 0, count: taps)
        var misses: [(miss: Double, tap: Int)] = []
        for (i, window) in windows.enumerated() {
            let center = span.origin + (Double(i) + 0.5) * scale
            let start = min(window.lowerBound, samples.count - taps)
            starts[i] = start

            var sum = 0.0
            for j in window {
                let w = Double(samples.pixels(j)) * filter.weight((samples.center(j) - center) * inverseFilterScale)
                exact[j - window.lowerBound] = w
                sum += w
            }
            // Round each normalised weight; then, if the sum is off by `residue` units, move
            // the `residue` weights that rounding moved furthest from exact one unit back.
            // This is largest-remainder rounding: the sum is exactly one and every weight is
            // within one unit of exact. (Giving the whole residue to one tap would not be: a
            // wide window's residue is many units.)
            let offset = i * taps + window.lowerBound - start
            let normalise = Double(Self.one) / sum
            var total: Int32 = 0, magnitude: Int32 = 0
            for k in 0..<window.count {
                exact[k] *= normalise
                let w = Int32(exact[k].rounded())
                weights[offset + k] = Int16(w)
                total += w
            }
            let residue = Int(Self.one - total)
            if residue != 0 {
                // How far below exact (above, for a negative residue) each weight is: the most
                // first, and the first tap first between equals. Usually a unit or two, found
                // by scanning; a wide window's many, by sorting.
                let sign = residue > 0 ? 1.0 : -1.0
                misses.removeAll(keepingCapacity: true)
                for k in 0..<window.count { misses.append(((exact[k] - Double(weights[offset + k])) * sign, k)) }
                if abs(residue) <= 2 {
                    for _ in 0..<abs(residue) {
                        var most = 0
                        for m in 1..<misses.count where misses[m].miss > misses[most].miss { most = m }
                        weights[offset + misses[most].tap] += Int16(sign)
                        misses[most].miss = -.infinity
                    }
                } else {
                    misses.sort { a, b in a.miss != b.miss ? a.miss > b.miss : a.tap < b.tap }
                    for (_, k) in misses[0..<abs(residue)] { weights[offset + k] += Int16(sign) }
                }
            }
            for k in 0..<window.count { magnitude += abs(Int32(weights[offset + k])) }
            precondition(magnitude < 2 * Self.one, "weights exceed the accumulator bounds")
        }
        self.box = box
        self.inputCount = samples.count
        self.taps = taps
        self.starts = starts
        self.weights = weights
    }

    /// The input samples output `i`'s kernel covers, cut at the borders: those whose centre
    /// lies in the kernel's span of pixels.
    static func window(_ i: Int, inSize: Int, outSize: Int, filter: ResampleFilter, box: Int = 1,
                       span: AxisSpan? = nil) -> Range<Int> {
        let span = span ?? AxisSpan(pixels: inSize)
        let scale = span.extent / Double(outSize)
        let support = filter.support * max(scale, 1)
        let center = span.origin + (Double(i) + 0.5) * scale
        let lo = max(0, Int((center - support + 0.5).rounded(.down)))
        let hi = min(inSize, Int((center + support + 0.5).rounded(.down)))
        let samples = AxisSamples(pixels: inSize, box: box)
        return samples.first(centeredAtOrAfter: lo)..<samples.first(centeredAtOrAfter: hi)
    }

    /// `taps` and the first and last window starts the initialiser would compute, without the
    /// weights (for memory estimates).
    static func shape(inSize: Int, outSize: Int, filter: ResampleFilter, box: Int = 1,
                      span: AxisSpan? = nil) -> (taps: Int, firstStart: Int, lastStart: Int) {
        var taps = 0
        for i in 0..<outSize {
            taps = max(taps, window(i, inSize: inSize, outSize: outSize, filter: filter, box: box, span: span).count)
        }
        let count = AxisSamples(pixels: inSize, box: box).count
        let first = window(0, inSize: inSize, outSize: outSize, filter: filter, box: box, span: span).lowerBound
        let last = window(outSize - 1, inSize: inSize, outSize: outSize, filter: filter, box: box, span: span).lowerBound
        return (taps, min(first, count - taps), min(last, count - taps))
    }
}

/// Where the picture lies on one axis of a region, in the region's pixels: from `origin` for
/// `extent` pixels (`0` and the region's size when it fills the region).
struct AxisSpan: Equatable {
    var origin: Double
    var extent: Double

    init(origin: Double = 0, extent: Double) {
        self.origin = origin
        self.extent = extent
    }

    init(pixels: Int) { self.init(extent: Double(pixels)) }
}

/// The input samples of an axis of `pixels` pixels cut into boxes of `box` pixels: all full
/// but the last. With `box` 1 they are the pixels.
struct AxisSamples {
    let pixels: Int
    let box: Int

    var count: Int { (pixels + box - 1) / box }

    /// The pixels in sample `j`.
    func pixels(_ j: Int) -> Int { min(box, pixels - j * box) }

    /// The centre of sample `j`, in pixels.
    func center(_ j: Int) -> Double { Double(j * box) + Double(pixels(j)) / 2 }

    /// The first sample whose centre is at or after pixel coordinate `x` (`count` if none).
    func first(centeredAtOrAfter x: Int) -> Int {
        // A full box `j` is centred at `(j + 0.5) · box`: at or after `x` from
        // `j = ⌈(2x − box) / 2box⌉` on. The last box may be shorter, so centred earlier.
        let numerator = 2 * x - box, denominator = 2 * box
        var j = max(0, numerator >= 0 ? (numerator + denominator - 1) / denominator : -(-numerator / denominator))
        if j == count - 1 && center(j) < Double(x) { j += 1 }
        return min(j, count)
    }
}
