import ArgumentParser
import CLISupport
import Foundation
import ImageModel
import Imaging

@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enlarger-bench",
        abstract: "Measure Enlarger itself (the side-by-side comparisons live in Benchmarks/).",
        version: enlargerVersion,
        subcommands: [CancelLatency.self, BenchWorkerCancel.self, BenchCancelRoundTrip.self, BenchBroker.self, BenchSlowConsumer.self, BenchDepartures.self,
                      BenchInfo.self, BenchPlaceholder.self, BenchGainMap.self, BenchShare.self, BenchLanes.self, BenchRelayServe.self]
    )
}

/// Latency from setting a job's cancellation flag to the pipeline call returning, with the
/// flag set at random moments of a long job (decode and resample of a huge image).
struct CancelLatency: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel-to-return latency of the imaging pipeline at random moments of a large job."
    )

    @Argument(help: "A large JPEG (e.g. the 99.6 MP corpus file thumbor_9643x10328.jpg).")
    var input: String

    @Option(help: "Number of cancelled runs.")
    var runs = 50

    @Option(help: "Target width: large keeps the decode at full scale and the resampler busy.")
    var width = 9000

    @Option(help: "Random seed for the cancel moments.")
    var seed: UInt64 = 1

    func run() throws {
        let bytes = try InputFile.read(path: input, maxBytes: DecodeLimits().maxInputBytes)
        let pipeline = ImagePipeline()
        let options = ResizeOptions(width: width, format: .pnm)
        // Uncancelled runs (median of 3) set the window in which cancels are placed.
        var durations: [Duration] = []
        for _ in 0..<3 {
            let start = ContinuousClock.now
            _ = try bytes.withUnsafeBytes { try pipeline.resize($0, options: options) }
            durations.append(ContinuousClock.now - start)
        }
        let full = durations.sorted()[1]
        print("uncancelled run: \(milliseconds(full)) ms; cancelling \(runs) runs at random moments (seed \(seed))")

        var generator = SplitMix(seed: seed)
        var latencies: [Double] = []
        var finishedFirst = 0
        for _ in 0..<runs {
            let flag = CancellationFlag()
            let done = DispatchSemaphore(value: 0)
            let box = LatencyBox()
            let delay = Double.random(in: 0..<milliseconds(full) * 0.9, using: &generator)
            let worker = Thread {
                do {
                    _ = try bytes.withUnsafeBytes { try pipeline.resize($0, options: options, cancel: flag) }
                } catch {
                    box.cancelled = (error as? ImagingError)?.code == .cancelled
                }
                box.returned = .now
                done.signal()
            }
            worker.stackSize = 1 << 20
            worker.start()
            Thread.sleep(forTimeInterval: delay / 1000)
            let cancelledAt = ContinuousClock.now
            flag.cancel()
            done.wait()
            if box.cancelled {
                latencies.append(milliseconds(box.returned - cancelledAt))
            } else {
                finishedFirst += 1
            }
        }
        print("cancel -> return latency over \(latencies.count) cancelled runs (\(finishedFirst) finished first): "
              + percentiles(latencies) + " (target p99 <= 10 ms)")
    }
}

private final class LatencyBox: @unchecked Sendable {
    var cancelled = false
    var returned = ContinuousClock.now
}

/// SplitMix64, so a benchmark's random moments replay from its seed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
