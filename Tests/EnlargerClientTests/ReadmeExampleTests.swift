import Foundation
import TestSupport
import XCTest

/// The README's Swift examples are the code of `ReadmeExamples.swift`, which the test build
/// compiles: each block (its imports and its leading comment aside) appears there line for
/// line, so an example that would not compile fails the build, and an edit to one without
/// the other fails here.
final class ReadmeExampleTests: XCTestCase {
    private static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    func testEverySwiftBlockOfTheReadmeIsCompiled() throws {
        let readme = try String(contentsOf: Self.repository.appendingPathComponent("README.md"), encoding: .utf8)
        let compiled = try String(contentsOf: Self.repository.appendingPathComponent("Tests/EnlargerClientTests/ReadmeExamples.swift"),
                                  encoding: .utf8)
        let compiledLines = Self.lines(compiled)
        let blocks = Markdown.fencedBlocks(readme, language: "swift")
        XCTAssertGreaterThanOrEqual(blocks.count, 3, "the README's Swift blocks were not found")
        for block in blocks {
            var lines = Self.lines(block)
            while let first = lines.first, first.hasPrefix("import ") || first.hasPrefix("// Package.swift:") {
                lines.removeFirst()
            }
            XCTAssertFalse(lines.isEmpty)
            let found = compiledLines.indices.contains { start in
                start + lines.count <= compiledLines.count && Array(compiledLines[start..<start + lines.count]) == lines
            }
            XCTAssert(found, "this README block is not in ReadmeExamples.swift, line for line:\n\(block)")
        }
    }

    /// Non-empty lines, trimmed (the compiled copy is indented inside functions).
    static func lines(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
