import EnlargerProtocol
import Foundation
import ImageModel
import XCTest

final class ResizeSpecValidationTests: XCTestCase {
    private func spec(_ configure: (inout Enlarger_V1_ResizeSpec) -> Void) -> Enlarger_V1_ResizeSpec {
        var spec = Enlarger_V1_ResizeSpec()
        configure(&spec)
        return spec
    }

    private func problem(_ spec: Enlarger_V1_ResizeSpec) -> String? {
        do {
            try spec.validate()
            return nil
        } catch {
            return error.message
        }
    }

    func testDefaultsWithOneAxisAreValid() {
        XCTAssertNil(problem(spec { $0.width = 1 }))
        XCTAssertNil(problem(spec { $0.height = 16_384 }))
        XCTAssertNil(problem(spec { $0.width = 100; $0.height = 100; $0.fit = .cover; $0.quality = 100 }))
        XCTAssertEqual(spec { $0.width = 1 }.effectiveQuality, 80)
        XCTAssertEqual(spec { $0.quality = 55 }.effectiveQuality, 55)
    }

    func testOutOfRangeValuesAreInvalid() {
        XCTAssertNotNil(problem(spec { _ in }), "no axis set")
        XCTAssertNotNil(problem(spec { $0.width = 16_385 }), "above the imaging limit")
        XCTAssertNotNil(problem(spec { $0.width = 10; $0.height = 70_000 }))
        XCTAssertNotNil(problem(spec { $0.width = 10; $0.quality = 101 }))
        XCTAssertNotNil(problem(spec { $0.width = 10; $0.fit = .UNRECOGNIZED(9) }))
        XCTAssertNotNil(problem(spec { $0.width = 10; $0.chroma = .UNRECOGNIZED(9) }))
        XCTAssertNotNil(problem(spec { $0.width = 10; $0.format = .UNRECOGNIZED(9) }))
    }

    func testAcceptAndBackground() {
        XCTAssertNil(problem(spec { $0.width = 10; $0.accept = ["image/avif", "image/x-unknown", " Image/JPEG ; q=1"] }))
        XCTAssertNil(problem(spec { $0.width = 10; $0.background = 0xFF_FFFF; $0.flatten = true; $0.lossless = true }))
        XCTAssertEqual(problem(spec { $0.width = 10; $0.accept = ["image/gif", "text/html"] })?.contains("no known content type"),
                       true)
        XCTAssertNotNil(problem(spec { $0.width = 10; $0.accept = Array(repeating: "image/png", count: 17) }))
        XCTAssertNotNil(problem(spec { $0.width = 10; $0.background = 0x100_0000 }))
        for format in [Enlarger_V1_ImageFormat.png, .webp, .avif] {
            XCTAssertNil(problem(spec { $0.width = 10; $0.format = format }))
        }
    }

    /// Each gain-map mode is its own output: its own sharing key; an unknown mode is refused.
    func testGainMapModesAreReadAndKeyedApart() throws {
        let modes: [(Enlarger_V1_GainMap, GainMapMode)] = [(.keep, .keep), (.drop, .drop), (.apply, .apply)]
        var keys: Set<[UInt8]> = []
        for (wire, mode) in modes {
            let given = spec { $0.width = 10; $0.gainMap = wire }
            XCTAssertEqual(try ResizeOptions(given).gainMap, mode)
            keys.insert(try given.sharingKey(delivery: .final))
        }
        XCTAssertEqual(keys.count, 3)
        XCTAssertEqual(try spec { $0.width = 10 }.sharingKey(delivery: .final),
                       try spec { $0.width = 10; $0.gainMap = .keep }.sharingKey(delivery: .final), "keep is the default")
        XCTAssertEqual(problem(spec { $0.width = 10; $0.gainMap = .UNRECOGNIZED(7) }), "unknown gain_map 7")
        // Info ignores it, as it ignores the rest of the spec but fail_on.
        XCTAssertEqual(try spec { $0.width = 10; $0.gainMap = .drop }.sharingKey(delivery: .info),
                       try spec { $0.width = 10 }.sharingKey(delivery: .info))
    }

    func testDeliveryDecidesFinality() {
        XCTAssertEqual(Enlarger_V1_Delivery.progressive.isTerminal(.degraded), false)
        XCTAssertEqual(Enlarger_V1_Delivery.progressive.isTerminal(.final), true)
        XCTAssertEqual(Enlarger_V1_Delivery.final.isTerminal(.final), true)
        XCTAssertNil(Enlarger_V1_Delivery.final.isTerminal(.degraded))
        XCTAssertEqual(Enlarger_V1_Delivery.degraded.isTerminal(.degraded), true)
        XCTAssertNil(Enlarger_V1_Delivery.degraded.isTerminal(.final))
        XCTAssertNil(Enlarger_V1_Delivery.progressive.isTerminal(.unspecified))
        XCTAssertThrowsError(try Enlarger_V1_Delivery.UNRECOGNIZED(5).validate())
        XCTAssertNoThrow(try Enlarger_V1_Delivery.degraded.validate())
    }

    /// One table of `accept` entries, shared with the Python client's tests: the worker's
    /// reading, which the broker's validation and sharing key use too.
    func testAcceptEntriesAreReadAsTheSharedTableSays() throws {
        struct Table: Decodable {
            struct Case: Decodable {
                var entry: String
                var format: String?
            }
            var cases: [Case]
        }
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Shared/content-types.json")
        let table = try JSONDecoder().decode(Table.self, from: Data(contentsOf: url))
        XCTAssertGreaterThan(table.cases.count, 10)
        for entry in table.cases {
            XCTAssertEqual(OutputFormat(contentType: entry.entry)?.contentType, entry.format, "\(entry.entry.debugDescription)")
            // The broker accepts a spec exactly when one entry is known, and keys it as the worker reads it.
            let spec = Enlarger_V1_ResizeSpec.with { $0.width = 10; $0.accept = [entry.entry] }
            if let format = entry.format {
                XCTAssertNoThrow(try spec.validate())
                let canonical = Enlarger_V1_ResizeSpec.with { $0.width = 10; $0.accept = [format] }
                XCTAssertEqual(try spec.sharingKey(delivery: .final), try canonical.sharingKey(delivery: .final))
            } else {
                XCTAssertThrowsError(try spec.validate(), "\(entry.entry.debugDescription)")
            }
        }
    }
}
