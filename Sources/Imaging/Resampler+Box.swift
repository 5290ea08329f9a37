// Large reductions: a box pre-shrink, as libvips's `shrink` before its `reduce`.
//
// Reducing by `s`, a Lanczos window spans `6s` pixels and each weight is about `2^14 / s`
// in fixed point: at `s` in the thousands the weights round to a handful of values and the
// result is noise. So an axis reduced by much more than the kernel needs is first averaged
// in boxes of `box` pixels, exactly (integer sums, then one rounding to 1/64 level), and
// the Lanczos passes then filter the boxes, each weighed as the pixels it holds: at most a
// few hundred taps a window whatever the ratio, and `box` times less filtering work.
//
// This is not exactly Lanczos: within a box every pixel gets the weight of the box's
// centre. Over a window of `6s / box` boxes that error shrinks with the square of
// `box / s` for an edge and with `box / s^1.5` for noise, which `boxFactor` bounds to stay
// far below a level: measured against exact Lanczos-3 on ramps, noise, smooth images and
// hard edges, at every ratio up to 65500 (ResamplerPrecisionTests). Content built to beat
// it (a sawtooth in phase with the boxes) can still be off by a few levels.

extension Resampler {
    /// The box pre-shrink for an axis of `inSize` pixels reduced to `outSize`: 1 (none)
    /// below a reduction of about 159, then the largest box that leaves at least 16 boxes
    /// per output pixel and at most `s^1.5 / 1000` pixels per box (the noise bound).
    static func boxFactor(inSize: Int, outSize: Int) -> Int {
        let scale = Double(inSize) / Double(outSize)
        return max(1, Int(min(scale / 16, scale * scale.squareRoot() / 1000)))
    }
}

/// Box sums go to `Int16` samples with this many fraction bits, as in the intermediate
/// between the passes: the passes read them as they read that.
private let boxFractionBits = Int16.fractionBits

extension Resampler.Job {
    /// Averages `region` of `source` in boxes of `boxX`×`boxY` pixels (cut at the far
    /// borders) into `boxed`, `Int16` samples with 6 fraction bits, rounded half up.
    /// Checks `cancel` between runs of box rows.
    func boxShrink<Layout: PixelLayout>(
        _: Layout.Type, from input: Plane<UInt8>, boxX: Int, boxY: Int, into boxed: UnsafeMutablePointer<Int16>
    ) throws(ImagingError) {
        let columns = AxisSamples(pixels: region.width, box: boxX)
        let rows = AxisSamples(pixels: region.height, box: boxY)
        let rowLength = columns.count * Layout.channels
        // Int64: a box of 4094 × 4094 pixels sums to more than `Int32` holds.
        var sums = [Int64](repeating: 0, count: rowLength)
        let workPerRow = boxY * region.width * Layout.channels
        try forEachRun(of: 0..<rows.count, workPerRow: workPerRow) { run in
            sums.withUnsafeMutableBufferPointer { sums in
                for row in run {
                    sums.update(repeating: 0)
                    for y in (row * boxY)..<(row * boxY + rows.pixels(row)) {
                        let samples = input.samples.baseAddress! + input.rowStart(y)
                        boxRow(Layout.self, samples, width: region.width, box: boxX, into: sums.baseAddress!)
                    }
                    let out = boxed + row * rowLength
                    for column in 0..<columns.count {
                        // round(sum / pixels · 64) = ⌊(128 · sum + pixels) / (2 · pixels)⌋.
                        let pixels = Int64(columns.pixels(column) * rows.pixels(row))
                        for c in 0..<Layout.channels {
                            let i = column * Layout.channels + c
                            let scaled = (sums[i] << (boxFractionBits + 1) + pixels) / (2 * pixels)
                            out[i] = Int16(truncatingIfNeeded: scaled)
                        }
                    }
                }
            }
        }
    }
}

/// Adds the `width` pixels at `samples`, in boxes of `box` pixels (the last cut at the end),
/// to `sums`, one per box and channel.
@inline(__always)
private func boxRow<Layout: PixelLayout>(
    _: Layout.Type, _ samples: UnsafePointer<UInt8>, width: Int, box: Int, into sums: UnsafeMutablePointer<Int64>
) {
    let channels = Layout.channels
    if box == 1 {
        for i in 0..<(width * channels) { sums[i] &+= Int64(samples[i]) }
        return
    }
    var pixel = 0, sum = sums
    while pixel < width {
        let end = min(width, pixel + box)
        // A box of one row holds at most 65500 pixels: its sums fit `Int32`.
        var boxSums = SIMD4<Int32>()
        var p = samples + pixel * channels
        for _ in pixel..<end {
            for c in 0..<channels { boxSums[c] &+= Int32(p[c]) }
            p += channels
        }
        for c in 0..<channels { sum[c] &+= Int64(boxSums[c]) }
        sum += channels
        pixel = end
    }
}
