import Dispatch
import Imaging

// Times `Resampler.resample` on synthetic images: the median of several runs after a warm-up,
// on one thread, then how soon a cancel takes effect. Arguments (optional): runs per case,
// then a substring of the case names to run ("cancel" for the cancellation timing only).

struct Case {
    let name: String
    let source: (width: Int, height: Int, channels: Int)
    let output: (width: Int, height: Int)
    let filter: ResampleFilter
}

let cases = [
    Case(name: "RGB 1362x1113 -> 720x588 lanczos3", source: (1362, 1113, 3), output: (720, 588), filter: .lanczos3),
    Case(name: "RGB 2000x3000 -> 480x720 lanczos3", source: (2000, 3000, 3), output: (480, 720), filter: .lanczos3),
    Case(name: "RGB 4032x3024 -> 720x540 lanczos3", source: (4032, 3024, 3), output: (720, 540), filter: .lanczos3),
    Case(name: "RGB 1362x1113 -> 720x588 triangle", source: (1362, 1113, 3), output: (720, 588), filter: .triangle),
    Case(name: "RGBA 1362x1113 -> 720x588 lanczos3", source: (1362, 1113, 4), output: (720, 588), filter: .lanczos3),
    Case(name: "Gray 1362x1113 -> 720x588 lanczos3", source: (1362, 1113, 1), output: (720, 588), filter: .lanczos3),
    Case(name: "RGB 640x480 -> 1920x1440 lanczos3", source: (640, 480, 3), output: (1920, 1440), filter: .lanczos3),
]

let arguments = CommandLine.arguments.dropFirst()
let runs = arguments.first.flatMap { Int($0) } ?? 15
let only = arguments.dropFirst().first

/// A smooth image with some noise, so no sample pattern favours a code path.
func syntheticImage(width: Int, height: Int, channels: Int) -> PixelBuffer {
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    var pixels = [UInt8](repeating: 0, count: width * height * channels)
    for y in 0..<height {
        for x in 0..<width {
            for c in 0..<channels {
                state = state &* 6364136223846793005 &+ 1442695040888963407
                let noise = Int(state >> 60)
                let level = x * 255 / width + y * 3 + c * 40 + noise
                pixels[(y * width + x) * channels + c] = UInt8(truncatingIfNeeded: level)
            }
        }
    }
    return PixelBuffer(width: width, height: height, channels: channels, pixels: pixels)
}

func milliseconds(_ value: Double) -> String {
    let hundredths = Int((value * 100).rounded())
    let fraction = hundredths % 100
    return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
}

for test in cases where only.map(test.name.contains) ?? true {
    let image = syntheticImage(width: test.source.width, height: test.source.height, channels: test.source.channels)
    var times: [Double] = []
    for run in 0...runs {
        let start = DispatchTime.now().uptimeNanoseconds
        let result = try Resampler.resample(image, width: test.output.width, height: test.output.height,
                                            filter: test.filter)
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
        precondition(result.width == test.output.width && result.height == test.output.height)
        if run > 0 { times.append(elapsed) }
    }
    times.sort()
    let median = times[times.count / 2]
    print("\(test.name): median \(milliseconds(median)) ms, min \(milliseconds(times[0])) ms")
}

// Cancellation latency: cancel from another thread part-way through the largest case and
// time how long the resampler takes to notice.
if only == nil || only == "cancel" {
    let image = syntheticImage(width: 4032, height: 3024, channels: 3)
    var latencies: [Double] = []
    for attempt in 0..<20 {
        let flag = CancellationFlag()
        let cancelled = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var cancelledAt: UInt64 = 0
        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(500 + attempt * 450)) {
            cancelledAt = DispatchTime.now().uptimeNanoseconds
            flag.cancel()
            cancelled.signal()
        }
        do {
            _ = try Resampler.resample(image, width: 720, height: 540, cancel: flag)
            cancelled.wait()
        } catch {
            let stopped = DispatchTime.now().uptimeNanoseconds
            cancelled.wait()
            latencies.append(Double(stopped - cancelledAt) / 1e6)
        }
    }
    latencies.sort()
    let median = milliseconds(latencies[latencies.count / 2]), worst = milliseconds(latencies.last!)
    print("cancel latency (4032x3024 -> 720x540, \(latencies.count) cancels): median \(median) ms, max \(worst) ms")
}
