import XCTest

import ImageModel

/// The value types a resize is described with, on their own: no libjpeg.
final class ImageModelTests: XCTestCase {
    func testValidationNamesTheOffendingValue() {
        let cases: [(ResizeOptions, String)] = [
            (ResizeOptions(), "a target width or height is required"),
            (ResizeOptions(width: 0), "width 0 is out of range 1…16384"),
            (ResizeOptions(width: 10, height: 16385), "height 16385 is out of range 1…16384"),
            (ResizeOptions(width: 10, quality: 101), "quality 101 is out of range 1…100"),
        ]
        for (options, message) in cases {
            XCTAssertThrowsError(try options.validate()) { error in
                XCTAssertEqual(error as? ImagingError, ImagingError(.invalidArgument, message))
            }
        }
        XCTAssertNoThrow(try ResizeOptions(height: 16384, fit: .cover).validate())
    }

    func testEncodedImagesCompareByContentWhoeverHoldsTheBytes() {
        let owner = Owner([1, 2, 3])
        let borrowed = owner.image(width: 3, height: 1)
        XCTAssertEqual(borrowed, EncodedImage(bytes: [1, 2, 3], width: 3, height: 1, format: .pnm))
        XCTAssertNotEqual(borrowed, EncodedImage(bytes: [1, 2, 4], width: 3, height: 1, format: .pnm))
        XCTAssertNotEqual(borrowed, EncodedImage(bytes: [1, 2, 3], width: 3, height: 1, format: .jpeg))
        XCTAssertEqual(borrowed.byteCount, 3)
        XCTAssertEqual(borrowed.withUnsafeBytes { Array($0) }, [1, 2, 3])
    }

    func testABorrowedImageKeepsItsBytesAliveAsLongAsAnyCopy() {
        weak var released: Owner?
        var copy: EncodedImage?
        do {
            let owner = Owner([7, 8])
            released = owner
            copy = owner.image(width: 2, height: 1)
        }
        XCTAssertNotNil(released, "the image holds its owner")
        XCTAssertEqual(copy?.bytes, [7, 8])
        copy = nil
        XCTAssertNil(released, "and lets it go with the last copy")
    }
}

/// Memory that an encoder would own: allocated once, read-only after.
private final class Owner: @unchecked Sendable {
    let base: UnsafeMutableRawBufferPointer

    init(_ bytes: [UInt8]) {
        base = .allocate(byteCount: bytes.count, alignment: 1)
        base.copyBytes(from: bytes)
    }

    deinit { base.deallocate() }

    func image(width: Int, height: Int) -> EncodedImage {
        EncodedImage(bytes: UnsafeRawBufferPointer(base), keptAliveBy: self, width: width, height: height, format: .pnm)
    }
}
