// The passes: loops over rows around the kernels in Resampler+Kernels.swift, or their AVX2
// twins in CResample. Here pointers are formed from buffers and planes; every sample a
// kernel is sent to read lies inside those buffers, the horizontal kernel's over-read
// included.

import CResample

/// Which implementation of the inner loops a pass runs. Both give the same samples, bit for
/// bit: the same weights, sums and rounding.
enum ResampleKernels: Sendable {
    /// The Swift kernels, shaped for baseline x86-64 (SSE2) and built for every CPU.
    case portable
    /// The C kernels, twice as wide, for CPUs with AVX2.
    case avx2

    /// The fastest this CPU runs, decided once.
    static let fastest: ResampleKernels = er_has_avx2() != 0 ? .avx2 : .portable

    /// The shift that rounds `In` sums to `Out` (see `rounded`).
    static func shift<In: ResampleSample, Out: ResampleSample>(_: In.Type, _: Out.Type) -> Int32 {
        Int32(AxisCoefficients.weightBits + In.fractionBits - Out.fractionBits)
    }
}

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
    to output: MutablePlane<Out>, kernels: ResampleKernels = .fastest
) {
    ys.pairs.withUnsafeBufferPointer { pairs in
        for r in rows {
            let first = input.samples.baseAddress! + input.rowStart(ys.starts[r] - firstInputRow)
            let weights = pairs.baseAddress! + r * ys.pairCount
            switch kernels {
            case .portable:
                verticalKernel(input: first, inputStride: input.stride, taps: ys.taps,
                               pairs: weights, output: output.row(r - rows.lowerBound), count: rowLength)
            case .avx2:
                er_vertical_avx2(first, In.self == UInt8.self ? 1 : 0, input.stride, Int32(ys.taps),
                                 UnsafeRawPointer(weights).assumingMemoryBound(to: Int16.self),
                                 output.row(r - rows.lowerBound), Out.self == UInt8.self ? 1 : 0, rowLength,
                                 ResampleKernels.shift(In.self, Out.self))
            }
        }
    }
}

/// Filters input rows `rows` of `input` into `output` rows 0, 1, …
///
/// The kernel reads `readSpan` samples from a row's start, past the row's end; a row too
/// close to the end of `input` is filtered from a padded copy instead.
func horizontalPass<Layout, In: ResampleSample, Out: ResampleSample>(
    _ xs: HorizontalTaps<Layout>, rows: Range<Int>, from input: Plane<In>, to output: MutablePlane<Out>,
    kernels: ResampleKernels = .fastest
) {
    xs.starts.withUnsafeBufferPointer { starts in
        xs.weights.withUnsafeBufferPointer { weights in
            func filter(_ row: UnsafePointer<In>, into out: UnsafeMutablePointer<Out>) {
                switch kernels {
                case .portable:
                    horizontalKernel(Layout.self, input: row, starts: starts, weights: weights.baseAddress!,
                                     groupCount: xs.groupCount, output: out)
                case .avx2:
                    er_horizontal_avx2(Int32(Layout.channels), row, In.self == UInt8.self ? 1 : 0,
                                       starts.baseAddress!, starts.count,
                                       UnsafeRawPointer(weights.baseAddress!).assumingMemoryBound(to: Int16.self),
                                       xs.groupCount, out, Out.self == UInt8.self ? 1 : 0,
                                       ResampleKernels.shift(In.self, Out.self))
                }
            }
            var padded: [In] = []
            for r in rows {
                let start = input.rowStart(r)
                let row = input.samples.baseAddress! + start
                let out = output.row(r - rows.lowerBound)
                if start + xs.readSpan <= input.samples.count {
                    filter(row, into: out)
                } else {
                    if padded.isEmpty { padded = [In](repeating: 0, count: xs.readSpan) }
                    padded.withUnsafeMutableBufferPointer { copy in
                        copy.baseAddress!.update(from: row, count: input.samples.count - start)
                        filter(UnsafePointer(copy.baseAddress!), into: out)
                    }
                }
            }
        }
    }
}
