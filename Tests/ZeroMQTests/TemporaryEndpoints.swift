import Foundation
import XCTest

/// A private directory per test for `ipc://` socket files, removed when the test ends.
final class TemporaryEndpoints {
    let directory: URL

    init(_ test: XCTestCase) throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("zmq-tests-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let directory = directory
        test.addTeardownBlock { try? FileManager.default.removeItem(at: directory) }
    }

    func ipc(_ name: String) -> String {
        "ipc://\(directory.path)/\(name).sock"
    }
}
