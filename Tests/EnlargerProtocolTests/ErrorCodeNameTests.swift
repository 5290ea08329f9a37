import EnlargerProtocol
import Foundation
import XCTest

/// Logs and metric labels name error codes as the contract does; the names must not drift
/// from `common.proto`.
final class ErrorCodeNameTests: XCTestCase {
    func testEveryCodeIsNamedAsInTheContract() throws {
        let proto = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("proto/enlarger/v1/common.proto")
        let text = try String(contentsOf: proto, encoding: .utf8)
        var contract: [Int: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.trimmingCharacters(in: .whitespaces).split(whereSeparator: { " =;".contains($0) })
            guard parts.count >= 2, parts[0].hasPrefix("ERROR_CODE_"), let number = Int(parts[1]) else { continue }
            // A number's first name is its name; a later one is an alias kept for old code.
            if contract[number] == nil { contract[number] = String(parts[0].dropFirst("ERROR_CODE_".count)) }
        }
        XCTAssertEqual(contract.count, Enlarger_V1_ErrorCode.allCases.count)
        for code in Enlarger_V1_ErrorCode.allCases {
            XCTAssertEqual(code.contractName, contract[code.rawValue], "code \(code.rawValue)")
        }
        XCTAssertEqual(Enlarger_V1_ErrorCode(rawValue: 999)?.contractName, "UNKNOWN_999")
    }
}
