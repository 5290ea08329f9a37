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
        // `SIMDn<Int32>.init<A>(truncatingIfNeeded:)`, specialised (a definition, not the generic
        // one the standard library exports): the widening to 32 bits that feeds `pmaddwd`. The
        // byte-to-Int16 one of `SamplePairs` may be left out of line: measured (`enlarger resize`
        // of the six benchmark photos to 1900 px, PNM), a build where it was and one where it
        // was not took the same CPU (0.43 s), and forcing it inline made the pass slower.
        let outOfLine = symbols.split(separator: "\n").filter {
            $0.contains("FixedWidthIntegerRzrlE18truncatingIfNeeded") && $0.contains("SIMD") && $0.contains("Cs5Int32V_")
        }
        XCTAssertEqual(outOfLine, [], "lane conversions compiled out of line: the resampler runs at half speed")
    }
}
