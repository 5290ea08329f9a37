import Foundation
@testable import Mirroring
import TestSupport
import XCTest

/// A tree mutated at random (creates, rewrites with the modification time put back, renames,
/// deletes, names that differ only in extension, empty files, links, failing and skipped
/// files) and mirrored by passes that are killed at random steps — between any two of the
/// record's writes, file creations, renames and deletions, and with the record's last line
/// cut in half. After each settled pass OUT holds exactly one correct thumbnail per source
/// that gets one, the user's own files untouched, and nothing else; no source byte changes.
///
/// Replay a failure with `ENLARGER_SEED=<seed>`; `ENLARGER_MIRROR_SEEDS=N` runs more seeds.
final class MirrorRandomizedTests: XCTestCase {
    private static let names = [
        "IMG_0001.jpg", "IMG_0001.HEIC", "IMG_0001.png", "x.JPG", "x.jpg", "noext", "noext.jpg", "a b.jpg", "é.png",
        "d/one.jpg", "d/two.jpg", "d/e/three.webp", "f/one.jpg", "new\nline.jpg",
    ]

    struct Figures {
        var seeds = 0, rounds = 0, operations = 0, passes = 0, crashes = 0, tornLines = 0, planted = 0
    }

    func testRandomTreesAndCrashesLeaveExactlyTheRightThumbnails() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64] = environment["ENLARGER_SEED"].flatMap(UInt64.init).map { [$0] }
            ?? Array(1...UInt64(environment["ENLARGER_MIRROR_SEEDS"].flatMap(Int.init) ?? 24))
        var figures = Figures()
        for seed in seeds {
            try await run(seed: seed, figures: &figures)
            figures.seeds += 1
        }
        print("mirror randomised: \(figures.seeds) seeds, \(figures.rounds) rounds, \(figures.operations) tree "
              + "operations, \(figures.passes) passes, \(figures.crashes) crashes injected, \(figures.tornLines) torn record lines, "
              + "\(figures.planted) user files put where a killed write was going")
        XCTAssertGreaterThan(figures.crashes, figures.seeds, "crashes were injected")
        XCTAssertGreaterThan(figures.planted, 0, "user files were put in the place of killed writes")
    }

    private func run(seed: UInt64, figures: inout Figures) async throws {
        var random = SeededGenerator(seed: seed)
        let directories = try MirrorDirectories(self)
        let source = directories.source, out = directories.out
        // The user's own files in OUT, one at the name a source's thumbnail would have.
        var foreign: [String: [UInt8]] = ["README.txt": Array("mine".utf8), "keep/IMG_0001.png.webp": [7, 7]]
        for (name, bytes) in foreign { try directories.write(name, bytes, in: out) }
        var model: [String: [UInt8]] = [:]  // regular files in SRC
        var links = Set<String>()
        var touched = Set<String>()
        func describe() -> String { "seed \(seed): replay with ENLARGER_SEED=\(seed)" }

        func content() -> [UInt8] {
            switch Int.random(in: 0..<10, using: &random) {
            case 0: return []
            case 1: return Array("TEXT notes".utf8)
            case 2: return Array("FAIL broken".utf8)
            default: return (0..<Int.random(in: 1...6, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            }
        }
        func mutate() throws {
            let name = Self.names.randomElement(using: &random)!
            let path = source + "/" + name
            touched.insert(name)
            switch Int.random(in: 0..<7, using: &random) {
            case 0, 1:  // create or rewrite
                if links.remove(name) != nil { unlink(path) }
                let bytes = content()
                try directories.write(name, bytes)
                model[name] = bytes
            case 2:  // same size, new bytes, modification time put back
                guard var bytes = model[name], !bytes.isEmpty else { return }
                var before = stat()
                guard stat(path, &before) == 0 else { return }
                bytes[0] ^= 0x5A
                try directories.write(name, bytes)
                var times = [before.st_atim, before.st_mtim]
                utimensat(AT_FDCWD, path, &times, 0)
                model[name] = bytes
            case 3:  // rename onto another name
                guard let bytes = model[name] else { return }
                let target = Self.names.randomElement(using: &random)!
                guard target != name else { return }
                touched.insert(target)
                try FileManager.default.createDirectory(atPath: ((source + "/" + target) as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
                if links.remove(target) != nil { unlink(source + "/" + target) }
                guard rename(path, source + "/" + target) == 0 else { return }
                model[name] = nil
                model[target] = bytes
            case 4, 5:  // delete
                unlink(path)
                model[name] = nil
                links.remove(name)
            default:  // a symbolic link
                guard model[name] == nil, !links.contains(name) else { return }
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
                if symlink(source + "/x.jpg", path) == 0 { links.insert(name) }
            }
            figures.operations += 1
        }
        func check(_ when: String) throws {
            var expected = foreign
            for (path, bytes) in model {
                if let (output, thumbnail) = FakeService.expected(path, bytes), foreign[output] == nil {
                    expected[output] = thumbnail
                }
            }
            let actual = MirrorDirectories.files(out)
            XCTAssertEqual(Set(actual.keys), Set(expected.keys), "\(describe()), \(when): the files in OUT")
            for (output, bytes) in expected where actual[output] != bytes {
                XCTFail("\(describe()), \(when): \(output) holds the wrong bytes")
            }
            var sources = MirrorDirectories.files(source)
            for link in links { sources[link] = nil }
            XCTAssertEqual(sources, model, "\(describe()), \(when): a source file changed")
        }

        let layout = try MirrorLayout.resolve(source: source, out: out)
        for round in 0..<10 {
            figures.rounds += 1
            for _ in 0..<Int.random(in: 1...6, using: &random) { try mutate() }
            // A pass that may be killed at any step, then a pass that settles.
            let crashAt = Bool.random(using: &random) ? Int.random(in: 0..<30, using: &random) : nil
            let incremental = Bool.random(using: &random)
            do {
                let faults = crashAt.map { FaultSchedule(crashAfter: $0) }
                let mirror = try Mirror(layout: layout, spec: "w=32", maxBytes: 1 << 20, inFlight: 3, adopt: false,
                                        faults: faults)
                figures.passes += 1
                if incremental {
                    _ = try await mirror.pass(paths: touched, FakeService.thumbnailer) { _ in }
                } else {
                    _ = try await mirror.fakeFullPass()
                }
                try check("round \(round), after an uninterrupted pass")
            } catch is MirrorCrash {
                figures.crashes += 1
                if Bool.random(using: &random) {
                    // Killed in the middle of writing a line.
                    let record = FileHandle(forWritingAtPath: out + "/" + MirrorRecord.fileName)
                    record?.seekToEndOfFile()
                    record?.write(Data("{\"set\":\"IMG_0001.jpg\",\"outp".utf8))
                    try record?.close()
                    figures.tornLines += 1
                }
                if Bool.random(using: &random) {
                    // The user puts a file where a killed write was going: it is theirs.
                    for output in Self.pendingOutputs(out) {
                        var info = stat()
                        guard lstat(out + "/" + output, &info) != 0 else { continue }
                        let bytes = Array("the user's \(output)".utf8)
                        try directories.write(output, bytes, in: out)
                        foreign[output] = bytes
                        figures.planted += 1
                    }
                }
            }
            touched.removeAll()
            let settle = try Mirror(layout: layout, spec: "w=32", maxBytes: 1 << 20, inFlight: 3, adopt: false, faults: nil)
            let (summary, _) = try await settle.fakeFullPass()
            figures.passes += 1
            XCTAssertEqual(summary.foreign, foreign.count, "\(describe()), round \(round): foreign files listed")
            try check("round \(round), settled")
        }
    }

    /// The outputs of the writes OUT's record has pending (begun, not finished).
    private static func pendingOutputs(_ out: String) -> [String] {
        guard let data = FileManager.default.contents(atPath: out + "/" + MirrorRecord.fileName) else { return [] }
        var outputs: [String: String] = [:]
        for line in data.split(separator: UInt8(ascii: "\n")) {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else { continue }
            if let source = object["pending"] as? String { outputs[source] = object["output"] as? String }
            if let source = (object["set"] ?? object["remove"]) as? String { outputs[source] = nil }
        }
        return outputs.values.sorted()
    }
}
