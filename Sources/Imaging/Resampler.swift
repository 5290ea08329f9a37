/// The resampling kernel.
public enum ResampleFilter: Sendable {
    /// Lanczos with three lobes (support 3, stretched by the shrink factor when
    /// downscaling): the final-quality filter.
    case lanczos3
    /// The tent filter (bilinear; support 1, stretched by the shrink factor when
    /// downscaling): cheap, for quick previews.
    case triangle
}

/// A rectangle of pixels: `width`×`height` pixels whose top-left pixel is (`x`, `y`).
public struct PixelRect: Sendable, Equatable {
    public var x: Int
    public var y: Int
    public var width: Int
    public var height: Int

    public init(x: Int, y: Int, width: Int, height: Int) {
        self.x = x
        self.y = y
        self.width = width
        self.height = height
    }
}

/// A separable two-pass image resampler in fixed point, in the manner of Pillow's
/// `ImagingResample`.
///
/// Precision: filter weights are computed in `Double` and rounded to 14 fraction bits
/// (`Int16`) so that each output's weights sum to exactly 1; samples times weights are summed
/// in `Int32`. The value between the two passes is an `Int16` with 6 fraction bits, neither
/// rounded to whole levels nor clamped; only the final value is rounded (half up) and
/// clamped to 0…255. The result is within one level of an exact (`Double`) computation.
public enum Resampler {
    /// Resamples `region` of `source` (default: the whole image) to exactly
    /// `width`×`height` pixels with `filter`, keeping the channel count.
    ///
    /// Synchronous, on the calling thread, and free of shared state: safe to call from
    /// several threads at once. Allocates the output, the filter tables and one intermediate
    /// buffer; the caller bounds the output size. Checks `cancel` before starting and then
    /// between runs of rows (about every 0.1 ms of work); once it is set, throws
    /// `ImagingError.cancelled` and returns no image.
    ///
    /// - Throws: `.invalidArgument` if `width` or `height` is below 1 (or their product
    ///   overflows), or `region` is empty or not inside `source`; `.cancelled`.
    public static func resample(
        _ source: PixelBuffer, region: PixelRect? = nil, width: Int, height: Int,
        filter: ResampleFilter = .lanczos3, cancel: CancellationFlag? = nil
    ) throws(ImagingError) -> PixelBuffer {
        let region = region ?? PixelRect(x: 0, y: 0, width: source.width, height: source.height)
        try validate(source: source, region: region, width: width, height: height)
        try cancel?.check()

        // An axis whose size does not change needs no pass: at scale 1 every window is a
        // single weight of exactly one.
        let xs = width == region.width ? nil : AxisCoefficients(inSize: region.width, outSize: width, filter: filter)
        let ys = height == region.height
            ? nil : AxisCoefficients(inSize: region.height, outSize: height, filter: filter)
        guard xs != nil || ys != nil else { return crop(source, to: region) }

        let job = Job(source: source, region: region, width: width, height: height, xs: xs, ys: ys, cancel: cancel)
        let pixels: [UInt8]
        switch source.channels {
        case 1: pixels = try job.run(GrayLayout.self)
        case 3: pixels = try job.run(RGBLayout.self)
        default: pixels = try job.run(RGBALayout.self)
        }
        return PixelBuffer(width: width, height: height, channels: source.channels, pixels: pixels)
    }

    static func validate(source: PixelBuffer, region: PixelRect, width: Int, height: Int) throws(ImagingError) {
        guard width >= 1, height >= 1 else {
            throw ImagingError(.invalidArgument, "output size \(width)×\(height) is empty")
        }
        let (pixels, overflow) = width.multipliedReportingOverflow(by: height)
        guard !overflow, !pixels.multipliedReportingOverflow(by: source.channels).overflow else {
            throw ImagingError(.invalidArgument, "output size \(width)×\(height) is too large")
        }
        guard region.width >= 1, region.height >= 1, region.x >= 0, region.y >= 0,
              region.width <= source.width - region.x, region.height <= source.height - region.y
        else {
            throw ImagingError(.invalidArgument, """
                region \(region.width)×\(region.height) at (\(region.x), \(region.y)) is empty or not inside \
                the \(source.width)×\(source.height) image
                """)
        }
    }

    static func crop(_ source: PixelBuffer, to region: PixelRect) -> PixelBuffer {
        if region == PixelRect(x: 0, y: 0, width: source.width, height: source.height) { return source }
        var pixels: [UInt8] = []
        pixels.reserveCapacity(region.width * region.height * source.channels)
        for y in region.y..<(region.y + region.height) {
            let start = (y * source.width + region.x) * source.channels
            pixels.append(contentsOf: source.pixels[start..<(start + region.width * source.channels)])
        }
        return PixelBuffer(width: region.width, height: region.height, channels: source.channels, pixels: pixels)
    }
}

// One call, once its sizes are known to need work: the filter tables laid out for the
// kernels of the pixel format, the pass order, and the buffers. The passes get raw pointers
// into arrays that `run` owns or borrows for its duration.

extension Resampler {
    struct Job {
        let source: PixelBuffer
        let region: PixelRect
        let width: Int
        let height: Int
        let xs: AxisCoefficients?
        let ys: AxisCoefficients?
        let cancel: CancellationFlag?

        func run<Layout: PixelLayout>(_: Layout.Type) throws(ImagingError) -> [UInt8] {
            let horizontal = xs.map { HorizontalTaps<Layout>($0) }
            let vertical = ys.map(VerticalTaps.init)
            // Uninitialised: the passes write every sample, and zero-filling hundreds of
            // megabytes up front would be work that no cancellation check can interrupt.
            var pixels = [UInt8](unsafeUninitializedCapacity: width * height * Layout.channels) { $1 = $0.count }
            // A cancelled job frees its buffers off this thread (see BufferReaper).
            do throws(ImagingError) {
                try fill(&pixels, Layout.self, horizontal, vertical)
            } catch {
                BufferReaper.release(&pixels)
                throw error
            }
            return pixels
        }

        private func fill<Layout: PixelLayout>(
            _ pixels: inout [UInt8], _: Layout.Type, _ horizontal: HorizontalTaps<Layout>?, _ vertical: VerticalTaps?
        ) throws(ImagingError) {
            try source.pixels.withUnsafeBufferPointer { (src) throws(ImagingError) in
                try pixels.withUnsafeMutableBufferPointer { (dst) throws(ImagingError) in
                    let input = Plane(samples: src, origin: (region.y * source.width + region.x) * Layout.channels,
                                      stride: source.width * Layout.channels)
                    let output = MutablePlane(samples: dst.baseAddress!, stride: width * Layout.channels)
                    switch (horizontal, vertical) {
                    case let (xs?, ys?):
                        if verticalFirstIsCheaper(xs, ys) {
                            try resampleVerticalFirst(xs, ys, from: input, to: output)
                        } else {
                            try resampleHorizontalFirst(xs, ys, from: input, to: output)
                        }
                    case let (xs?, nil):
                        try forEachRun(of: 0..<height, workPerRow: xs.workPerRow) { rows in
                            horizontalPass(xs, rows: rows, from: input, to: output.advanced(by: rows.lowerBound))
                        }
                    case let (nil, ys?):
                        let rowLength = width * Layout.channels
                        try forEachRun(of: 0..<height, workPerRow: rowLength * ys.workPerSample) { rows in
                            verticalPass(ys, rows: rows, from: input, firstInputRow: 0, rowLength: rowLength,
                                         to: output.advanced(by: rows.lowerBound))
                        }
                    case (nil, nil):
                        preconditionFailure("an unchanged size is a crop")
                    }
                }
            }
        }
    }
}

// Pass order. Both orders give the same result up to the intermediate's 1/64 rounding; they
// differ in work. Horizontal first filters every input row some vertical window touches,
// then `height` rows vertically at the output width; vertical first filters `height` rows
// at the input width, then those rows horizontally. Whichever executes fewer multiply-adds
// runs.

extension Resampler.Job {
    func verticalFirstIsCheaper<Layout>(_ xs: HorizontalTaps<Layout>, _ ys: VerticalTaps) -> Bool {
        let horizontalFirst = ys.inputRows.count * xs.workPerRow + height * width * Layout.channels * ys.workPerSample
        let verticalFirst = height * region.width * Layout.channels * ys.workPerSample + height * xs.workPerRow
        return verticalFirst <= horizontalFirst
    }

    /// Vertical first, in strips: each run of output rows is filtered vertically at the input
    /// width into a strip that stays in cache, then horizontally into the output.
    func resampleVerticalFirst<Layout>(
        _ xs: HorizontalTaps<Layout>, _ ys: VerticalTaps, from input: Plane<UInt8>, to output: MutablePlane<UInt8>
    ) throws(ImagingError) {
        let rowLength = region.width * Layout.channels
        let stripRows = rowsPerRun(workPerRow: rowLength * ys.workPerSample + xs.workPerRow)
        // The last row has room for the horizontal kernel's over-read.
        var strip = [Int16](repeating: 0, count: (stripRows - 1) * rowLength + max(rowLength, xs.readSpan))
        try strip.withUnsafeMutableBufferPointer { (buffer) throws(ImagingError) in
            let stripOut = MutablePlane(samples: buffer.baseAddress!, stride: rowLength)
            let stripIn = Plane(samples: UnsafeBufferPointer(buffer), origin: 0, stride: rowLength)
            try forEachRun(of: 0..<height, rowsPerRun: stripRows) { rows in
                verticalPass(ys, rows: rows, from: input, firstInputRow: 0, rowLength: rowLength, to: stripOut)
                horizontalPass(xs, rows: 0..<rows.count, from: stripIn, to: output.advanced(by: rows.lowerBound))
            }
        }
    }

    /// Horizontal first: only the input rows some vertical window touches are filtered, into
    /// an intermediate at the output width, which is then filtered vertically.
    func resampleHorizontalFirst<Layout>(
        _ xs: HorizontalTaps<Layout>, _ ys: VerticalTaps, from input: Plane<UInt8>, to output: MutablePlane<UInt8>
    ) throws(ImagingError) {
        let inputRows = ys.inputRows
        let rowLength = width * Layout.channels
        // Uninitialised for the same reason as the output: the horizontal pass writes every row.
        var intermediate = [Int16](unsafeUninitializedCapacity: inputRows.count * rowLength) { $1 = $0.count }
        defer { BufferReaper.release(&intermediate) }
        try intermediate.withUnsafeMutableBufferPointer { (buffer) throws(ImagingError) in
            let filteredOut = MutablePlane(samples: buffer.baseAddress!, stride: rowLength)
            try forEachRun(of: inputRows, workPerRow: xs.workPerRow) { rows in
                horizontalPass(xs, rows: rows, from: input,
                               to: filteredOut.advanced(by: rows.lowerBound - inputRows.lowerBound))
            }
            let filteredIn = Plane(samples: UnsafeBufferPointer(buffer), origin: 0, stride: rowLength)
            try forEachRun(of: 0..<height, workPerRow: rowLength * ys.workPerSample) { rows in
                verticalPass(ys, rows: rows, from: filteredIn, firstInputRow: inputRows.lowerBound,
                             rowLength: rowLength, to: output.advanced(by: rows.lowerBound))
            }
        }
    }
}

// Cancellation: the work is cut into runs of at most 16 rows and about `cancellationWork`
// multiply-adds, and the flag is checked before each run. A run is the unit of work that
// cannot be interrupted, so it is what bounds the delay between cancel and throw.

extension Resampler.Job {
    /// Multiply-adds per run: about 0.1 ms of work.
    static let cancellationWork = 1 << 20

    func rowsPerRun(workPerRow: Int) -> Int {
        max(1, min(16, Self.cancellationWork / max(1, workPerRow)))
    }

    func forEachRun(of rows: Range<Int>, workPerRow: Int, _ body: (Range<Int>) -> Void) throws(ImagingError) {
        try forEachRun(of: rows, rowsPerRun: rowsPerRun(workPerRow: workPerRow), body)
    }

    func forEachRun(of rows: Range<Int>, rowsPerRun: Int, _ body: (Range<Int>) -> Void) throws(ImagingError) {
        var first = rows.lowerBound
        while first < rows.upperBound {
            try cancel?.check()
            let run = first..<min(rows.upperBound, first + rowsPerRun)
            body(run)
            first = run.upperBound
        }
    }
}
