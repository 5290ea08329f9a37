import Logging
@testable import Telemetry
import TestSupport
import XCTest

final class TextLogLineTests: XCTestCase {
    private func text(_ build: (inout TextLogLine) -> Void) -> String {
        var line = TextLogLine()
        build(&line)
        return String(decoding: line.bytes, as: UTF8.self)
    }

    func testPlainValuesAreWrittenBare() {
        XCTAssertEqual(text { $0.append(key: "request_id", "photo-17.jpg") }, " request_id=photo-17.jpg")
        XCTAssertEqual(text { $0.append(key: "principal", "Zx3q+/k9é") }, " principal=Zx3q+/k9é")
        XCTAssertEqual(text { $0.append(key: "count", 0) }, " count=0")
        XCTAssertEqual(text { $0.append(key: "count", -42) }, " count=-42")
        XCTAssertEqual(text { $0.append(key: "count", Int.min) }, " count=\(Int.min)")
        XCTAssertEqual(text { $0.append(key: "job_id", UInt64.max) }, " job_id=\(UInt64.max)")
    }

    func testDigitsArePaddedToTheirWidth() {
        XCTAssertEqual(text { $0.append(digits: 7, width: 3) }, "007")
        XCTAssertEqual(text { $0.append(digits: 0, width: 2) }, "00")
        XCTAssertEqual(text { $0.append(digits: 2026, width: 4) }, "2026")
        XCTAssertEqual(text { $0.append(digits: 12345, width: 2) }, "12345", "never cut")
    }

    /// A value a producer chose (a request id) cannot end the line, forge a field or a line.
    func testValuesThatCouldForgeAFieldOrALineAreQuoted() {
        let forged = "x\n2026-11-27T08:00:00.000Z info enlarger.broker: request ended principal=victim"
        let line = text { $0.append(key: "request_id", forged) }
        XCTAssertFalse(line.contains("\n"), line)
        XCTAssertEqual(line, #" request_id="x\n2026-11-27T08:00:00.000Z info enlarger.broker: request ended principal=victim""#)
        XCTAssertEqual(text { $0.append(key: "k", "a b") }, #" k="a b""#)
        XCTAssertEqual(text { $0.append(key: "k", "a=b") }, #" k="a=b""#)
        XCTAssertEqual(text { $0.append(key: "k", #"say "hi"\"#) }, #" k="say \"hi\"\\""#)
        XCTAssertEqual(text { $0.append(key: "k", "") }, #" k="""#)
        XCTAssertEqual(text { $0.append(key: "k", "tab\there\r") }, #" k="tab\there\r""#)
        XCTAssertEqual(text { $0.append(key: "k", "bell\u{7}del\u{7f}c1\u{85}") }, #" k="bell\u0007del\u007fc1\u0085""#)
    }

    /// Every byte string that decodes as UTF-8 comes out as one line whose value reads back.
    func testRandomValuesStayOnOneLineAndReadBack() {
        var generator = SeededGenerator(seed: 0x7e57_106)
        let alphabet: [Character] = ["a", "Z", "0", " ", "=", "\"", "\\", "\n", "\r", "\t", "\u{1}", "\u{7f}", "\u{85}", "é", "日", "-"]
        for _ in 0..<2_000 {
            let length = Int(generator.next() % 12)
            let value = String((0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
            let line = text { $0.append(key: "v", value) }
            XCTAssertFalse(line.contains(where: { $0.isNewline }), line)
            XCTAssertEqual(Self.readBack(line), value, line)
        }
    }

    func testDurationsAreMillisecondsToATenthAsSwiftPrintsThem() {
        for duration: Duration in [.zero, .microseconds(49), .microseconds(50), .milliseconds(4) + .microseconds(140),
                                   .milliseconds(12), .seconds(3_600), .nanoseconds(1)] {
            XCTAssertEqual(text { $0.append(key: "d", milliseconds: duration) },
                           " d=\(LogField.milliseconds(duration))", "\(duration)")
        }
    }

    func testMetadataValuesKeepNumbersAndQuoteText() {
        XCTAssertEqual(text { $0.append(key: "n", Logger.MetadataValue.stringConvertible(UInt32(7))) }, " n=7")
        XCTAssertEqual(text { $0.append(key: "n", Logger.MetadataValue.stringConvertible(2.5)) }, " n=2.5")
        XCTAssertEqual(text { $0.append(key: "e", Logger.MetadataValue.string("no such file")) }, #" e="no such file""#)
        XCTAssertEqual(text { $0.append(key: "l", Logger.MetadataValue.array(["a", "b"])) }, #" l="[\"a\", \"b\"]""#)
    }

    /// The value of ` v=…` as a logfmt reader would take it.
    private static func readBack(_ line: String) -> String? {
        guard line.hasPrefix(" v=") else { return nil }
        let value = line.dropFirst(3)
        guard value.first == "\"" else { return String(value) }
        guard value.count >= 2, value.last == "\"" else { return nil }
        var result = ""
        var scalars = Array(value.dropFirst().dropLast().unicodeScalars)[...]
        while let scalar = scalars.popFirst() {
            guard scalar == "\\" else {
                result.unicodeScalars.append(scalar)
                continue
            }
            switch scalars.popFirst() {
            case "n": result += "\n"
            case "r": result += "\r"
            case "t": result += "\t"
            case "\"": result += "\""
            case "\\": result += "\\"
            case "u":
                let hex = String(String.UnicodeScalarView(scalars.prefix(4)))
                scalars = scalars.dropFirst(4)
                guard let code = UInt32(hex, radix: 16), let decoded = Unicode.Scalar(code) else { return nil }
                result.unicodeScalars.append(decoded)
            default: return nil
            }
        }
        return result
    }
}
