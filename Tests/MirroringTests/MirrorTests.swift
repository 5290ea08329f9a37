import Foundation
@testable import Mirroring
import XCTest

final class MirrorTests: XCTestCase {
    /// Names that would once have met (`IMG_1.jpg` + `IMG_1.HEIC`, `x.JPG` + `x.jpg`, `noext`
    /// + `noext.jpg`) each get a thumbnail; removing one keeps the others'.
    func testNamesThatDifferOnlyInExtensionNeverShareAThumbnail() async throws {
        let directories = try MirrorDirectories(self)
        let names = ["IMG_1.jpg", "IMG_1.HEIC", "IMG_1.png", "x.JPG", "x.jpg", "noext", "noext.jpg"]
        for (index, name) in names.enumerated() { try directories.write(name, [UInt8(2 * index), 9]) }
        let mirror = try Mirror.fake(directories)
        let (first, _) = try await mirror.fakeFullPass()
        XCTAssertEqual(first.inserted, names.count)
        XCTAssertEqual(Set(MirrorDirectories.files(directories.out).keys), Set(names.map { $0 + ".png" }))
        try FileManager.default.removeItem(atPath: directories.source + "/IMG_1.jpg")
        try FileManager.default.removeItem(atPath: directories.source + "/noext")
        let (second, _) = try await mirror.fakeFullPass()
        XCTAssertEqual(second.removed, 2)
        XCTAssertEqual(Set(MirrorDirectories.files(directories.out).keys),
                       Set(["IMG_1.HEIC", "IMG_1.png", "x.JPG", "x.jpg", "noext.jpg"].map { $0 + ".png" }))
    }

    /// A file in OUT that sync did not write is never overwritten nor deleted; it is listed.
    /// `adopt` replaces one at a thumbnail's name.
    func testForeignFilesAreLeftAloneAndListed() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        try directories.write("b.jpg", [4])
        try directories.write("a.jpg.png", Array("the user's own file".utf8), in: directories.out)
        try directories.write("notes/todo.txt", Array("keep".utf8), in: directories.out)
        let (summary, events) = try await Mirror.fake(directories).fakeFullPass()
        XCTAssertEqual(summary.failures, ["OUTPUT_EXISTS": 1])
        XCTAssertEqual(summary.inserted, 1)
        XCTAssertEqual(summary.foreign, 2)
        XCTAssertTrue(events.contains(.foreign(output: "notes/todo.txt")), "\(events)")
        let files = MirrorDirectories.files(directories.out)
        XCTAssertEqual(files["a.jpg.png"], Array("the user's own file".utf8))
        XCTAssertEqual(files["notes/todo.txt"], Array("keep".utf8))
        // The source going away does not make its name ours.
        try FileManager.default.removeItem(atPath: directories.source + "/a.jpg")
        _ = try await Mirror.fake(directories).fakeFullPass()
        XCTAssertEqual(MirrorDirectories.files(directories.out)["a.jpg.png"], Array("the user's own file".utf8))
        try directories.write("a.jpg", [2])
        let (adopted, _) = try await Mirror.fake(directories, adopt: true).fakeFullPass()
        XCTAssertEqual(adopted.inserted, 1)
        XCTAssertEqual(MirrorDirectories.files(directories.out)["a.jpg.png"], FakeService.thumbnail([2]))
    }

    /// A pass that cannot make a thumbnail again for a reason of the service's (the broker down
    /// or overloaded, a worker lost, a deadline) or of a read that may work later keeps the
    /// earlier thumbnail and its record: the next pass makes it. Only a source that is itself
    /// no image any more (broken, gone) loses its thumbnail.
    func testOnlyAFailureOfTheSourceItselfRemovesItsThumbnail() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        try directories.write("b.jpg", [4])
        _ = try await Mirror.fake(directories).fakeFullPass()
        let before = MirrorDirectories.files(directories.out)
        XCTAssertEqual(before.count, 2)
        // Other options: every thumbnail is to be made again, and the service fails.
        for code in ["BROKER_UNREACHABLE", "BROKER_LOST", "OVERLOADED", "WORKER_LOST", "DEADLINE_EXCEEDED", "UNREADABLE"] {
            var events: [MirrorEvent] = []
            let summary = try await Mirror.fake(directories, spec: "w=64").fullPass({ _, _ in
                .failed(code: code, message: "simulated")
            }) { events.append($0) }
            XCTAssertEqual(summary.failed, 2, code)
            XCTAssertEqual(summary.removed, 0, code)
            XCTAssertFalse(events.contains { if case .removed = $0 { true } else { false } }, code)
            XCTAssertEqual(MirrorDirectories.files(directories.out), before, code)
        }
        // The service back: both are made for the new options, over the kept ones.
        let (made, _) = try await Mirror.fake(directories, spec: "w=64").fakeFullPass()
        XCTAssertEqual(made.changed, 2)
        XCTAssertEqual(made.failed, 0)
        // A source broken since: its thumbnail goes, the other stays.
        try directories.write("a.jpg", Array("FAIL".utf8))
        let (broken, _) = try await Mirror.fake(directories, spec: "w=64").fakeFullPass()
        XCTAssertEqual(broken.removed, 1)
        XCTAssertEqual(broken.failures, ["CORRUPT": 1])
        XCTAssertEqual(Set(MirrorDirectories.files(directories.out).keys), ["b.jpg.png"])
    }

    /// Two syncs writing to one OUT at once (a cron job and a `--watch`) would take each other's
    /// writes under way for a crash's and undo them: the second is refused while the first
    /// holds OUT, and may go once it is done.
    func testOneSyncAtATimeWritesToAnOut() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        var first: Mirror? = try Mirror.fake(directories)
        XCTAssertThrowsError(try Mirror.fake(directories)) { error in
            XCTAssert("\(error)".contains("another sync is writing to"), "\(error)")
        }
        _ = try await first!.fakeFullPass()
        first = nil
        let (second, _) = try await Mirror.fake(directories).fakeFullPass()
        XCTAssertEqual(second.unchanged, 1)
    }

    /// A directory sync may not list, or an entry it may not look at, hides what is below it:
    /// those sources' thumbnails are kept, not taken for gone (and the pass says it skipped
    /// them). Made by hand: as root, permissions cannot make such a directory here.
    func testWhatCannotBeReadIsNotTakenForGone() {
        var tree = MirrorTree()
        tree.unreadable = ["2019", "2020/x.jpg"]
        let recorded = ["2019/a.jpg", "2019/deep/b.jpg", "2019.jpg", "2020/x.jpg", "2020/y.jpg", "top.jpg"]
        XCTAssertEqual(tree.gone(recorded).sorted(), ["2019.jpg", "2020/y.jpg", "top.jpg"])
        XCTAssertTrue(tree.hides("2019/deep/b.jpg"))
        XCTAssertFalse(tree.hides("2019x/a.jpg"))
    }

    /// A file the user puts where sync wrote a thumbnail (a copy over it, or a new file in its
    /// place) is theirs from then on: never replaced when its source changes, never deleted
    /// when its source goes; it is listed as foreign, and the source fails OUTPUT_EXISTS until
    /// it is moved (or `--adopt`).
    func testAFileTheUserPutsInAThumbnailsPlaceIsTheirs() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        try directories.write("b.jpg", [4])
        _ = try await Mirror.fake(directories).fakeFullPass()
        // Over a.jpg's thumbnail (the same inode, written anew); in place of b.jpg's (a new file).
        try Data("my own a".utf8).write(to: URL(fileURLWithPath: directories.out + "/a.jpg.png"))
        XCTAssertEqual(unlink(directories.out + "/b.jpg.png"), 0)
        try directories.write("b.jpg.png", Array("my own b".utf8), in: directories.out)
        // a.jpg changes, b.jpg goes.
        try directories.write("a.jpg", [6])
        try FileManager.default.removeItem(atPath: directories.source + "/b.jpg")
        let (summary, events) = try await Mirror.fake(directories).fakeFullPass()
        XCTAssertEqual(summary.failures, ["OUTPUT_EXISTS": 1], "\(events)")
        XCTAssertEqual(summary.removed, 0, "\(events)")
        XCTAssertEqual(summary.foreign, 2, "\(events)")
        let files = MirrorDirectories.files(directories.out)
        XCTAssertEqual(files["a.jpg.png"], Array("my own a".utf8))
        XCTAssertEqual(files["b.jpg.png"], Array("my own b".utf8))
        // Moved away, a.jpg's thumbnail is made again.
        XCTAssertEqual(unlink(directories.out + "/a.jpg.png"), 0)
        let (again, _) = try await Mirror.fake(directories).fakeFullPass()
        XCTAssertEqual(again.inserted, 1)
        XCTAssertEqual(MirrorDirectories.files(directories.out)["a.jpg.png"], FakeService.thumbnail([6]))
    }

    /// A pass killed at any step of a write, then OUT changed by the user before the next:
    /// a file put where the thumbnail would go, or OUT's directory moved away and linked back.
    /// What the crashed write produced is undone only when it is found, unchanged, at its own
    /// place in OUT; the user's file is kept (the source fails OUTPUT_EXISTS) and nothing is
    /// deleted through the link.
    func testACrashedWriteUndoesOnlyWhatItMade() async throws {
        var crashes: [String] = []
        crashPoints: for crashAfter in 0..<40 {
            for linkTheDirectory in [false, true] {
                let directories = try MirrorDirectories(self)
                try directories.write("d/a.jpg", [2])
                let layout = try MirrorLayout.resolve(source: directories.source, out: directories.out)
                let step: String
                do {
                    let mirror = try Mirror(layout: layout, spec: "w=32", maxBytes: 1 << 20, inFlight: 1, adopt: false,
                                            faults: FaultSchedule(crashAfter: crashAfter))
                    _ = try await mirror.fakeFullPass()
                    break crashPoints  // past the last step
                } catch let crash as MirrorCrash {
                    step = crash.step
                }
                if !linkTheDirectory { crashes.append(step) }
                let thumbnail = directories.out + "/d/a.jpg.png"
                let made = FileManager.default.fileExists(atPath: thumbnail)
                if linkTheDirectory {
                    guard FileManager.default.fileExists(atPath: directories.out + "/d") else { continue }
                    let moved = directories.root.appendingPathComponent("moved").path
                    XCTAssertEqual(rename(directories.out + "/d", moved), 0)
                    XCTAssertEqual(symlink(moved, directories.out + "/d"), 0)
                    let before = MirrorDirectories.files(moved)
                    let (summary, events) = try await Mirror.fake(directories).fakeFullPass()
                    XCTAssertEqual(MirrorDirectories.files(moved), before, "after \(step): \(events)")
                    // Made again (refused: OUT's directory is a link now), or done before the crash.
                    XCTAssertEqual(summary.failures["WRITE_FAILED", default: 0] + summary.unchanged, 1,
                                   "after \(step): \(events)")
                } else if made {
                    // The rename happened: a thumbnail of sync's, made again or kept.
                    let (summary, events) = try await Mirror.fake(directories).fakeFullPass()
                    XCTAssertEqual(summary.failures, [:], "after \(step): \(events)")
                    XCTAssertEqual(MirrorDirectories.files(directories.out)["d/a.jpg.png"], FakeService.thumbnail([2]))
                } else {
                    try directories.write("d/a.jpg.png", Array("mine".utf8), in: directories.out)
                    let (summary, events) = try await Mirror.fake(directories).fakeFullPass()
                    XCTAssertEqual(summary.failures, ["OUTPUT_EXISTS": 1], "after \(step): \(events)")
                    XCTAssertEqual(MirrorDirectories.files(directories.out)["d/a.jpg.png"], Array("mine".utf8),
                                   "after \(step)")
                }
            }
        }
        for step in ["pending recorded", "temporary created", "temporary written", "written recorded", "renamed"] {
            XCTAssertTrue(crashes.contains(step), "a crash after \(step): \(crashes)")
        }
    }

    /// OUT's record names the directory it mirrors: a sync of another directory into it (SRC
    /// mistyped, an empty mount point) is refused, rather than deleting every thumbnail as
    /// those of deleted files; `--adopt` makes it the other's mirror. A renamed SRC is the same.
    func testAnOutMirrorsOneSource() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        _ = try await Mirror.fake(directories).fakeFullPass()
        let other = directories.root.appendingPathComponent("other").path
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        try Data([4]).write(to: URL(fileURLWithPath: other + "/b.jpg"))
        XCTAssertThrowsError(try Mirror(source: other, out: directories.out, spec: "w=32", maxBytes: 1 << 20, inFlight: 4)) {
            XCTAssert("\($0)".contains("mirrors \(directories.source), not \(other)"), "\($0)")
        }
        XCTAssertEqual(Set(MirrorDirectories.files(directories.out).keys), ["a.jpg.png"])
        // Renamed, SRC is still the directory the record names.
        let renamed = directories.root.appendingPathComponent("renamed").path
        XCTAssertEqual(rename(directories.source, renamed), 0)
        do {
            let moved = try Mirror(source: renamed, out: directories.out, spec: "w=32", maxBytes: 1 << 20, inFlight: 4)
            let (unchanged, _) = try await moved.fakeFullPass()
            XCTAssertEqual(unchanged.unchanged, 1)
        }
        XCTAssertEqual(rename(renamed, directories.source), 0)
        // Adopted by the other directory: its thumbnails, and a.jpg's gone.
        let adopted = try Mirror(source: other, out: directories.out, spec: "w=32", maxBytes: 1 << 20, inFlight: 4,
                                 adopt: true)
        let (summary, _) = try await adopted.fakeFullPass()
        XCTAssertEqual(summary.inserted, 1)
        XCTAssertEqual(summary.removed, 1)
        XCTAssertEqual(Set(MirrorDirectories.files(directories.out).keys), ["b.jpg.png"])
    }

    /// A rewrite of the same size that puts the modification time back (`exiftool -P`) is a
    /// change: the ctime says so.
    func testARewriteWithTheSameSizeAndMtimeIsSeen() async throws {
        let directories = try MirrorDirectories(self)
        let path = directories.source + "/a.jpg"
        try directories.write("a.jpg", [2, 1, 1])
        var before = stat()
        XCTAssertEqual(stat(path, &before), 0)
        let mirror = try Mirror.fake(directories)
        _ = try await mirror.fakeFullPass()
        usleep(20_000)
        try Data([2, 6, 1]).write(to: URL(fileURLWithPath: path))
        var times = [before.st_atim, before.st_mtim]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0)
        var after = stat()
        XCTAssertEqual(stat(path, &after), 0)
        XCTAssertEqual(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec)
        XCTAssertEqual(after.st_size, before.st_size)
        let (summary, _) = try await mirror.fakeFullPass()
        XCTAssertEqual(summary.changed, 1)
        XCTAssertEqual(MirrorDirectories.files(directories.out)["a.jpg.png"], FakeService.thumbnail([2, 6, 1]))
    }

    /// Empty files, symbolic links, FIFOs and files that are not images are reported as
    /// skipped, with the reason, and are not failures; a thumbnail made before is removed.
    func testEmptyFilesLinksAndOtherKindsAreSkippedWithAReason() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        try directories.write("empty.jpg", [])
        try directories.write("notes.txt", Array("TEXT file".utf8))
        XCTAssertEqual(symlink(directories.source + "/a.jpg", directories.source + "/link.jpg"), 0)
        XCTAssertEqual(mkfifo(directories.source + "/fifo.jpg", 0o600), 0)
        let mirror = try Mirror.fake(directories)
        let (summary, events) = try await mirror.fakeFullPass()
        XCTAssertEqual(summary.failed, 0)
        XCTAssertEqual(summary.inserted, 1)
        XCTAssertEqual(summary.skipped, 4)
        XCTAssertTrue(events.contains(.skipped(path: "empty.jpg", reason: "empty file")), "\(events)")
        XCTAssertTrue(events.contains(.skipped(path: "link.jpg", reason: "symbolic link: not followed")), "\(events)")
        XCTAssertTrue(events.contains(.skipped(path: "notes.txt", reason: "not an image")), "\(events)")
        // A file that had a thumbnail and is now empty loses it.
        try directories.write("a.jpg", [])
        let (second, _) = try await mirror.fakeFullPass()
        XCTAssertEqual(second.removed, 1)
        XCTAssertEqual(MirrorDirectories.files(directories.out), [:])
    }

    /// Other options: every thumbnail is made again, under its new name; the old ones go.
    func testOtherOptionsRedoEverything() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        try directories.write("d/b.jpg", [3])
        _ = try await Mirror.fake(directories, spec: "w=32").fakeFullPass()
        let (summary, _) = try await Mirror.fake(directories, spec: "w=64").fakeFullPass()
        XCTAssertEqual(summary.changed, 2)
        let (same, _) = try await Mirror.fake(directories, spec: "w=64").fakeFullPass()
        XCTAssertEqual(same.unchanged, 2)
    }

    /// The first version's manifest is read once: its thumbnails are ours, renamed on the
    /// next pass; collided names are deleted only when no source needs them.
    func testTheFirstVersionsManifestIsTakenOver() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("IMG_1.jpg", [2])
        try directories.write("IMG_1.heic", [4])
        try directories.write("IMG_1.jpg", Array("old thumbnail".utf8), in: directories.out)
        let manifest = """
            {"format":1,"spec":"w=32","entries":{"IMG_1.jpg":{"output":"IMG_1.jpg"},"IMG_1.heic":{"output":"IMG_1.jpg"}}}
            """
        try directories.write(MirrorRecord.legacyFileName, Array(manifest.utf8), in: directories.out)
        let (summary, _) = try await Mirror.fake(directories).fakeFullPass()
        XCTAssertEqual(summary.changed, 2)
        XCTAssertEqual(summary.foreign, 0)
        XCTAssertEqual(MirrorDirectories.files(directories.out),
                       ["IMG_1.jpg.png": FakeService.thumbnail([2]), "IMG_1.heic.png": FakeService.thumbnail([4])])
    }

    /// A damaged record is not silently replaced: sync stops and says how to go on.
    func testADamagedRecordStopsTheMirror() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("a.jpg", [2])
        _ = try await Mirror.fake(directories).fakeFullPass()
        let path = directories.out + "/" + MirrorRecord.fileName
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text = "garbage\n" + text
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try Mirror.fake(directories)) { error in
            XCTAssertTrue("\(error)".contains("--adopt"), "\(error)")
        }
    }

    /// An incremental pass (what `--watch` runs) sees a directory renamed away and one renamed in.
    func testIncrementalPassesFollowDirectories() async throws {
        let directories = try MirrorDirectories(self)
        try directories.write("d/a.jpg", [2])
        try directories.write("d/e/b.jpg", [4])
        let mirror = try Mirror.fake(directories)
        _ = try await mirror.fakeFullPass()
        XCTAssertEqual(rename(directories.source + "/d", directories.source + "/f"), 0)
        let summary = try await mirror.pass(paths: ["d", "f"], FakeService.thumbnailer) { _ in }
        XCTAssertEqual(summary.removed, 2)
        XCTAssertEqual(summary.inserted, 2)
        XCTAssertEqual(Set(MirrorDirectories.files(directories.out).keys), ["f/a.jpg.png", "f/e/b.jpg.png"])
    }
}
