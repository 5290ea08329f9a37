// The passes: loops over rows around the kernels in Resampler+Kernels.swift. Here pointers
// are formed from buffers and planes; every sample a kernel is sent to read lies inside
// those buffers, the horizontal kernel's over-read included.

/// Rows of samples to read: row `r` starts at index `origin + r · stride` of `samples`.
struct Plane<Sample> {
    let samples: UnsafeBufferPointer<Sample>
    let origin: Int
    let stride: Int

    func rowStart(_ r: Int) -> Int { origin + r * stride }
}

/// Rows of samples to write, `stride` apart from `samples`.
struct MutablePlane<Sample> {
    let samples: UnsafeMutablePointer<Sample>
    let stride: Int

    func row(_ r: Int) -> UnsafeMutablePointer<Sample> { samples + r * stride }
    func advanced(by rows: Int) -> MutablePlane { MutablePlane(samples: row(rows), stride: stride) }
}

/// Filters output rows `rows` of `ys` from `input`, whose row 0 is the axis's input row
/// `firstInputRow`, into `output` rows 0, 1, …
func verticalPass<In: ResampleSample, Out: ResampleSample>(
    _ ys: VerticalTaps, rows: Range<Int>, from input: Plane<In>, firstInputRow: Int, rowLength: Int,
    to output: MutablePlane<Out>
) {
    ys.pairs.withUnsafeBufferPointer { pairs in
        for r in rows {
            let first = input.samples.baseAddress! + input.rowStart(ys.starts[r] - firstInputRow)
            verticalKernel(input: first, inputStride: input.stride, taps: ys.taps,
                           pairs: pairs.baseAddress! + r * ys.pairCount, output: output.row(r - rows.lowerBound),
                           count: rowLength)
        }
    }
}

/// Filters input rows `rows` of `input` into `output` rows 0, 1, …
///
/// The kernel reads `readSpan` samples from a row's start, past the row's end; a row too
/// close to the end of `input` is filtered from a padded copy instead.
func horizontalPass<Layout, In: ResampleSample, Out: ResampleSample>(
    _ xs: HorizontalTaps<Layout>, rows: Range<Int>, from input: Plane<In>, to output: MutablePlane<Out>
) {
    xs.starts.withUnsafeBufferPointer { starts in
        xs.weights.withUnsafeBufferPointer { weights in
            var padded: [In] = []
            for r in rows {
                let start = input.rowStart(r)
                let row = input.samples.baseAddress! + start
                let out = output.row(r - rows.lowerBound)
                if start + xs.readSpan <= input.samples.count {
                    horizontalKernel(Layout.self, input: row, starts: starts, weights: weights.baseAddress!,
                                     groupCount: xs.groupCount, output: out)
                } else {
                    if padded.isEmpty { padded = [In](repeating: 0, count: xs.readSpan) }
                    padded.withUnsafeMutableBufferPointer { copy in
                        copy.baseAddress!.update(from: row, count: input.samples.count - start)
                        horizontalKernel(Layout.self, input: UnsafePointer(copy.baseAddress!), starts: starts,
                                         weights: weights.baseAddress!, groupCount: xs.groupCount, output: out)
                    }
                }
            }
        }
    }
}
