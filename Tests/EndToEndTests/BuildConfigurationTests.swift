import Foundation
import XCTest

/// The binary the tests run is the one `scripts/run` serves (both are `scripts/build`'s, with
/// -enable-testing), so it must be as fast as a plain release build. The one place where
/// -enable-testing cost speed was the resampler's widening in `pairSums`, left out of line as a
/// specialised `SIMD8.init(truncatingIfNeeded:)` (a call and a scalar loop per eight lanes: the
/// resampler at half speed; see Sources/Imaging/SIMD+Truncating.swift). A plain release build
/// defines no such function; neither may this one.
final class BuildConfigurationTests: XCTestCase {
    func testNoLaneConversionIsLeftOutOfLineInTheServedBinary() throws {
        // scripts/setup installs binutils, so nm is there wherever the tests run.
        XCTAssert(FileManager.default.isExecutableFile(atPath: "/usr/bin/nm"), "nm is missing: run scripts/setup")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/nm")
        process.arguments = ["--defined-only", Cluster.enlargerBinary.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let symbols = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0)
        XCTAssert(symbols.contains("Imaging"), "no symbols read from \(Cluster.enlargerBinary.path)")
        // `SIMDn<>.init<A>(truncatingIfNeeded:)`, specialised (a definition, not the generic one
        // the standard library exports).
        let outOfLine = symbols.split(separator: "\n").filter {
            $0.contains("FixedWidthIntegerRzrlE18truncatingIfNeeded") && $0.contains("SIMD")
        }
        XCTAssertEqual(outOfLine, [], "lane conversions compiled out of line: the resampler runs at half speed")
    }
}
