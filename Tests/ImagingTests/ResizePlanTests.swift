import ImageModel
import XCTest
@testable import Imaging

final class ResizePlanTests: XCTestCase {
    struct Case {
        var source: (Int, Int)
        var options: ResizeOptions
        var output: (Int, Int)
        var region: PixelRect? = nil
        var line: UInt = #line
    }

    func testOutputBoxTable() {
        let cases: [Case] = [
            // inside
            Case(source: (4000, 3000), options: .init(width: 720, height: 588), output: (720, 540)),
            Case(source: (3000, 4000), options: .init(width: 720, height: 588), output: (441, 588)),
            Case(source: (4000, 3000), options: .init(width: 720), output: (720, 540)),
            Case(source: (4000, 3000), options: .init(height: 300), output: (400, 300)),
            Case(source: (100, 50), options: .init(width: 720, height: 588), output: (100, 50)),
            Case(source: (100, 50), options: .init(width: 720, height: 588, enlarge: true), output: (720, 360)),
            Case(source: (100, 50), options: .init(width: 400), output: (100, 50)),
            Case(source: (100, 50), options: .init(width: 400, enlarge: true), output: (400, 200)),
            // 1×N and N×1 never round an axis to 0 px
            Case(source: (1, 1000), options: .init(width: 100, height: 100), output: (1, 100)),
            Case(source: (1000, 1), options: .init(width: 100, height: 100), output: (100, 1)),
            Case(source: (1000, 1), options: .init(height: 1), output: (1000, 1)),
            Case(source: (1, 1000), options: .init(width: 1), output: (1, 1000)),
            Case(source: (13, 1), options: .init(width: 5), output: (5, 1)),
            Case(source: (1, 1), options: .init(width: 16384, height: 16384, enlarge: true), output: (16384, 16384)),
            // fill
            Case(source: (4000, 3000), options: .init(width: 720, height: 588, fit: .fill), output: (720, 588)),
            Case(source: (100, 50), options: .init(width: 720, height: 30, fit: .fill), output: (100, 30)),
            Case(source: (100, 50), options: .init(width: 720, height: 30, fit: .fill, enlarge: true), output: (720, 30)),
            Case(source: (4000, 3000), options: .init(width: 720, fit: .fill), output: (720, 540)),
            // cover: scale to cover, crop the centre
            Case(source: (4000, 3000), options: .init(width: 720, height: 588, fit: .cover), output: (720, 588),
                 region: PixelRect(x: 163, y: 0, width: 3673, height: 3000)),
            Case(source: (3000, 4000), options: .init(width: 300, height: 300, fit: .cover), output: (300, 300),
                 region: PixelRect(x: 0, y: 500, width: 3000, height: 3000)),
            Case(source: (100, 50), options: .init(width: 720, height: 588, fit: .cover), output: (100, 50),
                 region: PixelRect(x: 0, y: 0, width: 100, height: 50)),
            Case(source: (100, 50), options: .init(width: 80, height: 80, fit: .cover), output: (80, 50),
                 region: PixelRect(x: 10, y: 0, width: 80, height: 50)),
            Case(source: (1, 1000), options: .init(width: 10, height: 10, fit: .cover), output: (1, 10),
                 region: PixelRect(x: 0, y: 495, width: 1, height: 10)),
        ]
        for c in cases {
            let box = ResizePlan.outputBox(sourceWidth: c.source.0, sourceHeight: c.source.1, options: c.options)
            XCTAssertEqual(box.width, c.output.0, "width", line: c.line)
            XCTAssertEqual(box.height, c.output.1, "height", line: c.line)
            let region = c.region ?? PixelRect(x: 0, y: 0, width: c.source.0, height: c.source.1)
            XCTAssertEqual(box.region, region, "region", line: c.line)
        }
    }

    /// One axis given with `enlarge` on an extreme aspect ratio: the derived axis is capped too.
    func testDerivedAxisIsCapped() {
        XCTAssertThrowsError(try ResizePlan.make(sourceWidth: 1, sourceHeight: 8192, orientation: .up,
                                                 options: .init(width: 16384, enlarge: true))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .invalidArgument)
        }
        XCTAssertThrowsError(try ResizePlan.make(sourceWidth: 8192, sourceHeight: 1, orientation: .right,
                                                 options: .init(width: 16384, enlarge: true))) {
            XCTAssertEqual(($0 as? ImagingError)?.code, .invalidArgument)
        }
        XCTAssertNoThrow(try ResizePlan.make(sourceWidth: 1, sourceHeight: 8192, orientation: .up,
                                             options: .init(width: 2, enlarge: true)))
    }

    func testInvalidTargetsAreRefused() {
        let bad: [ResizeOptions] = [
            .init(), .init(width: 0), .init(height: 0), .init(width: -5), .init(width: 16385),
            .init(width: 10, height: 16385), .init(width: 10, quality: 0), .init(width: 10, quality: 101),
        ]
        for options in bad {
            XCTAssertThrowsError(try ResizePlan.make(sourceWidth: 100, sourceHeight: 100, orientation: .up, options: options)) {
                XCTAssertEqual(($0 as? ImagingError)?.code, .invalidArgument, "\(options)")
            }
        }
    }

    func testShrinkOnLoadLeavesHeadroom() {
        struct Row { var region: (Int, Int); var output: (Int, Int); var numerator: Int; var line: UInt = #line }
        let rows: [Row] = [
            Row(region: (2725, 2225), output: (720, 588), numerator: 8),
            Row(region: (2725, 2225), output: (680, 556), numerator: 4),
            Row(region: (4000, 6000), output: (480, 720), numerator: 2),
            Row(region: (4032, 3024), output: (588, 441), numerator: 4),
            Row(region: (4032, 3024), output: (252, 189), numerator: 1),
            Row(region: (9643, 10328), output: (100, 100), numerator: 1),
            Row(region: (1000, 1000), output: (1000, 1000), numerator: 8),
            Row(region: (600, 450), output: (300, 225), numerator: 8),
            Row(region: (1, 1000), output: (1, 100), numerator: 8),
        ]
        for row in rows {
            let n = ResizePlan.shrinkOnLoad(region: PixelRect(x: 0, y: 0, width: row.region.0, height: row.region.1),
                                            outputWidth: row.output.0, outputHeight: row.output.1,
                                            headroom: ResizePlan.defaultHeadroom)
            XCTAssertEqual(n, row.numerator, line: row.line)
            // Whatever was chosen, the decoded region is never smaller than the output.
            XCTAssertGreaterThanOrEqual(ResizePlan.scaledLength(row.region.0, numerator: n), row.output.0, line: row.line)
            XCTAssertGreaterThanOrEqual(ResizePlan.scaledLength(row.region.1, numerator: n), row.output.1, line: row.line)
        }
    }

    func testPlansInStoredOrientationForEveryOrientation() throws {
        for orientation in Orientation.allCases {
            for fit in Fit.allCases {
                let options = ResizeOptions(width: 300, height: 200, fit: fit)
                let plan = try ResizePlan.make(sourceWidth: 4032, sourceHeight: 3024, orientation: orientation, options: options)
                let (ow, oh) = orientation.orientedSize(width: 4032, height: 3024)
                let box = ResizePlan.outputBox(sourceWidth: ow, sourceHeight: oh, options: options)
                XCTAssertEqual(plan.outputWidth, box.width)
                XCTAssertEqual(plan.outputHeight, box.height)
                let stored = orientation.swapsAxes ? (box.height, box.width) : (box.width, box.height)
                XCTAssertEqual(plan.storedOutputWidth, stored.0, "\(orientation) \(fit)")
                XCTAssertEqual(plan.storedOutputHeight, stored.1, "\(orientation) \(fit)")
                XCTAssertGreaterThanOrEqual(plan.region.x, 0)
                XCTAssertGreaterThanOrEqual(plan.region.y, 0)
                XCTAssertLessThanOrEqual(plan.region.x + plan.region.width, 4032, "\(orientation) \(fit)")
                XCTAssertLessThanOrEqual(plan.region.y + plan.region.height, 3024, "\(orientation) \(fit)")
            }
        }
    }
}
