import ImageModel
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

/// Where the picture lies within a region, in the region's pixels (`x`, `y` from its top-left
/// corner), when it does not fill the region exactly. A decode reduced in the DCT (JPEG's
/// shrink-on-load) has `⌈size · scale⌉` pixels on an axis whose picture is `size · scale`
/// long, its last pixel lying partly beyond the image; and a crop of the full image falls
/// on fractions of the reduced decode's pixels.
struct SourceSpan: Sendable, Equatable {
    var x: Double
    var y: Double
    var width: Double
    var height: Double
}

/// A separable two-pass image resampler in fixed point, in the manner of Pillow's
/// `ImagingResample`.
///
/// Precision: filter weights are computed in `Double` and rounded to 14 fraction bits
/// (`Int16`) so that each output's weights sum to exactly 1; samples times weights are summed
/// in `Int32`. The value between the two passes is an `Int16` with 6 fraction bits, neither
/// rounded to whole levels nor clamped; only the final value is rounded (half up) and
/// clamped to 0…255. An axis reduced by about 252 or more is first averaged exactly in
/// boxes (see `Resampler+Box.swift`), so that no window is more than about 1500 taps wide.
/// The result is within one level of an exact (`Double`) computation with the same kernel
/// at every ratio, from enlargements to 65500 px reduced to 1, on photos, gradients, hard
/// edges and noise (ResamplerTests, ResamplerPrecisionTests). Only content built to defeat
/// the fixed point (detail in step with the weights' rounding errors, or with the boxes at
/// reductions of 252 or more) can be off by more.
public enum Resampler {
    /// Resamples `region` of `source` (default: the whole image) to exactly
    /// `width`×`height` pixels with `filter`, keeping the channel count.
    ///
    /// Synchronous, on the calling thread, and free of shared state: safe to call from
    /// several threads at once. Allocates the output and one intermediate buffer from
    /// `allocator`, and the filter tables; the caller bounds the output size. Checks `cancel`
    /// before starting and then between runs of rows (about every 0.1 ms of work); once it
    /// is set, throws `ImagingError.cancelled` and returns no image.
    ///
    /// - Throws: `.invalidArgument` if `width` or `height` is below 1 (or their product
    ///   overflows), or `region` is empty or not inside `source`; `.cancelled`; `.tooLarge`
    ///   when a buffer cannot be allocated.
    public static func resample(
        _ source: PixelBuffer, region: PixelRect? = nil, width: Int, height: Int,
        filter: ResampleFilter = .lanczos3, cancel: CancellationFlag? = nil,
        allocator: BufferAllocator = BufferAllocator()
    ) throws(ImagingError) -> PixelBuffer {
        try resample(source, region: region, span: nil, width: width, height: height, filter: filter, cancel: cancel,
                     allocator: allocator)
    }

    /// `resample` of the picture at `span` within `region` (nil: the region's pixels).
    static func resample(
        _ source: PixelBuffer, region: PixelRect?, span: SourceSpan?, width: Int, height: Int,
        filter: ResampleFilter = .lanczos3, cancel: CancellationFlag? = nil,
        allocator: BufferAllocator = BufferAllocator()
    ) throws(ImagingError) -> PixelBuffer {
        let region = region ?? PixelRect(x: 0, y: 0, width: source.width, height: source.height)
        try validate(source: source, region: region, width: width, height: height)
        if let span {
            guard span.x >= 0, span.y >= 0, span.width > 0, span.height > 0,
                  span.x + span.width <= Double(region.width), span.y + span.height <= Double(region.height) else {
                throw ImagingError(.invalidArgument, "span \(span) is not inside the \(region.width)×\(region.height) region")
            }
        }
        try cancel?.check()

        // An axis whose size does not change needs no pass: at scale 1 every window is a
        // single weight of exactly one. A span that does not fill its axis always needs one.
        let xSpan = span.map { AxisSpan(origin: $0.x, extent: $0.width) }.flatMap { $0 == AxisSpan(pixels: region.width) ? nil : $0 }
        let ySpan = span.map { AxisSpan(origin: $0.y, extent: $0.height) }.flatMap { $0 == AxisSpan(pixels: region.height) ? nil : $0 }
        let xs = width == region.width && xSpan == nil ? nil : AxisCoefficients(
            inSize: region.width, outSize: width, filter: filter, box: boxFactor(inSize: region.width, outSize: width),
            span: xSpan)
        let ys = height == region.height && ySpan == nil ? nil : AxisCoefficients(
            inSize: region.height, outSize: height, filter: filter, box: boxFactor(inSize: region.height, outSize: height),
            span: ySpan)
        guard xs != nil || ys != nil else { return try crop(source, to: region, allocator: allocator) }

        let job = Job(source: source, region: region, width: width, height: height, xs: xs, ys: ys, cancel: cancel,
                      allocator: allocator)
        switch source.channels {
        case 1: return try job.run(GrayLayout.self)
        case 3: return try job.run(RGBLayout.self)
        default: return try job.run(RGBALayout.self)
        }
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

    static func crop(_ source: PixelBuffer, to region: PixelRect, allocator: BufferAllocator) throws(ImagingError) -> PixelBuffer {
        if region == PixelRect(x: 0, y: 0, width: source.width, height: source.height) { return source }
        let c = source.channels, rowLength = region.width * c
        return try PixelBuffer.make(width: region.width, height: region.height, channels: c, allocator: allocator,
                                    what: "the cropped image") { out in
            source.withUnsafeBufferPointer { pixels in
                for row in 0..<region.height {
                    let start = ((region.y + row) * source.width + region.x) * c
                    (out.baseAddress! + row * rowLength).update(from: pixels.baseAddress! + start, count: rowLength)
                }
            }
        }
    }
}

// One call, once its sizes are known to need work: the filter tables laid out for the
// kernels of the pixel format, the box pre-shrink if any, the pass order, and the buffers.
// The passes get raw pointers into arrays that `run` owns or borrows for its duration.

extension Resampler {
    struct Job {
        let source: PixelBuffer
        let region: PixelRect
        let width: Int
        let height: Int
        let xs: AxisCoefficients?
        let ys: AxisCoefficients?
        let cancel: CancellationFlag?
        let allocator: BufferAllocator

        /// The size of the plane the passes read: the region, or its boxes.
        var inputWidth: Int { xs?.inputCount ?? region.width }
        var inputHeight: Int { ys?.inputCount ?? region.height }
        var boxes: Bool { (xs?.box ?? 1) > 1 || (ys?.box ?? 1) > 1 }

        func run<Layout: PixelLayout>(_: Layout.Type) throws(ImagingError) -> PixelBuffer {
            let horizontal = xs.map { HorizontalTaps<Layout>($0) }
            let vertical = ys.map(VerticalTaps.init)
            // Uninitialised: the passes write every sample, and zero-filling hundreds of
            // megabytes up front would be work that no cancellation check can interrupt.
            // A cancelled job frees its buffers off this thread (see BufferReaper).
            return try PixelBuffer.make(width: width, height: height, channels: Layout.channels, allocator: allocator,
                                        what: "the resized image") { (dst) throws(ImagingError) in
                try fill(dst, Layout.self, horizontal, vertical)
            }
        }

        private func fill<Layout: PixelLayout>(
            _ dst: UnsafeMutableBufferPointer<UInt8>, _: Layout.Type, _ horizontal: HorizontalTaps<Layout>?,
            _ vertical: VerticalTaps?
        ) throws(ImagingError) {
            let output = MutablePlane(samples: dst.baseAddress!, stride: width * Layout.channels)
            try source.withUnsafeBufferPointer { (src) throws(ImagingError) in
                let pixels = Plane(samples: src, origin: (region.y * source.width + region.x) * Layout.channels,
                                   stride: source.width * Layout.channels)
                guard boxes else { return try filter(pixels, Layout.self, horizontal, vertical, to: output) }
                // At least halved on one axis: never larger than the region's pixels.
                let memory = try allocator.allocate(inputWidth * inputHeight * Layout.channels, of: Int16.self,
                                                    for: "the resampler's boxes (\(inputWidth)×\(inputHeight))")
                defer { BufferReaper.release(memory) }
                try memory.withMemory(as: Int16.self) { (buffer) throws(ImagingError) in
                    try boxShrink(Layout.self, from: pixels, boxX: xs?.box ?? 1, boxY: ys?.box ?? 1,
                                  into: buffer.baseAddress!)
                    let boxed = Plane(samples: UnsafeBufferPointer(buffer), origin: 0,
                                      stride: inputWidth * Layout.channels)
                    try filter(boxed, Layout.self, horizontal, vertical, to: output)
                }
            }
        }

        /// The Lanczos (or tent) passes, from pixels or from boxes.
        private func filter<Layout: PixelLayout, In: ResampleSample>(
            _ input: Plane<In>, _: Layout.Type, _ horizontal: HorizontalTaps<Layout>?, _ vertical: VerticalTaps?,
            to output: MutablePlane<UInt8>
        ) throws(ImagingError) {
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

// Pass order. Both orders give the same result up to the intermediate's 1/64 rounding; they
// differ in work. Horizontal first filters every input row some vertical window touches,
// then `height` rows vertically at the output width; vertical first filters `height` rows
// at the input width, then those rows horizontally. Whichever executes fewer multiply-adds
// runs.

extension Resampler.Job {
    func verticalFirstIsCheaper<Layout>(_ xs: HorizontalTaps<Layout>, _ ys: VerticalTaps) -> Bool {
        Resampler.verticalFirstIsCheaper(inputRows: ys.inputRows.count, horizontalWorkPerRow: xs.workPerRow,
                                         verticalWorkPerSample: ys.workPerSample, regionWidth: inputWidth,
                                         width: width, height: height, channels: Layout.channels)
    }

    /// Vertical first, in strips: each run of output rows is filtered vertically at the input
    /// width into a strip that stays in cache, then horizontally into the output.
    func resampleVerticalFirst<Layout, In: ResampleSample>(
        _ xs: HorizontalTaps<Layout>, _ ys: VerticalTaps, from input: Plane<In>, to output: MutablePlane<UInt8>
    ) throws(ImagingError) {
        let rowLength = inputWidth * Layout.channels
        let stripRows = rowsPerRun(workPerRow: rowLength * ys.workPerSample + xs.workPerRow)
        // The last row has room for the horizontal kernel's over-read, which must read
        // initialised samples: the strip is zero-filled (it is small).
        let count = (stripRows - 1) * rowLength + max(rowLength, xs.readSpan)
        let memory = try allocator.allocate(count, of: Int16.self, for: "the resampler's strip")
        try memory.withMemory(as: Int16.self) { (buffer) throws(ImagingError) in
            buffer.initialize(repeating: 0)
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
    func resampleHorizontalFirst<Layout, In: ResampleSample>(
        _ xs: HorizontalTaps<Layout>, _ ys: VerticalTaps, from input: Plane<In>, to output: MutablePlane<UInt8>
    ) throws(ImagingError) {
        let inputRows = ys.inputRows
        let rowLength = width * Layout.channels
        // Uninitialised for the same reason as the output: the horizontal pass writes every row.
        let memory = try allocator.allocate(inputRows.count * rowLength, of: Int16.self,
                                            for: "the resampler's intermediate (\(rowLength / Layout.channels)×\(inputRows.count))")
        defer { BufferReaper.release(memory) }
        try memory.withMemory(as: Int16.self) { (buffer) throws(ImagingError) in
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

    func rowsPerRun(workPerRow: Int) -> Int {
        Resampler.rowsPerRun(workPerRow: workPerRow)
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

// The same decisions as plain arithmetic, shared by a job and by `workingBytes`, so that a
// memory estimate counts the buffer the run will really allocate.

extension Resampler {
    /// Multiply-adds per run: about 0.1 ms of work.
    static let cancellationWork = 1 << 20

    static func rowsPerRun(workPerRow: Int) -> Int {
        max(1, min(16, cancellationWork / max(1, workPerRow)))
    }

    static func verticalFirstIsCheaper(inputRows: Int, horizontalWorkPerRow: Int, verticalWorkPerSample: Int,
                                       regionWidth: Int, width: Int, height: Int, channels: Int) -> Bool {
        let horizontalFirst = inputRows * horizontalWorkPerRow + height * width * channels * verticalWorkPerSample
        let verticalFirst = height * regionWidth * channels * verticalWorkPerSample + height * horizontalWorkPerRow
        return verticalFirst <= horizontalFirst
    }

    /// What `resample` allocates besides its output for a `regionWidth`×`regionHeight`
    /// region resized to `width`×`height`, in bytes: the boxes of a large reduction, the
    /// buffer between the passes (decided as `resample` decides) and the filter tables, with
    /// room for the arrays' own overhead.
    public static func workingBytes(regionWidth: Int, regionHeight: Int, width: Int, height: Int, channels: Int,
                                    filter: ResampleFilter) -> Int {
        let groupPixels = switch channels {
        case 1: GrayLayout.groupPixels
        case 3: RGBLayout.groupPixels
        default: RGBALayout.groupPixels
        }
        let resizesX = width != regionWidth, resizesY = height != regionHeight
        guard resizesX || resizesY else { return 0 }  // a crop
        var tables = 64 << 10
        // The plane the passes read: the region, or its boxes.
        let boxX = resizesX ? boxFactor(inSize: regionWidth, outSize: width) : 1
        let boxY = resizesY ? boxFactor(inSize: regionHeight, outSize: height) : 1
        let inputWidth = AxisSamples(pixels: regionWidth, box: boxX).count
        let inputHeight = AxisSamples(pixels: regionHeight, box: boxY).count
        var boxes = 0
        if boxX > 1 || boxY > 1 {
            boxes = inputWidth * inputHeight * channels * MemoryLayout<Int16>.stride
            // A row of column sums and one of box sums.
            tables += (regionWidth * channels + 1) * MemoryLayout<Int32>.stride
                + inputWidth * channels * MemoryLayout<Int64>.stride
        }
        var horizontalWorkPerRow = 0, readSpan = 0
        if resizesX {
            let x = AxisCoefficients.shape(inSize: regionWidth, outSize: width, filter: filter, box: boxX)
            let groupCount = (x.taps + 2 * groupPixels - 1) / (2 * groupPixels)
            horizontalWorkPerRow = width * groupCount * 32
            readSpan = (x.lastStart + (2 * groupCount - 1) * groupPixels) * channels + 16
            // Windows, starts and Int16 weights, then the SIMD weights; a padded row.
            tables += width * (16 + 8 + 2 * x.taps + groupCount * 64) + 2 * readSpan
        }
        var inputRows = 0, verticalWorkPerSample = 0
        if resizesY {
            let y = AxisCoefficients.shape(inSize: regionHeight, outSize: height, filter: filter, box: boxY)
            inputRows = y.lastStart + y.taps - y.firstStart
            verticalWorkPerSample = 2 * ((y.taps + 1) / 2)
            tables += height * (16 + 8 + 2 * y.taps + 16 * ((y.taps + 1) / 2))
        }
        guard resizesX && resizesY else { return tables + boxes }  // one pass, no intermediate
        let intermediate: Int
        if verticalFirstIsCheaper(inputRows: inputRows, horizontalWorkPerRow: horizontalWorkPerRow,
                                  verticalWorkPerSample: verticalWorkPerSample, regionWidth: inputWidth,
                                  width: width, height: height, channels: channels) {
            let rowLength = inputWidth * channels
            let stripRows = rowsPerRun(workPerRow: rowLength * verticalWorkPerSample + horizontalWorkPerRow)
            intermediate = (stripRows - 1) * rowLength + max(rowLength, readSpan)
        } else {
            intermediate = inputRows * width * channels
        }
        return tables + boxes + intermediate * MemoryLayout<Int16>.stride
    }
}
