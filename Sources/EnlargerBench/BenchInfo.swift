import ArgumentParser
import Foundation
import ImageModel
import Imaging

/// CPU time of `ImagePipeline.info` (headers only) per call, the figure behind the promise
/// that `info` costs at most a millisecond on a 24 MP photo.
struct BenchInfo: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "CPU time per header-only info read, median and p90 over many calls."
    )

    @Argument(help: "JPEG files (e.g. the 24 MP corpus photo bimg_vertical.jpg).")
    var inputs: [String]

    @Option(help: "Calls per file.")
    var calls = 500

    func run() throws {
        let pipeline = ImagePipeline()
        for input in inputs {
            let bytes = try InputFile.read(path: input, maxBytes: DecodeLimits().maxInputBytes)
            var samples: [Double] = []
            var info: ImageInfo?
            for _ in 0..<calls {
                let start = Self.cpuNanoseconds()
                info = try bytes.withUnsafeBytes { raw throws(ImagingError) in try pipeline.info(of: raw) }
                samples.append(Double(Self.cpuNanoseconds() - start) / 1e6)
            }
            samples.sort()
            let median = samples[samples.count / 2], p90 = samples[samples.count * 9 / 10]
            let size = info.map { "\($0.width)x\($0.height)" } ?? "?"
            print(String(format: "%@ (%@, %d bytes): info CPU median %.3f ms, p90 %.3f ms over %d calls",
                         (input as NSString).lastPathComponent, size, bytes.count, median, p90, calls))
        }
    }

    /// This thread's CPU time: what the call cost, whatever else the machine does.
    static func cpuNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}
