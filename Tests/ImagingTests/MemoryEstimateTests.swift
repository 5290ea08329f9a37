import Foundation
import ImageModel
import TestSupport
import XCTest

@testable import Imaging

/// The estimate made from the header must cover what a run really uses at its peak.
///
/// Each run is measured in a fresh process (this test bundle, running `MemoryPeakProbe`
/// alone), because a process that has run other tests holds resident memory its allocator
/// may reuse, which hides growth. See `Peak` for how the growth is measured.
final class MemoryEstimateTests: XCTestCase {
    func testEstimateCoversTheMeasuredPeakForCorpusPhotos() throws {
        var cases: [ProbeCase] = []
        let photos = Corpus.manifest("good").filter { ($0.width ?? 0) * ($0.height ?? 0) >= 1_000_000 }
        XCTAssertGreaterThanOrEqual(photos.count, 15, "the corpus's photos")
        for photo in photos where photo.file != "thumbor_9643x10328.jpg" {
            let (w, h) = (photo.width!, photo.height!)
            cases.append(ProbeCase(file: photo.file, options: ResizeOptions(width: 320, height: 320), delivery: .progressive))
            cases.append(ProbeCase(file: photo.file, options: ResizeOptions(width: w * 3 / 4, progressive: true, chroma444: true),
                                   delivery: .progressive))
            cases.append(ProbeCase(file: photo.file, options: ResizeOptions(width: w / 2, height: h / 3, fit: .cover,
                                                                            format: .pnm), delivery: .final))
            cases.append(ProbeCase(file: photo.file, options: ResizeOptions(width: w, height: h, fit: .fill, quality: 100,
                                                                            chroma444: true), delivery: .degraded))
        }
        // The largest photo: a full-size decode of 99.6 MP, and a shrink-on-load one.
        cases.append(ProbeCase(file: "thumbor_9643x10328.jpg", options: ResizeOptions(width: 9000), delivery: .progressive))
        cases.append(ProbeCase(file: "thumbor_9643x10328.jpg", options: ResizeOptions(width: 1200), delivery: .final))

        print("measured peak, estimate, ratio for \(cases.count) runs, each in a fresh process:")
        var ratios: [Double] = []
        var largest = (estimate: 0, measured: 0, label: "")
        for item in cases {
            let (measured, estimate) = try MemoryPeakProbe.measureInFreshProcess(item)
            XCTAssertGreaterThanOrEqual(estimate, measured, "\(item.label): the estimate is below the measured peak")
            ratios.append(Double(estimate) / Double(measured))
            if measured > largest.measured { largest = (estimate, measured, item.label) }
            print(String(format: "%8.1f MB %8.1f MB  %6.2f×  ", Double(measured) / 1e6, Double(estimate) / 1e6,
                         Double(estimate) / Double(measured)) + item.label)
        }
        let sorted = ratios.sorted()
        let figures = [sorted.first!, sorted[sorted.count / 2], sorted.last!].map { String(format: "%.2f", $0) }
        print("estimate / measured: min \(figures[0]), median \(figures[1]), max \(figures[2]); largest run "
              + "\(largest.label): \(largest.measured / 1_000_000) MB measured, \(largest.estimate / 1_000_000) MB estimated")
        // High, but not absurdly so where it matters: the largest run is within 3× of what it used.
        XCTAssertLessThan(Double(largest.estimate) / Double(largest.measured), 3)
    }

    /// PNG, WebP, AVIF and GIF made here from a photo of the corpus, and the HEIC test
    /// images: libspng, libwebp, libheif and libaom allocate on their own, and the estimate
    /// must cover them too.
    func testEstimateCoversTheMeasuredPeakForOtherFormats() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-memory-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // At half its size (3 MP): what scales with the pixels shows as well, in a quarter of
        // the time the encoders here and the decoders in the probes take.
        let photo = try ImagePipeline().resize(try Corpus.good("bimg_test_exif_full.jpg"),
                                               options: ResizeOptions(width: 1512, format: .pnm))
        let pixels = try Encoder.decodePNM(photo.image.bytes)
        var cases: [ProbeCase] = []
        for (format, lossless) in [(OutputFormat.png, false), (.webp, false), (.webp, true), (.avif, false)] {
            let name = "photo\(lossless ? "-lossless" : "").\(format.fileExtension)"
            let path = directory.appendingPathComponent(name).path
            let encoded = try Encoder.encode(pixels, format: format, quality: 80, lossless: lossless)
            try Data(encoded.bytes).write(to: URL(fileURLWithPath: path))
            for (options, delivery) in [(ResizeOptions(width: 720, height: 720), Delivery.progressive),
                                        (ResizeOptions(width: 1500, format: .png), .final)] {
                var item = ProbeCase(file: name, options: options, delivery: delivery)
                item.path = path
                cases.append(item)
            }
        }
        // The photo as a GIF (a 3-3-2 palette; GIFWriter's uncompressed LZW).
        var palette: [UInt8] = []
        for index in 0..<256 {
            palette += [UInt8((index >> 5) * 255 / 7), UInt8((index >> 2 & 7) * 255 / 7), UInt8((index & 3) * 85)]
        }
        var indices = [UInt8](repeating: 0, count: pixels.width * pixels.height)
        for i in indices.indices {
            let (r, g, b) = (pixels.pixels[3 * i], pixels.pixels[3 * i + 1], pixels.pixels[3 * i + 2])
            indices[i] = (r & 0xE0) | ((g & 0xE0) >> 3) | (b >> 6)
        }
        let gif = directory.appendingPathComponent("photo.gif").path
        try Data(GIFWriter.make(screenWidth: pixels.width, screenHeight: pixels.height, palette: palette,
                                images: [.init(width: pixels.width, height: pixels.height, indices: indices)]))
            .write(to: URL(fileURLWithPath: gif))
        for (options, delivery) in [(ResizeOptions(width: 720, height: 720), Delivery.progressive),
                                    (ResizeOptions(width: 1500, format: .png), .final)] {
            var item = ProbeCase(file: "photo.gif", options: options, delivery: delivery)
            item.path = gif
            cases.append(item)
        }
        for file in ["heic-thumbnail.heic", "avif-large.avif", "png-rgba8.png", "webp-lossless-rgba.webp", "jxl-large.jxl",
                     "jxl-large-lossless.jxl", "jxl-layer-larger.jxl", "jxl-layer-larger-alpha.jxl",
                     "jxl-lossy-alpha-large.jxl",
                     "gif-transparent.gif"] {
            for (format, delivery) in [(OutputFormat.avif, Delivery.progressive), (.webp, .final), (.jpeg, .degraded)] {
                var item = ProbeCase(file: file, options: ResizeOptions(width: 400, format: format), delivery: delivery)
                item.path = TestImages.root.appendingPathComponent(file).path
                cases.append(item)
            }
        }
        print("measured peak, estimate, ratio for \(cases.count) runs, each in a fresh process:")
        var worst = 0.0
        for item in cases {
            let (measured, estimate) = try MemoryPeakProbe.measureInFreshProcess(item)
            XCTAssertGreaterThanOrEqual(estimate, measured, "\(item.label): the estimate is below the measured peak")
            worst = max(worst, Double(estimate) / Double(measured))
            print(String(format: "%8.1f MB %8.1f MB  %6.2f×  ", Double(measured) / 1e6, Double(estimate) / 1e6,
                         Double(estimate) / Double(measured)) + item.label)
        }
        print(String(format: "largest estimate / measured: %.2f", worst))
    }

    /// Several outputs of one decode: the srcset case on the largest photos, crops, a gain map,
    /// a PNG; each measured in a fresh process against its estimate.
    func testEstimateCoversTheMeasuredPeakForVariants() throws {
        let srcset = [320, 640, 1280].flatMap { box in
            ["webp", "jpeg"].map { ProbeCase.Variant(width: box, height: box, format: $0) }
        }
        var cases: [ProbeCase] = []
        for file in ["bimg_vertical.jpg", "bimg_test_exif_full.jpg", "sharp_gain-map.jpg", "exifsamples_iphone_hdr_NO.jpg"] {
            var item = ProbeCase(file: file, options: ResizeOptions(width: 1), delivery: .final)
            item.variants = srcset
            cases.append(item)
        }
        var crops = ProbeCase(file: "bimg_vertical.jpg", options: ResizeOptions(width: 1, fit: .cover), delivery: .final)
        crops.variants = [.init(width: 2000, height: 600, format: "jpeg"), .init(width: 600, height: 2000, format: "png"),
                          .init(width: 300, height: 300, format: "webp")]
        cases.append(crops)
        print("measured peak, estimate, ratio for \(cases.count) variant runs, each in a fresh process:")
        for item in cases {
            let (measured, estimate) = try MemoryPeakProbe.measureInFreshProcess(item)
            XCTAssertGreaterThanOrEqual(estimate, measured, "\(item.label): the estimate is below the measured peak")
            print(String(format: "%8.1f MB %8.1f MB  %6.2f×  ", Double(measured) / 1e6, Double(estimate) / 1e6,
                         Double(estimate) / Double(measured)) + item.label)
        }
    }

    func testTheEstimateFollowsTheHeader() throws {
        // Progressive input keeps its coefficients; the same image in baseline does not.
        let progressive = try header("jxltestdata_flower.png.im_q85_420_progr.jpg")  // 2268×1512 4:2:0
        XCTAssertTrue(progressive.multiScan)
        XCTAssertEqual(progressive.coefficientBytes, (2272 * 1520 + 2 * 1136 * 760) * 2)
        let baseline = try header("jxltestdata_flower.png.im_q85_444.jpg")
        XCTAssertFalse(baseline.multiScan)
        XCTAssertTrue(try header("jxltestdata_flower_small.q85_420_non_interleaved.jpg").multiScan,
                      "components in separate scans need the whole-image buffer too")
        // A 9643×10328 decoded at full size cannot take less than its pixels.
        let huge = try Corpus.good("thumbor_9643x10328.jpg")
        let full = try withBytes(huge) { raw throws(ImagingError) in
            try ImagePipeline().prepare(raw, options: ResizeOptions(width: 9643)).memoryEstimate
        }
        XCTAssertGreaterThan(full.bytes, 9643 * 10328 * 3 * 2, "decoded image and output")
        XCTAssertEqual(full.decodedBytes, 9643 * 10328 * 3)
        let small = try withBytes(huge) { raw throws(ImagingError) in
            try ImagePipeline().prepare(raw, options: ResizeOptions(width: 320)).memoryEstimate
        }
        XCTAssertLessThan(small.bytes, full.bytes / 20, "shrink-on-load to 1/8")
        print("9643×10328 to 9643 px wide: \(full); to 320 px: \(small)")
    }

    /// An embedded profile counts: its copies, the colour engine's tables, and the output's
    /// copy when it is kept, whatever the image's size.
    func testTheEstimateCountsTheProfile() throws {
        var header = try header("ljtseed_1x1_420.jpg")
        let plan = try ResizePlan.make(sourceWidth: header.width, sourceHeight: header.height,
                                       orientation: header.orientation, options: ResizeOptions(width: 1))
        func estimate(_ options: ResizeOptions) -> Int {
            MemoryEstimate(header: header, thumbnail: nil, plan: plan, options: options, delivery: .final, inputBytes: 0).bytes
        }
        let bare = estimate(ResizeOptions(width: 1))
        header.iccProfile = [UInt8](repeating: 1, count: 10 << 20)
        XCTAssertGreaterThanOrEqual(estimate(ResizeOptions(width: 1)) - bare, 60 << 20)
        var keeping = ResizeOptions(width: 1)
        keeping.keepProfile = true
        XCTAssertGreaterThanOrEqual(estimate(keeping) - bare, 80 << 20)
    }

    /// A JPEG XL's extra channels (besides alpha) are decoded whole: each counts.
    func testJPEGXLExtraChannelsCount() throws {
        var header = RasterHeader(format: .jxl, width: 2000, height: 1000, channels: 3, hasAlpha: false, bitDepth: 8,
                                  colorSpace: "rgb")
        let plan = try ResizePlan.make(sourceWidth: 2000, sourceHeight: 1000, orientation: .up,
                                       options: ResizeOptions(width: 100))
        func estimate() -> Int {
            MemoryEstimate(raster: header, plan: plan, shrink: 1, options: ResizeOptions(width: 100), delivery: .final,
                           inputBytes: 0).bytes
        }
        let plain = estimate()
        header.extraPlanes = 10
        XCTAssertGreaterThanOrEqual(estimate() - plain, 10 * 2000 * 1000 * 8)
    }

    private func header(_ file: String) throws -> JPEGHeader {
        try ImagePipeline().header(of: try Corpus.good(file))
    }
}

/// One run to measure: a corpus file, options and delivery.
struct ProbeCase: Codable {
    var file: String
    /// A file outside the corpus (made by the test), read from this path instead.
    var path: String?
    var width: Int?
    var height: Int?
    var fit: String
    var format: String
    var progressive: Bool
    var chroma444: Bool
    var quality: Int
    var delivery: String
    /// Several outputs from one decode instead (`prepareVariants`): each a box and a format,
    /// the rest of the options shared.
    var variants: [Variant]?

    struct Variant: Codable {
        var width: Int?
        var height: Int?
        var format: String
    }

    init(file: String, options: ResizeOptions, delivery: Delivery) {
        self.file = file
        width = options.width
        height = options.height
        fit = options.fit.rawValue
        format = options.format.rawValue
        progressive = options.progressive
        chroma444 = options.chroma444
        quality = options.quality
        self.delivery = delivery.rawValue
    }

    var options: ResizeOptions {
        ResizeOptions(width: width, height: height, fit: Fit(rawValue: fit)!, quality: quality, progressive: progressive,
                      chroma444: chroma444, format: OutputFormat(rawValue: format)!)
    }

    /// Each variant's options.
    var variantOptions: [ResizeOptions] {
        (variants ?? []).map { variant in
            var options = self.options
            options.width = variant.width
            options.height = variant.height
            options.format = OutputFormat(rawValue: variant.format)!
            return options
        }
    }

    var label: String {
        if let variants {
            return "\(file) variants " + variants.map { "\($0.width ?? 0)×\($0.height ?? 0) \($0.format)" }
                .joined(separator: ", ") + " \(fit)"
        }
        return "\(file) \(width ?? 0)×\(height ?? 0) \(fit) \(format)\(progressive ? " progressive" : "") \(delivery)"
    }
}

/// Measures one run of the pipeline in this process: the case named by the environment
/// (`ENLARGER_PROBE_CASE`, JSON) when `MemoryEstimateTests` starts it in a fresh process,
/// or a default one when the test suite runs it as an ordinary test.
final class MemoryPeakProbe: XCTestCase {
    static let caseVariable = "ENLARGER_PROBE_CASE"
    static let resultPrefix = "PROBE-RESULT "

    func testMeasureOneRun() throws {
        let item: ProbeCase
        if let json = ProcessInfo.processInfo.environment[Self.caseVariable] {
            item = try JSONDecoder().decode(ProbeCase.self, from: Data(json.utf8))
        } else {
            item = ProbeCase(file: "sharp_2569067123_aca715a2ee_o.jpg", options: ResizeOptions(width: 1000), delivery: .progressive)
        }
        let bytes = try item.path.map { [UInt8](try Data(contentsOf: URL(fileURLWithPath: $0))) } ?? Corpus.good(item.file)
        // Once to warm up (code pages, lazy tables), then measured.
        try Self.run(bytes, item)
        var estimate = 0
        let growth = try Peak.measure { estimate = try Self.run(bytes, item) }
        // The input is resident before the run; the estimate counts it.
        let measured = growth + bytes.count
        print("\(Self.resultPrefix)\(measured) \(estimate)")
        XCTAssertGreaterThanOrEqual(estimate, measured, item.label)
    }

    /// Runs a case; returns the estimate. Results are copied, as the worker copies them into
    /// frames, and kept until the run ends, as frames in flight may be.
    @discardableResult
    static func run(_ bytes: [UInt8], _ item: ProbeCase) throws -> Int {
        var frames: [[UInt8]] = []
        var estimate = 0
        try withBytes(bytes) { raw throws(ImagingError) in
            if item.variants != nil {
                let prepared = try ImagePipeline().prepareVariants(raw, variants: item.variantOptions)
                estimate = prepared.memoryEstimate.bytes
                try prepared.run { _, result in frames.append(result.image.withUnsafeBytes { Array($0) }) }
                return
            }
            let prepared = try ImagePipeline().prepare(raw, options: item.options, delivery: Delivery(rawValue: item.delivery)!)
            estimate = prepared.memoryEstimate.bytes
            try prepared.run { result in frames.append(result.image.withUnsafeBytes { Array($0) }) }
        }
        precondition(!frames.isEmpty)
        return estimate
    }

    /// Runs `testMeasureOneRun` for `item` in a new process of this test bundle; returns the
    /// measured peak and the estimate.
    static func measureInFreshProcess(_ item: ProbeCase) throws -> (measured: Int, estimate: Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["ImagingTests.MemoryPeakProbe/testMeasureOneRun"]
        var environment = ProcessInfo.processInfo.environment
        environment[caseVariable] = String(decoding: try JSONEncoder().encode(item), as: UTF8.self)
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0,
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix(resultPrefix) }) else {
            throw ProbeFailure(description: "\(item.label): the probe failed:\n\(text)")
        }
        let numbers = line.dropFirst(resultPrefix.count).split(separator: " ").compactMap { Int($0) }
        guard numbers.count == 2 else { throw ProbeFailure(description: "\(item.label): unreadable probe output \(line)") }
        return (numbers[0], numbers[1])
    }

    struct ProbeFailure: Error, CustomStringConvertible {
        var description: String
    }
}

/// Peak resident memory of the process during a closure (Linux).
///
/// The growth of resident memory during one run: Linux resets the high-water mark (`VmHWM`)
/// on writing 5 to /proc/self/clear_refs; large blocks get their own mappings (a fixed mmap
/// threshold) and free heap is returned to the kernel first (`malloc_trim`), so that the run
/// cannot reuse memory freed earlier; and the buffer reaper is drained before and after.
enum Peak {
    /// Resident-memory growth, in bytes, from just before `body` to the highest point during it.
    static func measure(_ body: () throws -> Void) throws -> Int {
        _ = fixedThreshold
        settle()
        try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        let before = status("VmRSS:")
        try body()
        let peak = status("VmHWM:")
        settle()
        return max(0, peak - before)
    }

    /// Frees what can be freed: the reaper's buffers, then free heap back to the kernel.
    private static func settle() {
        BufferReaper.drain()
        _ = trim?(0)
    }

    /// glibc raises its mmap threshold (up to 32 MiB) as large blocks are freed, after which
    /// such blocks come from the heap and, once freed, may be reused by a later run without
    /// showing as growth. A fixed threshold keeps every large buffer in its own mapping, so
    /// resident memory follows live memory whatever ran before.
    private static let fixedThreshold: Void = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        _ = mallopt(-3, 128 << 10)  // M_MMAP_THRESHOLD
    }()

    private static let trim: (@convention(c) (Int) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int) -> Int32).self)
    }()

    /// A `kB` field of /proc/self/status, in bytes.
    private static func status(_ field: String) -> Int {
        let text = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = text.split(separator: "\n").first { $0.hasPrefix(field) } ?? ""
        let fields = line.split { $0 == " " || $0 == "\t" }
        return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * 1024
    }
}
