import Foundation
@testable import Mirroring
import XCTest

/// OUT can never be SRC, never contain it, and inside SRC only as a directory of its own.
final class MirrorLayoutTests: XCTestCase {
    private func refuses(_ source: String, _ out: String, _ why: String, file: StaticString = #filePath,
                         line: UInt = #line) {
        XCTAssertThrowsError(try MirrorLayout.resolve(source: source, out: out), why, file: file, line: line) { error in
            XCTAssertTrue(error is MirrorError, "\(error)", file: file, line: line)
        }
    }

    func testOutThatIsTheSourceIsRefusedHoweverItIsNamed() throws {
        let directories = try MirrorDirectories(self)
        try directories.write("photo.jpg", [1, 2, 3])
        let link = directories.root.appendingPathComponent("link").path
        XCTAssertEqual(symlink(directories.source, link), 0)
        refuses(directories.source, directories.source, "the same path")
        refuses(directories.source, directories.source + "/", "a trailing slash")
        refuses(directories.source, directories.source + "/.", "a dot")
        refuses(directories.source, directories.source + "/sub/..", "a dot-dot")
        refuses(link, directories.source, "SRC through a link")
        refuses(directories.source, link, "OUT through a link")
        let previous = FileManager.default.currentDirectoryPath
        XCTAssertTrue(FileManager.default.changeCurrentDirectoryPath(directories.source))
        defer { _ = FileManager.default.changeCurrentDirectoryPath(previous) }
        refuses(".", "./", "cd SRC && sync . --out ./")
        refuses(".", ".", "cd SRC && sync . --out .")
        XCTAssertEqual(MirrorDirectories.files(directories.source), ["photo.jpg": [1, 2, 3]], "nothing was written")
    }

    func testOutThatContainsTheSourceIsRefused() throws {
        let directories = try MirrorDirectories(self)
        refuses(directories.source, directories.root.path, "the parent")
        refuses(directories.source, "/", "the root")
        let link = directories.root.appendingPathComponent("up").path
        XCTAssertEqual(symlink(directories.root.path, link), 0)
        refuses(directories.source, link, "the parent through a link")
    }

    /// Inside SRC: a new, empty or sync-made directory is taken and left out of the scan by
    /// device and inode, even when reached through a link; one holding other files is refused.
    func testOutInsideTheSourceMustBeItsOwnAndIsNeverScanned() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2, 1])
        try directories.write("busy/keep.jpg", [4, 4])
        refuses(directories.source, directories.source + "/busy", "a directory of the user's images")
        let thumbs = directories.source + "/thumbs"
        do {
            let mirror = try Mirror.fake(directories, out: thumbs)
            XCTAssertTrue(mirror.layout.outInsideSource)
            for _ in 0..<3 { _ = try await mirror.fakeFullPass() }
            // A watch naming OUT, or a file in it (an attribute change made by `chmod -R`):
            // nothing there is a source.
            var events: [MirrorEvent] = []
            let watched = try await mirror.pass(paths: ["thumbs", "thumbs/a.jpg.png", "thumbs/busy"],
                                                FakeService.thumbnailer) { events.append($0) }
            XCTAssertEqual(watched.inserted + watched.changed + watched.removed + watched.skipped, 0, "\(events)")
        }
        // The same OUT through a link from outside SRC (once the first is done: one at a time).
        let link = directories.root.appendingPathComponent("thumbs-link").path
        XCTAssertEqual(symlink(thumbs, link), 0)
        let again = try Mirror.fake(directories, out: link)
        let (summary, _) = try await again.fakeFullPass()
        XCTAssertEqual(summary.inserted + summary.changed, 0, "no thumbnail of a thumbnail")
        XCTAssertEqual(Set(MirrorDirectories.files(thumbs).keys), ["a.jpg.png", "busy/keep.jpg.png"])
    }

    func testAMissingOutIsCreatedAndDotsAfterItAreRefused() throws {
        let directories = try MirrorDirectories(self)
        let layout = try MirrorLayout.resolve(source: directories.source, out: directories.root.path + "/a/b/c")
        XCTAssertTrue(MirrorLayout.isDirectory(layout.out))
        refuses(directories.source, directories.root.path + "/x/../src", "'..' through a missing directory")
    }
}
