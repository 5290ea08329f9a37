import ArgumentParser
import Foundation
import ImageModel
import Imaging

/// What keeping an HDR gain map costs: the same resize with the map kept and dropped, CPU time
/// and output size, and the map's share of both.
struct BenchGainMap: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gain-map",
        abstract: "CPU per resize with the HDR gain map kept and dropped (medians), and the bytes it adds."
    )

    @Argument(help: "UltraHDR JPEGs (e.g. the corpus's sharp_gain-map.jpg).")
    var inputs: [String]

    @Option(help: "Output width.")
    var width = 800

    @Option(help: "Runs per file and mode.")
    var runs = 40

    func run() throws {
        let pipeline = ImagePipeline()
        for input in inputs {
            let bytes = try InputFile.read(path: input, maxBytes: DecodeLimits().maxInputBytes)
            var cpu: [GainMapMode: [Double]] = [:], size: [GainMapMode: Int] = [:]
            // Interleaved, so that a busy moment of the machine falls on both modes alike.
            for _ in 0..<runs {
                for mode in [GainMapMode.keep, .drop] {
                    var options = ResizeOptions(width: width)
                    options.gainMap = mode
                    let before = Self.cpuMilliseconds()
                    var final: StageResult?
                    try pipeline.run(bytes, options: options, delivery: .final) { final = $0 }
                    cpu[mode, default: []].append(Self.cpuMilliseconds() - before)
                    size[mode] = final?.image.byteCount
                }
            }
            let median = { (values: [Double]) in values.sorted()[values.count / 2] }
            let kept = median(cpu[.keep]!), dropped = median(cpu[.drop]!)
            print(String(format: "%@: keep %.2f ms CPU, %d bytes; drop %.2f ms CPU, %d bytes; the map adds %.2f ms "
                         + "(%.1f%%) and %d bytes (%.1f%%); medians of %d runs",
                         (input as NSString).lastPathComponent, kept, size[.keep] ?? 0, dropped, size[.drop] ?? 0,
                         kept - dropped, 100 * (kept - dropped) / dropped, (size[.keep] ?? 0) - (size[.drop] ?? 0),
                         100 * Double((size[.keep] ?? 0) - (size[.drop] ?? 0)) / Double(size[.drop] ?? 1), runs))
        }
    }

    /// This thread's CPU time: the run is on this thread alone (the reaper's frees aside).
    static func cpuMilliseconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) * 1e3 + Double(time.tv_nsec) / 1e6
    }
}
