import Foundation
import XCTest

@testable import ZeroMQ
import TestSupport

final class CurveKeyFileTests: XCTestCase {
    private func mode(_ path: String) -> UInt32 {
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0, path)
        return UInt32(info.st_mode & 0o7777)
    }

    func testWrittenPairReadsBackWithAPrivateKeyFile() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        let pair = try CurveKeyPair.generate()

        let paths = try pair.write(name: "broker", directory: directory)
        XCTAssertEqual(paths.keyFile, directory + "/broker.key")
        XCTAssertEqual(paths.publicKeyFile, directory + "/broker.pub")
        XCTAssertEqual(mode(paths.keyFile), 0o600)
        XCTAssertEqual(mode(paths.publicKeyFile) & 0o600, 0o600)
        XCTAssertEqual(try CurveKeyPair(keyFile: paths.keyFile), pair)
        XCTAssertEqual(try CurvePublicKey(publicKeyFile: paths.publicKeyFile), pair.publicKey)
        XCTAssertEqual(try String(contentsOfFile: paths.publicKeyFile, encoding: .utf8), pair.publicKey.z85 + "\n")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory).sorted(), ["broker.key", "broker.pub"],
                       "no temporary file left behind")
    }

    func testExistingFilesAreOnlyReplacedWhenAsked() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        let first = try CurveKeyPair.generate()
        let second = try CurveKeyPair.generate()
        let paths = try first.write(name: "worker", directory: directory)

        XCTAssertThrowsError(try second.write(name: "worker", directory: directory)) {
            XCTAssertEqual($0 as? KeyFileError, KeyFileError(path: paths.keyFile, reason: .alreadyExists))
        }
        XCTAssertEqual(try CurveKeyPair(keyFile: paths.keyFile), first)

        // Only the .pub is there: still refused, and no .key is left behind.
        try FileManager.default.removeItem(atPath: paths.keyFile)
        XCTAssertThrowsError(try second.write(name: "worker", directory: directory)) {
            XCTAssertEqual($0 as? KeyFileError, KeyFileError(path: paths.publicKeyFile, reason: .alreadyExists))
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: paths.keyFile))

        _ = try second.write(name: "worker", directory: directory, replacing: true)
        XCTAssertEqual(try CurveKeyPair(keyFile: paths.keyFile), second)
        XCTAssertEqual(try CurvePublicKey(publicKeyFile: paths.publicKeyFile), second.publicKey)
        XCTAssertEqual(mode(paths.keyFile), 0o600)
    }

    func testKeyFileOthersCanAccessIsRefused() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        let paths = try CurveKeyPair.generate().write(name: "client", directory: directory)
        for loose: mode_t in [0o640, 0o604, 0o620, 0o660] {
            XCTAssertEqual(chmod(paths.keyFile, loose), 0)
            XCTAssertThrowsError(try CurveKeyPair(keyFile: paths.keyFile)) { error in
                XCTAssertEqual(error as? KeyFileError, KeyFileError(path: paths.keyFile, reason: .tooOpen(mode: UInt32(loose))))
                XCTAssertTrue("\(error)".contains("chmod 600"), "\(error)")
            }
        }
        XCTAssertEqual(chmod(paths.keyFile, 0o400), 0)
        XCTAssertNoThrow(try CurveKeyPair(keyFile: paths.keyFile), "read-only for the owner is fine")
        // A public key file is public.
        XCTAssertEqual(chmod(paths.publicKeyFile, 0o644), 0)
        XCTAssertNoThrow(try CurvePublicKey(publicKeyFile: paths.publicKeyFile))
    }

    func testMissingAndNonRegularFilesAreNamed() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        XCTAssertThrowsError(try CurveKeyPair(keyFile: directory + "/nope.key")) {
            XCTAssertEqual($0 as? KeyFileError, KeyFileError(path: directory + "/nope.key", reason: .missing))
        }
        XCTAssertThrowsError(try CurvePublicKey(publicKeyFile: directory)) {
            XCTAssertEqual($0 as? KeyFileError, KeyFileError(path: directory, reason: .notARegularFile))
        }
        XCTAssertThrowsError(try CurveKeyPair.generate().write(name: "x", directory: directory + "/absent")) {
            XCTAssertEqual(($0 as? KeyFileError)?.reason, .system(operation: "open", errno: ENOENT))
        }
    }

    func testGarbledKeyFilesAreRejectedWithTheLine() throws {
        let pair = try CurveKeyPair.generate()
        let other = try CurveKeyPair.generate()
        let p = pair.publicKey.z85
        let s = pair.secretKey.z85
        let cases: [(String, KeyFileError.Reason)] = [
            ("", .empty),
            ("# only a comment\n\n", .empty),
            ("public-key = \(p)\n", .missingField("secret-key")),
            ("secret-key = \(s)\n", .missingField("public-key")),
            ("public-key = \(p)\nsecret-key = \(s)\npublic-key = \(p)\n", .duplicateField("public-key", line: 3)),
            ("public-key = \(p)\nsecret = \(s)\n", .unknownField("secret = \(s)", line: 2)),
            ("\(p)\n\(s)\n", .unknownField(p, line: 1)),
            ("public-key = \(p)\nsecret-key = \(s.dropLast())\n", .badKey(.wrongTextLength(39), line: 2)),
            ("public-key = \(p.dropLast())~\nsecret-key = \(s)\n", .badKey(.invalidZ85(.invalidCharacter(offset: 39)), line: 1)),
            ("public-key = \(other.publicKey.z85)\nsecret-key = \(s)\n", .keysDoNotMatch),
        ]
        for (text, reason) in cases {
            XCTAssertThrowsError(try CurveKeyPair(keyFileText: text, path: "k.key"), text) {
                XCTAssertEqual($0 as? KeyFileError, KeyFileError(path: "k.key", reason: reason), text)
            }
        }
        // Comments, blank lines, CRLF and spacing are tolerated.
        let tolerant = "# made by hand\r\n\r\n  public-key=\(p)\r\n\tsecret-key =   \(s)  \r\n"
        XCTAssertEqual(try CurveKeyPair(keyFileText: tolerant, path: "k.key"), pair)
        XCTAssertEqual(try CurveKeyPair(keyFileText: pair.keyFileText, path: "k.key"), pair)
    }

    func testGarbledPublicKeyFilesAreRejected() throws {
        let key = try CurveKeyPair.generate().publicKey
        let cases: [(String, KeyFileError.Reason)] = [
            ("", .empty),
            ("\n# nothing\n", .empty),
            ("\(key.z85)\n\(key.z85)\n", .extraLine(line: 2)),
            ("public-key = \(key.z85)\n", .badKey(.wrongTextLength(53), line: 1)),
            ("\(key.z85.prefix(20)) \(key.z85.suffix(19))\n", .badKey(.invalidZ85(.invalidCharacter(offset: 20)), line: 1)),
        ]
        for (text, reason) in cases {
            XCTAssertThrowsError(try CurvePublicKey(publicKeyFileText: text, path: "k.pub"), text) {
                XCTAssertEqual($0 as? KeyFileError, KeyFileError(path: "k.pub", reason: reason), text)
            }
        }
        XCTAssertEqual(try CurvePublicKey(publicKeyFileText: "# ops laptop\n \(key.z85) \r\n", path: "k.pub"), key)

        let directory = try TemporaryEndpoints(self).directory.path
        let binary = directory + "/binary.pub"
        XCTAssertTrue(FileManager.default.createFile(atPath: binary, contents: Data([0xFF, 0xFE, 0x00])))
        XCTAssertThrowsError(try CurvePublicKey(publicKeyFile: binary)) {
            XCTAssertEqual($0 as? KeyFileError, KeyFileError(path: binary, reason: .notText))
        }
        let huge = directory + "/huge.pub"
        XCTAssertTrue(FileManager.default.createFile(atPath: huge, contents: Data(repeating: 0x41, count: 200_000)))
        XCTAssertThrowsError(try CurvePublicKey(publicKeyFile: huge)) {
            guard case .tooLarge = ($0 as? KeyFileError)?.reason else { return XCTFail("\($0)") }
        }
    }
}
