// Large reductions: a box pre-shrink, as libvips's `shrink` before its `reduce`.
//
// Reducing by `s`, a Lanczos window spans `6s` pixels and each weight is about `2^14 / s`
// in fixed point: at `s` in the thousands the weights round to a handful of values and the
// result is noise. So an axis reduced by much more than the kernel needs is first averaged
// in boxes of `box` pixels, exactly (integer sums, then one rounding to 1/64 level), and
// the Lanczos passes then filter the boxes, each weighed as the pixels it holds: at most a
// few hundred taps a window whatever the ratio, and `box` times less filtering work (the
// boxes themselves are a few adds per sample).
//
// This is not exactly Lanczos: within a box every pixel gets the weight of the box's
// centre. Over a window of `6s / box` boxes that error shrinks with the square of
// `box / s` for an edge and with `box / s^1.5` for noise, which `boxFactor` bounds to stay
// far below a level: measured against exact Lanczos-3 on ramps, noise, smooth images and
// hard edges, at every ratio up to 65500 (ResamplerPrecisionTests). Content built to beat
// it (a sawtooth in phase with the boxes) can still be off by a few levels.

import ImageModel

extension Resampler {
    /// The box pre-shrink for an axis of `inSize` pixels reduced to `outSize`: the largest
    /// box that leaves at least 16 boxes per output pixel and at most `s^1.5 / 1000` pixels
    /// per box (the noise bound), if that is 4 pixels or more (from a reduction of about
    /// 252); else 1, none. (Boxes of 2 or 3 pixels cost about as much as the filtering they
    /// save, and the plain windows are still precise enough there.)
    static func boxFactor(inSize: Int, outSize: Int) -> Int {
        let scale = Double(inSize) / Double(outSize)
        let box = Int(min(scale / 16, scale * scale.squareRoot() / 1000))
        return box >= 4 ? box : 1
    }
}

/// Box sums go to `Int16` samples with this many fraction bits, as in the intermediate
/// between the passes: the passes read them as they read that.
private let boxFractionBits = Int16.fractionBits

extension Resampler.Job {
    /// Averages `region` of `source` in boxes of `boxX`×`boxY` pixels (cut at the far
    /// borders) into `boxed`, `Int16` samples with 6 fraction bits, rounded to nearest.
    /// Checks `cancel` between runs of box rows.
    func boxShrink<Layout: PixelLayout>(
        _: Layout.Type, from input: Plane<UInt8>, boxX: Int, boxY: Int, into boxed: UnsafeMutablePointer<Int16>
    ) throws(ImagingError) {
        let columns = AxisSamples(pixels: region.width, box: boxX)
        let rows = AxisSamples(pixels: region.height, box: boxY)
        let rowLength = region.width * Layout.channels
        // Each box row in two steps: its rows added up sample by sample (at most 65500 rows
        // of 255: `Int32` holds them), then each box's columns (in `Int64`: a whole box can
        // hold more than `Int32` does). One spare sample for `addColumns`' 4-lane loads.
        // From the decode's budget, as every buffer sized by the image (a Swift array that
        // cannot be allocated ends the process; these fail the request).
        let columnMemory = try allocator.allocate(rowLength + 1, of: Int32.self, for: "the box filter's column sums")
        let boxMemory = try allocator.allocate(columns.count * Layout.channels, of: Int64.self, for: "the box filter's sums")
        let columnSums = columnMemory.mutableBytes.bindMemory(to: Int32.self)
        let boxSums = boxMemory.mutableBytes.bindMemory(to: Int64.self)
        columnSums.initialize(repeating: 0)
        boxSums.initialize(repeating: 0)
        defer { withExtendedLifetime((columnMemory, boxMemory)) {} }
        try forEachRun(of: 0..<rows.count, workPerRow: boxY * rowLength) { run in
            for row in run {
                let first = row * boxY
                addRows(first..<(first + rows.pixels(row)), of: input, rowLength: rowLength,
                        into: columnSums.baseAddress!)
                addColumns(Layout.self, columnSums.baseAddress!, width: region.width, box: boxX,
                           into: boxSums.baseAddress!)
                let out = boxed + row * boxSums.count
                for column in 0..<columns.count {
                    // `sum / pixels`, scaled and rounded, by a multiplication (a division
                    // per sample would cost more than all the adding up).
                    let pixels = columns.pixels(column) * rows.pixels(row)
                    let scale = Double(1 << boxFractionBits) / Double(pixels)
                    for c in 0..<Layout.channels {
                        let i = column * Layout.channels + c
                        // Non-negative: truncating is rounding down.
                        out[i] = Int16(truncatingIfNeeded: Int32(Double(boxSums[i]) * scale + 0.5))
                    }
                }
            }
        }
    }
}

/// Sets `sums[i]` to the sum of sample `i` of input rows `rows`.
@inline(__always)
private func addRows(_ rows: Range<Int>, of input: Plane<UInt8>, rowLength: Int, into sums: UnsafeMutablePointer<Int32>) {
    for y in rows {
        let samples = input.samples.baseAddress! + input.rowStart(y)
        let first = y == rows.lowerBound
        // Sixteen samples at a time, written out as SIMD so that LLVM widens whole vectors.
        var i = 0
        while i + 16 <= rowLength {
            let loaded = UnsafeRawPointer(samples + i).loadUnaligned(as: SIMD16<UInt8>.self)
            let bytes = SIMD16<Int32>(truncatingIfNeeded: loaded)
            let sum = UnsafeMutableRawPointer(sums + i)
            sum.storeBytes(of: first ? bytes : sum.loadUnaligned(as: SIMD16<Int32>.self) &+ bytes, as: SIMD16<Int32>.self)
            i += 16
        }
        while i < rowLength {
            sums[i] = (first ? 0 : sums[i]) &+ Int32(samples[i])
            i += 1
        }
    }
}

/// Sets `boxSums` to the sums of the `width` pixels of `columnSums` in boxes of `box` pixels
/// (the last cut at the end), one per box and channel. `columnSums` has a spare sample past
/// its last pixel.
@inline(__always)
private func addColumns<Layout: PixelLayout>(
    _: Layout.Type, _ columnSums: UnsafeMutablePointer<Int32>, width: Int, box: Int,
    into boxSums: UnsafeMutablePointer<Int64>
) {
    let channels = Layout.channels
    var start = 0, out = boxSums
    while start < width {
        let end = min(width, start + box)
        var sums = SIMD4<Int64>()
        // In chunks of 128 pixels, whose sums fit `Int32` (128 · 65500 · 255 < 2^31).
        var chunk = start
        while chunk < end {
            let chunkEnd = min(end, chunk + 128)
            if channels == 1 {
                var sum: Int32 = 0
                for p in chunk..<chunkEnd { sum &+= columnSums[p] }
                sums[0] &+= Int64(sum)
            } else {
                // Lane `c` is channel `c` (lane 3 of RGB is the next pixel's red: unused).
                var lanes = SIMD4<Int32>()
                for p in chunk..<chunkEnd {
                    lanes &+= UnsafeRawPointer(columnSums + p * channels).loadUnaligned(as: SIMD4<Int32>.self)
                }
                sums &+= SIMD4<Int64>(truncatingIfNeeded: lanes)
            }
            chunk = chunkEnd
        }
        for c in 0..<channels { out[c] = sums[c] }
        out += channels
        start = end
    }
}
