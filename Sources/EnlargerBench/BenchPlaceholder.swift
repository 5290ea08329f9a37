import ArgumentParser
import Foundation
import ImageModel
import Imaging

/// Time to the placeholder (the output's size and a ThumbHash) from the moment a job starts,
/// its header not yet read: the figure behind "a placeholder before any result".
struct BenchPlaceholder: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "placeholder",
        abstract: "Wall time from a job's start to its placeholder, its degraded result and its final, medians over runs."
    )

    @Argument(help: "Images (e.g. the 12 MP corpus photo bimg_test_exif_full.jpg, which has an EXIF thumbnail).")
    var inputs: [String]

    @Option(help: "Output box, WxH.")
    var size = "320x320"

    @Option(help: "Runs per file.")
    var runs = 50

    func run() throws {
        let box = size.split(separator: "x").compactMap { Int($0) }
        guard box.count == 2 else { throw ValidationError("--size takes WxH, e.g. 320x320") }
        let pipeline = ImagePipeline()
        for input in inputs {
            let bytes = try InputFile.read(path: input, maxBytes: DecodeLimits().maxInputBytes)
            var toPlaceholder: [Double] = [], toDegraded: [Double] = [], toFinal: [Double] = []
            var made: MadePlaceholder?
            for _ in 0..<runs {
                let times = try bytes.withUnsafeBytes { raw throws(ImagingError) in
                    try Self.timeOneRun(pipeline, raw, width: box[0], height: box[1])
                }
                made = times.placeholder
                if let at = times.placeholderAt { toPlaceholder.append(at) }
                if let at = times.degradedAt { toDegraded.append(at) }
                if let at = times.finalAt { toFinal.append(at) }
            }
            let median = { (values: [Double]) in values.isEmpty ? .nan : values.sorted()[values.count / 2] }
            let hash = made.map {
                "\($0.placeholder.width)x\($0.placeholder.height) from \($0.source.rawValue), "
                    + "\($0.placeholder.thumbHash.count) bytes"
            } ?? "none"
            print(String(format: "%@ (%d bytes): placeholder %.3f ms (%@), degraded %.2f ms, final %.2f ms; medians of %d runs",
                         (input as NSString).lastPathComponent, bytes.count, median(toPlaceholder), hash,
                         median(toDegraded), median(toFinal), runs))
        }
    }

    /// When one run (header read included) gave its placeholder, degraded result and final.
    final class Times {
        var placeholder: MadePlaceholder?
        var placeholderAt: Double?, degradedAt: Double?, finalAt: Double?
    }

    @inline(never)
    static func timeOneRun(_ pipeline: ImagePipeline, _ raw: UnsafeRawBufferPointer, width: Int,
                           height: Int) throws(ImagingError) -> Times {
        let times = Times()
        let start = ContinuousClock.now
        let prepared = try pipeline.prepare(raw, options: ResizeOptions(width: width, height: height), delivery: .progressive,
                                            placeholder: true)
        prepared.onPlaceholder = { placeholder in
            times.placeholderAt = milliseconds(since: start)
            times.placeholder = placeholder
        }
        try prepared.run { result throws(ImagingError) in
            if result.stage == .degraded {
                times.degradedAt = milliseconds(since: start)
            } else {
                times.finalAt = milliseconds(since: start)
            }
        }
        return times
    }

    static func milliseconds(since start: ContinuousClock.Instant) -> Double {
        let (seconds, attoseconds) = (ContinuousClock.now - start).components
        return Double(seconds) * 1e3 + Double(attoseconds) * 1e-15
    }
}
