import Foundation
@testable import Imaging
import XCTest

final class ThumbHashTests: XCTestCase {
    private struct Vector: Decodable {
        var kind: String
        var width: Int
        var height: Int
        var seed: Int
        var hash: String
    }

    /// Byte for byte what an independent implementation of the format computed for the same
    /// images (`scripts/thumbhash-vectors`, which says how the file was made): opaque,
    /// translucent, fully transparent, flat and noisy, portrait, landscape, square, 1 pixel
    /// wide and 100 pixels wide.
    func testHashesMatchAnIndependentImplementation() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Shared/thumbhash-vectors.json")
        let vectors = try JSONDecoder().decode([Vector].self, from: Data(contentsOf: url))
        XCTAssertEqual(vectors.count, 66)
        XCTAssertEqual(Set(vectors.map(\.kind)).count, 6)
        for vector in vectors {
            let rgba = Self.pixels(vector.kind, width: vector.width, height: vector.height, seed: vector.seed)
            let hash = ThumbHash.encode(width: vector.width, height: vector.height, rgba: rgba)
            XCTAssertEqual(hash.map { String(format: "%02x", $0) }.joined(), vector.hash,
                           "\(vector.kind) \(vector.width)x\(vector.height)")
        }
    }

    /// What the header says can be read back: the aspect, alpha, and the average colour of a
    /// flat image to within its 6 bits.
    func testTheHeaderCarriesShapeAlphaAndColour() {
        let flat = Self.pixels("flat", width: 40, height: 20, seed: 200)
        let hash = ThumbHash.encode(width: 40, height: 20, rgba: flat)
        let header24 = Int(hash[0]) | Int(hash[1]) << 8 | Int(hash[2]) << 16
        let header16 = Int(hash[3]) | Int(hash[4]) << 8
        XCTAssertEqual(header16 >> 15, 1, "landscape")
        XCTAssertEqual(header24 >> 23, 0, "opaque")
        XCTAssertEqual(header16 & 7, 4, "the luminance grid's short side: 7 × 20 / 40, rounded")
        // Flat: no AC energy, so every AC scale is 0 (the nibbles then say nothing).
        XCTAssertEqual(header24 >> 18 & 31, 0)
        XCTAssertEqual(header16 >> 3 & 63, 0)
        XCTAssertEqual(header16 >> 9 & 63, 0)
        let luminance = Double(header24 & 63) / 63
        let expected = (200.0 + Double(200 * 7 % 256) + Double(200 * 13 % 256)) / 3 / 255
        XCTAssertEqual(luminance, expected, accuracy: 1.0 / 63)

        let translucent = Self.pixels("alpha-gradient", width: 10, height: 30, seed: 1)
        let withAlpha = ThumbHash.encode(width: 10, height: 30, rgba: translucent)
        XCTAssertEqual(Int(withAlpha[2]) >> 7, 1, "alpha present")
        XCTAssertEqual(Int(withAlpha[4]) >> 7, 0, "portrait")
    }

    /// The size stays within the format's bounds for any input shape.
    func testHashesStayShort() {
        for (width, height) in [(1, 1), (100, 1), (1, 100), (100, 100), (37, 91)] {
            for kind in ["noise", "alpha-noise"] {
                let hash = ThumbHash.encode(width: width, height: height, rgba: Self.pixels(kind, width: width, height: height, seed: 5))
                XCTAssert((5...25).contains(hash.count), "\(kind) \(width)x\(height): \(hash.count) bytes")
            }
        }
    }

    /// The images of `scripts/thumbhash-vectors`, made the same way: RGBA bytes row by row,
    /// noise from a 31-bit LCG.
    static func pixels(_ kind: String, width w: Int, height h: Int, seed: Int) -> [UInt8] {
        var state = seed
        func draw() -> Int {
            state = (state * 1_103_515_245 + 12345) % (1 << 31)
            return (state >> 16) & 255
        }
        var out: [Int] = []
        out.reserveCapacity(w * h * 4)
        for y in 0..<h {
            for x in 0..<w {
                let gradient = [x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), (x + y) * 255 / max(w + h - 2, 1)]
                switch kind {
                case "gradient": out += gradient + [255]
                case "noise": out += [draw(), draw(), draw(), 255]
                case "flat": out += [seed % 256, seed * 7 % 256, seed * 13 % 256, 255]
                case "alpha-gradient": out += gradient + [x * 255 / max(w - 1, 1)]
                case "alpha-noise": out += [draw(), draw(), draw(), draw()]
                case "transparent": out += [draw(), draw(), draw(), 0]
                default: preconditionFailure("unknown kind \(kind)")
                }
            }
        }
        return out.map { UInt8($0) }
    }
}
