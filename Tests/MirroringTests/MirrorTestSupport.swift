import Foundation
@testable import Mirroring
import XCTest

/// A thumbnailer with no service: the "thumbnail" of some bytes is a fixed function of them,
/// so a test can say exactly which file OUT must hold for each source. Bytes starting with
/// `TEXT` are skipped (not an image), `FAIL` fail; an even first byte gives a `png`, an odd
/// one a `webp`.
enum FakeService {
    static let thumbnailer: Thumbnailer = { _, bytes in
        if bytes.starts(with: Array("TEXT".utf8)) { return .skipped("not an image") }
        if bytes.starts(with: Array("FAIL".utf8)) { return .failed(code: "CORRUPT", message: "cannot be decoded") }
        return .made(bytes: thumbnail(bytes), fileExtension: fileExtension(bytes))
    }

    static func thumbnail(_ bytes: [UInt8]) -> [UInt8] {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return Array("thumbnail \(hash) of \(bytes.count) bytes".utf8)
    }

    static func fileExtension(_ bytes: [UInt8]) -> String { bytes[0] % 2 == 0 ? "png" : "webp" }

    /// What a source of these bytes must have in OUT: its name and bytes, or nothing.
    static func expected(_ path: String, _ bytes: [UInt8]) -> (String, [UInt8])? {
        guard !bytes.isEmpty, !bytes.starts(with: Array("TEXT".utf8)), !bytes.starts(with: Array("FAIL".utf8)) else {
            return nil
        }
        return (path + "." + fileExtension(bytes), thumbnail(bytes))
    }
}

/// A source and an output directory of its own per test, removed when it ends.
final class MirrorDirectories {
    let root: URL
    var source: String { root.appendingPathComponent("src").path }
    var out: String { root.appendingPathComponent("out").path }

    init(_ test: XCTestCase) throws {
        root = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-mirror-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(atPath: root.appendingPathComponent("src").path,
                                                withIntermediateDirectories: true)
        let root = root
        test.addTeardownBlock { try? FileManager.default.removeItem(at: root) }
    }

    func write(_ relative: String, _ bytes: [UInt8], in directory: String? = nil) throws {
        let path = (directory ?? source) + "/" + relative
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    /// Every regular file below `directory` (relative path → bytes), the mirror's record aside.
    static func files(_ directory: String) -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        guard let walker = FileManager.default.enumerator(atPath: directory) else { return files }
        while let relative = walker.nextObject() as? String {
            if relative.hasPrefix(MirrorRecord.fileName) { continue }
            var info = stat()
            guard lstat(directory + "/" + relative, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            files[relative] = [UInt8](FileManager.default.contents(atPath: directory + "/" + relative) ?? Data())
        }
        return files
    }
}

extension Mirror {
    /// A full pass with the fake service; the events as well as the summary.
    func fakeFullPass() async throws -> (MirrorSummary, [MirrorEvent]) {
        var events: [MirrorEvent] = []
        let summary = try await fullPass(FakeService.thumbnailer) { events.append($0) }
        return (summary, events)
    }

    static func fake(_ directories: MirrorDirectories, out: String? = nil, spec: String = "w=32",
                     adopt: Bool = false) throws -> Mirror {
        try Mirror(source: directories.source, out: out ?? directories.out, spec: spec, maxBytes: 1 << 20, inFlight: 4,
                   adopt: adopt)
    }
}
