import Foundation
import XCTest

// Helpers shared by the test targets: private ipc endpoints, the shared JPEG corpus, and a
// seeded generator so that randomised tests replay from the seed they print.

/// A private directory per test for `ipc://` socket files, removed when the test ends.
public final class TemporaryEndpoints {
    public let directory: URL

    public init(_ test: XCTestCase) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-tests-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let directory = directory
        test.addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
    }

    public func ipc(_ name: String) -> String {
        "ipc://\(directory.path)/\(name).sock"
    }
}

/// The shared JPEG corpus beside the repository (`../shared/corpus`), or `ENLARGER_CORPUS`.
public enum Corpus {
    public static let root: URL = {
        if let path = ProcessInfo.processInfo.environment["ENLARGER_CORPUS"] { return URL(fileURLWithPath: path) }
        return URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("shared/corpus")
    }()

    public static func bytes(_ set: String, _ file: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent(set).appendingPathComponent(file)))
    }

    public static func good(_ file: String) throws -> [UInt8] { try bytes("good", file) }
    public static func bad(_ file: String) throws -> [UInt8] { try bytes("bad", file) }

    /// One row of a set's MANIFEST.tsv.
    public struct Entry: Sendable {
        public var file: String
        public var width: Int?
        public var height: Int?
        public var colour: String
        public var progressive: Bool
        public var orientation: String
        public var notes: String
        public var url: URL
    }

    public static func manifest(_ set: String) -> [Entry] {
        let dir = root.appendingPathComponent(set)
        guard let text = try? String(contentsOf: dir.appendingPathComponent("MANIFEST.tsv"), encoding: .utf8) else { return [] }
        var lines = text.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
        let header = lines.removeFirst()
        func column(_ name: String) -> Int { header.firstIndex(of: name)! }
        return lines.filter { $0.count == header.count }.map { row in
            Entry(file: row[column("file")], width: Int(row[column("width")]), height: Int(row[column("height")]),
                  colour: row[column("colour")], progressive: row[column("progressive")] == "y",
                  orientation: row[column("exif_orientation")], notes: row[column("notes")],
                  url: dir.appendingPathComponent(row[column("file")]))
        }
    }
}

/// Markdown as the README tests read it.
public enum Markdown {
    /// The contents of every fenced block opened with ```` ```language ````, in order.
    public static func fencedBlocks(_ markdown: String, language: String) -> [String] {
        var blocks: [String] = []
        var current: [Substring]?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```\(language)" {
                current = []
            } else if current != nil, line == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }
}

/// SplitMix64: deterministic, so a randomised test replays from its printed seed.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

public func milliseconds(_ d: Duration) -> Double {
    let (s, a) = d.components
    return Double(s) * 1e3 + Double(a) * 1e-15
}

/// The repository's own PNG, WebP, HEIC, AVIF, GIF and JPEG XL test
/// images (`Tests/ImagingTests/Images`,
/// made by scripts/make-test-images).
public enum SampleImages {
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("ImagingTests/Images")

    public static func bytes(_ file: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent(file)))
    }
}
