import XCTest
@testable import Imaging
import TestSupport

final class OrientationTests: XCTestCase {
    /// A 3×2 image whose pixel values are their stored index: 0 1 2 / 3 4 5.
    let stored = PixelBuffer(width: 3, height: 2, channels: 1, pixels: [0, 1, 2, 3, 4, 5])

    func testEachOrientationAgainstItsDefinition() throws {
        // Displayed rows for each EXIF orientation of the stored image above.
        let expected: [Orientation: [[UInt8]]] = [
            .up: [[0, 1, 2], [3, 4, 5]],
            .upMirrored: [[2, 1, 0], [5, 4, 3]],
            .down: [[5, 4, 3], [2, 1, 0]],
            .downMirrored: [[3, 4, 5], [0, 1, 2]],
            .leftMirrored: [[0, 3], [1, 4], [2, 5]],
            .right: [[3, 0], [4, 1], [5, 2]],
            .rightMirrored: [[5, 2], [4, 1], [3, 0]],
            .left: [[2, 5], [1, 4], [0, 3]],
        ]
        for orientation in Orientation.allCases {
            let out = try orientation.apply(to: stored)
            let rows = expected[orientation]!
            XCTAssertEqual(out.height, rows.count, "\(orientation)")
            XCTAssertEqual(out.width, rows[0].count, "\(orientation)")
            XCTAssertEqual(out.pixels, rows.flatMap { $0 }, "\(orientation)")
        }
    }

    /// `storedRect` must name exactly the stored pixels that `apply` shows inside a rectangle.
    func testStoredRectMatchesApply() throws {
        var generator = SeededGenerator(seed: 7)
        let w = 7, h = 5
        let image = PixelBuffer(width: w, height: h, channels: 1, pixels: (0..<(w * h)).map { UInt8($0) })
        for orientation in Orientation.allCases {
            let shown = try orientation.apply(to: image)
            let shownPixels = shown.pixels, imagePixels = image.pixels
            for _ in 0..<50 {
                let rw = Int.random(in: 1...shown.width, using: &generator)
                let rh = Int.random(in: 1...shown.height, using: &generator)
                let r = PixelRect(x: Int.random(in: 0...(shown.width - rw), using: &generator),
                                  y: Int.random(in: 0...(shown.height - rh), using: &generator), width: rw, height: rh)
                var fromApply = Set<UInt8>()
                for y in r.y..<(r.y + r.height) { for x in r.x..<(r.x + r.width) { fromApply.insert(shownPixels[y * shown.width + x]) } }
                let s = orientation.storedRect(r, storedWidth: w, storedHeight: h)
                var fromRect = Set<UInt8>()
                for y in s.y..<(s.y + s.height) { for x in s.x..<(s.x + s.width) { fromRect.insert(imagePixels[y * w + x]) } }
                XCTAssertEqual(fromApply, fromRect, "\(orientation) \(r)")
            }
        }
    }

    func testRGBChannelsMoveTogether() throws {
        let rgb = PixelBuffer(width: 2, height: 1, channels: 3, pixels: [1, 2, 3, 4, 5, 6])
        XCTAssertEqual(try Orientation.upMirrored.apply(to: rgb).pixels, [4, 5, 6, 1, 2, 3])
        XCTAssertEqual(try Orientation.right.apply(to: rgb).pixels, [1, 2, 3, 4, 5, 6])
        XCTAssertEqual(try Orientation.right.apply(to: rgb).height, 2)
    }
}
