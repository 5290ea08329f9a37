import ArgumentParser
import CLISupport
import Enlarger
import EnlargerProtocol
import Foundation
import ImageModel

/// Identical requests at the broker: many clients asking for the same photo at once (shared
/// job vs one job each), and the latency of an answer from the result cache. The service
/// runs as `enlarger serve` (its own processes); this process plays the clients, one
/// `EnlargerClient` (one connection, one I/O thread) per simulated client.
struct BenchShare: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Shared jobs and cache hits: N clients asking for one photo at once; cache-hit latency."
    )

    @Argument(help: "The photo every client asks for (e.g. the 12 MP corpus file bimg_test_exif_full.jpg).")
    var input: String

    @Option(help: "Clients asking at once.")
    var clients = 100

    @Option(help: "Rounds of the burst, each way (shared, then one job each); medians are printed.")
    var rounds = 3

    @Option(help: "Cache hits timed one after another for the latency figures.")
    var hits = 1000

    @Option(help: "Worker processes of the service.")
    var workers = 2

    @Option(help: "Output width.")
    var width = 720

    @OptionGroup var enlarger: EnlargerExecutable

    func run() async throws {
        let photo = try Array(Data(contentsOf: URL(fileURLWithPath: input)))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-bench-share-\(getpid())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let executable = try EnlargerExecutable.resolve(enlarger.path)
        let serve = Process()
        serve.executableURL = executable
        serve.arguments = ["serve", "--workers", "\(workers)", "--concurrency", "1", "--runtime-dir", directory.path,
                           "--queue-limit", "\(clients * 2 + 16)"]
        serve.standardError = FileHandle.nullDevice
        try serve.run()
        defer {
            serve.terminate()
            serve.waitUntilExit()
        }
        let endpoint = "ipc://\(directory.path)/clients.sock"
        while !FileManager.default.fileExists(atPath: directory.path + "/clients.sock") { usleep(50_000) }
        let probe = try EnlargerClient(brokerEndpoint: endpoint)
        defer { Task { await probe.close() } }
        while try await probe.status().workers.count < workers { try await Task.sleep(for: .milliseconds(100)) }

        var connections: [EnlargerClient] = []
        for _ in 0..<clients { connections.append(try EnlargerClient(brokerEndpoint: endpoint)) }

        print("\(clients) clients ask for \(input) (\(photo.count) bytes) at once, width \(width); \(workers) workers")
        print("round  mode          wall_ms       jobs   finals")
        var sharedWalls: [Double] = [], separateWalls: [Double] = []
        for round in 1...rounds {
            for shares in [true, false] {
                // A width of its own per round and mode: no cached result can answer it.
                let options = ResizeOptions(width: width + round * 2 + (shares ? 0 : 1))
                let before = try await probe.status().totals
                let start = ContinuousClock.now
                let finals = try await withThrowingTaskGroup(of: Bool.self) { group in
                    for client in connections {
                        group.addTask {
                            var request = ResizeRequest(image: photo, options: options, delivery: .final)
                            request.sharesResults = shares
                            return try await client.resize(request).width > 0
                        }
                    }
                    return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
                let wall = milliseconds(ContinuousClock.now - start)
                let after = try await probe.status().totals
                let jobs = (after.accepted - before.accepted) - (after.jobsShared - before.jobsShared)
                    - (after.cacheHits - before.cacheHits)
                (shares ? { sharedWalls.append(wall) } : { separateWalls.append(wall) })()
                let mode = shares ? "shared  " : "separate"
                print(String(format: "%-6d ", round) + mode + String(format: "  %10.1f %10d %8d", wall, Int(jobs), finals))
                guard finals == clients else { throw CLIError("only \(finals) of \(clients) clients got their final") }
            }
        }
        let shared = median(sharedWalls), separate = median(separateWalls)
        print(String(format: "burst median: shared %.1f ms, separate %.1f ms, ratio %.3f", shared, separate, shared / separate))

        // Cache hits: the first request fills the cache, the rest are answered from it.
        let client = connections[0]
        let options = ResizeOptions(width: width)
        _ = try await client.resize(ResizeRequest(image: photo, options: options, delivery: .final))
        var latencies: [Double] = []
        var misses = 0
        for _ in 0..<hits {
            let start = ContinuousClock.now
            let image = try await client.resize(ResizeRequest(image: photo, options: options, delivery: .final))
            latencies.append(milliseconds(ContinuousClock.now - start))
            if !image.cached { misses += 1 }
        }
        // What the client spends hashing the photo, part of every request above.
        var hashing: [Double] = []
        for _ in 0..<20 {
            let start = ContinuousClock.now
            _ = Digest.sha256(photo)
            hashing.append(milliseconds(ContinuousClock.now - start))
        }
        // The same photo without a digest: a miss each time, for scale.
        var full: [Double] = []
        for _ in 0..<5 {
            var request = ResizeRequest(image: photo, options: options, delivery: .final)
            request.sharesResults = false
            let start = ContinuousClock.now
            _ = try await client.resize(request)
            full.append(milliseconds(ContinuousClock.now - start))
        }
        latencies.sort()
        print(String(format: "cache hit over ipc (%d, %d not cached): p50 %.3f ms, p90 %.3f ms, p99 %.3f ms; "
                     + "uncached resize p50 %.1f ms; of each request, hashing the photo takes %.2f ms", hits, misses,
                     latencies[hits / 2], latencies[hits * 9 / 10], latencies[hits * 99 / 100], median(full),
                     median(hashing)))
        for connection in connections { await connection.close() }
    }

    private func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }
}
