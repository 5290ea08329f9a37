import Foundation
import Imaging

/// The shared JPEG corpus beside the repository (`../shared/corpus`), or `ENLARGER_CORPUS`.
enum Corpus {
    static let root: URL = {
        if let path = ProcessInfo.processInfo.environment["ENLARGER_CORPUS"] { return URL(fileURLWithPath: path) }
        return URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("shared/corpus")
    }()

    struct Entry {
        var file: String
        var width: Int?
        var height: Int?
        var colour: String
        var progressive: Bool
        var orientation: String
        var notes: String
        var url: URL
    }

    static func manifest(_ set: String) -> [Entry] {
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

    static func bytes(_ set: String, _ file: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent(set).appendingPathComponent(file)))
    }
}
