import Foundation
import XCTest

/// A private directory per test for `ipc://` socket files, removed when the test ends.
final class TemporaryEndpoints {
    let directory: URL

    init(_ test: XCTestCase) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-worker-tests-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let directory = directory
        test.addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
    }

    func ipc(_ name: String) -> String {
        "ipc://\(directory.path)/\(name).sock"
    }
}

/// The shared JPEG corpus beside the repository (`../shared/corpus`), or `ENLARGER_CORPUS`.
enum Corpus {
    static let root: URL = {
        if let path = ProcessInfo.processInfo.environment["ENLARGER_CORPUS"] { return URL(fileURLWithPath: path) }
        return URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("shared/corpus")
    }()

    static func good(_ file: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent("good").appendingPathComponent(file)))
    }

    static func bad(_ file: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent("bad").appendingPathComponent(file)))
    }
}
