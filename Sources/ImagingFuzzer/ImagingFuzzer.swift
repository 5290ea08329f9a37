// A libFuzzer target over decode → resize → encode, for every input format (JPEG, PNG, WebP,
// HEIC, AVIF, GIF, JPEG XL: the decoder is chosen by the content, as in the service).
//
// Fuzzing build (libFuzzer supplies `main`, so the replay `main` below is compiled out):
//   swift build -c release --sanitize=fuzzer --sanitize=address --product imaging-fuzzer \
//       --scratch-path .build-fuzz -Xswiftc -DFUZZING
//   ./.build-fuzz/release/imaging-fuzzer -runs=1000000 -max_len=65536 CORPUS_DIR
// Ordinary build: a replay tool that runs the same entry point over the files it is given
// (e.g. a crash reproducer), so the target is always compiled and kept working.
import ImageModel
import Imaging

// Small limits keep each input cheap; a bigger input is refused like any other bad one.
private let pipeline = ImagePipeline(limits: DecodeLimits(maxPixels: 4 << 20, maxInputBytes: 1 << 20, maxScans: 64))

/// Any trap, sanitizer report or leak is a finding; a typed `ImagingError` is the expected
/// outcome for garbage. The first byte picks the options so fit modes and sizes are explored.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let input = UnsafeRawBufferPointer(start: data, count: size)
    let selector = size > 0 ? Int(data[0]) : 0
    let second = size > 1 ? Int(data[1]) : 0
    var options = ResizeOptions(
        width: 1 + (selector * 7) % 97, height: selector & 1 == 0 ? nil : 1 + (selector * 13) % 89,
        fit: Fit.allCases[selector % 3], enlarge: selector & 2 != 0, progressive: selector & 4 != 0,
        format: selector & 8 != 0 ? .pnm : .jpeg, failOn: FailOn.allCases[(selector >> 4) % 4])
    // The second byte (a format's magic, usually) also varies the output negotiation.
    if selector & 64 != 0 {
        options.accept = [OutputFormat.allCases[second % 5], OutputFormat.allCases[(second / 5) % 5]]
        options.flatten = second & 1 != 0
        options.lossless = second & 2 != 0
    }
    do {
        var terminal = 0
        try pipeline.run(input, options: options, delivery: Delivery.allCases[(selector / 3) % 3]) { result in
            precondition(!result.image.bytes.isEmpty, "an emitted result has bytes")
            if result.isTerminal { terminal += 1 }
        }
        precondition(terminal == 1, "exactly one terminal result")
    } catch {
        precondition(!error.message.isEmpty, "every error has a message")
    }
    return 0
}

#if !FUZZING
import Foundation

@main
enum Replay {
    static func main() {
        for path in CommandLine.arguments.dropFirst() {
            let bytes = [UInt8](FileManager.default.contents(atPath: path) ?? Data())
            _ = bytes.withUnsafeBufferPointer { fuzzOne($0.baseAddress, $0.count) }
            print("ok \(path)")
        }
    }
}
#endif
