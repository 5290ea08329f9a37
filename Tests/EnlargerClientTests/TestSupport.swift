import Foundation
import XCTest

/// A private directory per test for `ipc://` socket files, removed when the test ends.
final class TemporaryEndpoints {
    let directory: URL

    init(_ test: XCTestCase) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-client-tests-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let directory = directory
        test.addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
    }

    func ipc(_ name: String) -> String {
        "ipc://\(directory.path)/\(name).sock"
    }
}

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Polls `condition` until it holds; throws after `timeout`.
func waitUntil(_ what: String, timeout: Duration = .seconds(5), _ condition: () throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw TimedOut(what: what) }
        try await Task.sleep(for: .milliseconds(2))
    }
}

/// A small deterministic generator, so a failing seed can be replayed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
