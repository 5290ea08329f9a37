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
}
