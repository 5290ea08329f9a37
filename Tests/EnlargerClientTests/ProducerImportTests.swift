import Enlarger
import XCTest

// This file imports only `Enlarger`, as a producer does: it compiles only while the client
// library brings the request and result types (`ResizeOptions`, `Delivery`, `EncodedImage`,
// `ImagingError`) with it.
final class ProducerImportTests: XCTestCase {
    func testARequestIsBuiltWithTheClientLibraryAlone() throws {
        let options = ResizeOptions(width: 720, height: 588, fit: .cover, quality: 85, format: .jpeg)
        let request = ResizeRequest(id: "photo-1", image: [0xFF, 0xD8], options: options, delivery: .progressive)
        XCTAssertEqual(request.options.fit, .cover)
        XCTAssertEqual(request.delivery, .progressive)
        let image = EncodedImage(bytes: [1, 2, 3], width: 3, height: 1, format: .pnm)
        XCTAssertEqual(image.byteCount, 3)
        XCTAssertThrowsError(try ResizeOptions(width: 0).validate()) { error in
            XCTAssertEqual((error as? ImagingError)?.code, .invalidArgument)
        }
    }
}
