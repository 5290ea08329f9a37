import Foundation
import Glibc
import Locking
import TestSupport
import XCTest

@testable import EnlargerWorker

/// A path under the files root that is not a regular file is refused before it is opened
/// for reading: a device's driver or a FIFO's writer never sees an open.
final class FilesRootTests: XCTestCase {
    func testAFIFOIsRefusedWithoutBeingOpened() throws {
        let endpoints = try TemporaryEndpoints(self)
        let root = endpoints.directory.appendingPathComponent("root", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let fifo = root.appendingPathComponent("pipe.jpg").path
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        // A writer's blocking open returns only once a reader opens the FIFO.
        let writerOpened = Lock(false)
        let writerDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let fd = Glibc.open(fifo, O_WRONLY)
            writerOpened.withLock { $0 = true }
            if fd >= 0 { close(fd) }
            writerDone.signal()
        }
        Thread.sleep(forTimeInterval: 0.1)
        let files = try FilesRoot(path: root.path)
        XCTAssertThrowsError(try files.open("pipe.jpg")) { error in
            XCTAssertEqual(error as? SourceFailure, .refused("pipe.jpg is not a regular file"))
        }
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertFalse(writerOpened.withLock { $0 }, "the FIFO was opened for reading")
        // Let the writer go.
        let reader = Glibc.open(fifo, O_RDONLY | O_NONBLOCK)
        writerDone.wait()
        close(reader)
    }

    /// A principal's file sources are read beneath its own directory of the root: a path or a
    /// link out of it (into another principal's directory) is refused, as is a directory that
    /// does not exist; the whole root stays open to a job with no scope.
    func testAScopeKeepsEachPrincipalInItsOwnDirectory() throws {
        let endpoints = try TemporaryEndpoints(self)
        let root = endpoints.directory.appendingPathComponent("root", isDirectory: true)
        for name in ["alice", "bob"] {
            try FileManager.default.createDirectory(at: root.appendingPathComponent(name), withIntermediateDirectories: true)
            try Data(name.utf8).write(to: root.appendingPathComponent("\(name)/\(name).jpg"))
        }
        XCTAssertEqual(symlink("../bob/bob.jpg", root.appendingPathComponent("alice/link.jpg").path), 0)
        XCTAssertEqual(symlink(root.appendingPathComponent("bob").path, root.appendingPathComponent("alice/bob").path), 0)
        let files = try FilesRoot(path: root.path)
        // Which file was opened: named by whose it is.
        func read(_ path: String, scope: String) throws -> String {
            let file = try files.open(path, scope: scope)
            for name in ["alice", "bob"] {
                var info = stat()
                if stat(root.appendingPathComponent("\(name)/\(name).jpg").path, &info) == 0,
                   UInt64(info.st_ino) == file.version.inode { return name }
            }
            return "another file"
        }
        XCTAssertEqual(try read("alice.jpg", scope: "alice"), "alice")
        XCTAssertEqual(try read("bob.jpg", scope: "bob"), "bob")
        XCTAssertEqual(try read("bob/bob.jpg", scope: ""), "bob", "no scope: the whole root")
        XCTAssertEqual(try read("alice/link.jpg", scope: ""), "bob", "a link within the root, read with no scope")
        for path in ["../bob/bob.jpg", "link.jpg", "bob/bob.jpg", "/etc/hostname"] {
            XCTAssertThrowsError(try read(path, scope: "alice"), path) { error in
                XCTAssertEqual(error as? SourceFailure, .refused("\(path) leads outside this principal's directory"), path)
            }
        }
        XCTAssertThrowsError(try read("carol.jpg", scope: "carol")) { error in
            XCTAssertEqual((error as? SourceFailure)?.kind, .refused)
        }
    }
}
