import EnlargerProtocol
import Foundation
import XCTest

final class DigestTests: XCTestCase {
    private func hex(_ data: Data?) -> String? {
        data.map { $0.map { String(format: "%02x", $0) }.joined() }
    }

    /// FIPS 180-2's examples, the empty input, and an input of several megabytes given as a
    /// slice that does not start at zero.
    func testSHA256MatchesTheStandardsVectors() {
        XCTAssertEqual(hex(Digest.sha256(Data("abc".utf8))),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex(Digest.sha256(Data("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(hex(Digest.sha256(Data())),
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        XCTAssertEqual(hex(Digest.sha256(million)),
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        let framed = [UInt8](repeating: 0, count: 7) + million
        XCTAssertEqual(Digest.sha256(framed[7...]), Digest.sha256(million))
    }
}
