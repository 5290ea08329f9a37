import XCTest

@testable import ZeroMQ
import TestSupport

final class Z85Tests: XCTestCase {
    func testKnownVectorFromTheSpecification() throws {
        let bytes: [UInt8] = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]
        XCTAssertEqual(try Z85.encode(bytes), "HelloWorld")
        XCTAssertEqual(try Z85.decode("HelloWorld"), bytes)
    }

    func testRandomBytesRoundTrip() throws {
        let seed = UInt64.random(in: 0...UInt64.max)
        print("Z85 round trip seed \(seed)")
        var generator = SeededGenerator(seed: seed)
        for count in stride(from: 0, through: 64, by: 4) {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = try Z85.encode(bytes)
            XCTAssertEqual(text.utf8.count, count / 4 * 5)
            XCTAssertEqual(try Z85.decode(text), bytes, "seed \(seed), \(count) bytes")
        }
        XCTAssertEqual(try Z85.decode("%nSc0"), [0xFF, 0xFF, 0xFF, 0xFF], "the largest group")
    }

    func testBadInputIsRefusedWithTheReason() {
        XCTAssertThrowsError(try Z85.encode([1, 2, 3])) { XCTAssertEqual($0 as? Z85Error, .lengthNotMultipleOfFour(3)) }
        XCTAssertThrowsError(try Z85.decode("Hell")) { XCTAssertEqual($0 as? Z85Error, .lengthNotMultipleOfFive(4)) }
        XCTAssertThrowsError(try Z85.decode("Hel\"oWorld")) { XCTAssertEqual($0 as? Z85Error, .invalidCharacter(offset: 3)) }
        XCTAssertThrowsError(try Z85.decode("Hello Worl")) { XCTAssertEqual($0 as? Z85Error, .invalidCharacter(offset: 5)) }
        XCTAssertThrowsError(try Z85.decode("Hello\u{0}orld")) { XCTAssertEqual($0 as? Z85Error, .invalidCharacter(offset: 5)) }
        XCTAssertThrowsError(try Z85.decode("Helloé9999")) { XCTAssertEqual($0 as? Z85Error, .lengthNotMultipleOfFive(11)) }
        XCTAssertThrowsError(try Z85.decode("Hello#####")) { XCTAssertEqual($0 as? Z85Error, .groupOutOfRange(offset: 5)) }
    }

    func testCurveKeysCheckTheirSize() throws {
        XCTAssertThrowsError(try CurvePublicKey(bytes: [UInt8](repeating: 1, count: 31))) {
            XCTAssertEqual($0 as? CurveKeyError, .wrongByteCount(31))
        }
        let pair = try CurveKeyPair.generate()
        let text = pair.publicKey.z85
        XCTAssertEqual(text.count, 40)
        XCTAssertEqual(try CurvePublicKey(z85: text), pair.publicKey)
        XCTAssertEqual(try CurvePublicKey(bytes: pair.publicKey.bytes).z85, text)
        XCTAssertThrowsError(try CurvePublicKey(z85: String(text.dropLast()))) {
            XCTAssertEqual($0 as? CurveKeyError, .wrongTextLength(39))
        }
        XCTAssertThrowsError(try CurvePublicKey(z85: String(text.dropLast(5)) + "     ")) {
            XCTAssertEqual($0 as? CurveKeyError, .invalidZ85(.invalidCharacter(offset: 35)))
        }
    }

    func testGeneratedPairsAreDistinctAndConsistent() throws {
        let first = try CurveKeyPair.generate()
        let second = try CurveKeyPair.generate()
        XCTAssertNotEqual(first.publicKey, second.publicKey)
        XCTAssertNotEqual(first.secretKey, second.secretKey)
        XCTAssertEqual(try CurveKeyPair(publicKey: first.publicKey, secretKey: first.secretKey), first)
        XCTAssertThrowsError(try CurveKeyPair(publicKey: second.publicKey, secretKey: first.secretKey)) {
            XCTAssertEqual($0 as? CurveKeyError, .publicKeyDoesNotMatchSecretKey)
        }
        XCTAssertEqual(Set([first.publicKey, second.publicKey, first.publicKey]).count, 2)
    }

    func testSecretsStayOutOfDescriptions() throws {
        let pair = try CurveKeyPair.generate()
        let secret = pair.secretKey.z85
        var dumped = ""
        dump(pair.secretKey, to: &dumped)
        XCTAssertEqual(dumped.split(separator: "\n").count, 1, "no children (the bytes) in a dump: \(dumped)")
        for text in ["\(pair)", "\(pair.secretKey)", String(reflecting: pair.secretKey), dumped] where text.contains(secret) {
            XCTFail("secret key in \(text)")
        }
        XCTAssertTrue("\(pair)".contains(pair.publicKey.z85))
    }
}
