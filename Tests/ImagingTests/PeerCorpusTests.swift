import Foundation
import ImageModel
@testable import Imaging
import XCTest

/// Every test image through `info`, `resize` and a full decode, against what Pillow (with
/// the pillow-heif and pillow-avif-plugin plugins, whose libheif and libavif are newer than
/// the ones Enlarger links) made of it: `Images/peers/`, written by
/// scripts/make-peer-references. Where both decode: the size after orientation, alpha, and
/// at least 35 dB between the decodes. Where they disagree (decoding or not, size, pixels),
/// PEERS.tsv must say who is right and why.
final class PeerCorpusTests: XCTestCase {
    private struct Peer {
        var file: String
        var decodes: Bool
        var width: Int?
        var height: Int?
        var alpha: Bool
        var reduced: Int
        var reference: String
        var refusal: String
        var verdict: String
    }

    private static let root = TestImages.root.appendingPathComponent("peers")

    private func peers() throws -> (String, [Peer]) {
        let text = try String(contentsOf: Self.root.appendingPathComponent("PEERS.tsv"), encoding: .utf8)
        let lines = text.split(separator: "\n")
        let rows = lines.dropFirst(2).map { line in
            let f = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            return Peer(file: f[0], decodes: f[1] == "y", width: Int(f[2]), height: Int(f[3]), alpha: f[4] == "y",
                        reduced: Int(f[5]) ?? 1, reference: f[6], refusal: f[7], verdict: f.count > 8 ? f[8] : "")
        }
        return (String(lines[0].dropFirst(2)), rows)
    }

    /// Enlarger's decode as the peer's layout: upright, straight alpha (or none), grey as RGB.
    private func enlargerDecode(_ bytes: [UInt8]) throws -> PixelBuffer {
        if try InputFormat.of(bytes) == .jpeg {
            // The JPEG decoder has no raster interface: a resize to its own size, as PNM.
            let width = try withBytes(bytes) { raw throws(ImagingError) in try ImagePipeline().info(of: raw).width }
            let final = try TestImages.final(bytes, ResizeOptions(width: width, format: .pnm))
            return try Encoder.decodePNM(final.image.bytes)
        }
        return try withBytes(bytes) { raw throws(ImagingError) in
            let format = try InputFormat.detect(raw, limits: DecodeLimits())
            let decoder = try RasterDecoders.make(format, data: raw, limits: DecodeLimits(), cancel: nil, failOn: .error)
            let raster = try decoder.decode(shrink: 1)
            let upright = try decoder.header.orientation.apply(to: raster.pixels, allocator: BufferAllocator())
            return upright.channels == 4 ? try Alpha.unpremultiplied(upright, allocator: BufferAllocator()) : upright
        }
    }

    /// `image` with `channels` (3 or 4: grey spread, opaque alpha added) and box-reduced
    /// `factor` times, rounded as the script rounds.
    private func comparable(_ image: PixelBuffer, channels: Int, factor: Int) -> [Double] {
        let (w, h) = (image.width / factor, image.height / factor)
        let pixels = image.pixels  // a copy each time it is read
        var out = [Double](repeating: 0, count: w * h * channels)
        for y in 0..<h {
            for x in 0..<w {
                for c in 0..<channels {
                    var sum = 0.0
                    for dy in 0..<factor {
                        for dx in 0..<factor {
                            let i = ((y * factor + dy) * image.width + x * factor + dx) * image.channels
                            sum += c == 3 && image.channels < 4 ? 255
                                : Double(pixels[i + (image.channels == 1 ? 0 : min(c, image.channels - 1))])
                        }
                    }
                    out[(y * w + x) * channels + c] = (sum / Double(factor * factor) + 0.5).rounded(.down)
                }
            }
        }
        return out
    }

    /// PSNR over premultiplied samples (what is under alpha 0 does not count).
    private func psnr(_ a: [Double], _ b: [Double], channels: Int) -> Double {
        var sum = 0.0
        for pixel in stride(from: 0, to: a.count, by: channels) {
            for c in 0..<channels {
                var (x, y) = (a[pixel + c], b[pixel + c])
                if channels == 4 && c < 3 {
                    x *= a[pixel + 3] / 255
                    y *= b[pixel + 3] / 255
                }
                sum += (x - y) * (x - y)
            }
        }
        let mse = sum / Double(a.count)
        return mse == 0 ? .infinity : 10 * log10(255 * 255 / mse)
    }

    func testEveryTestImageAgainstThePeer() throws {
        let (peer, rows) = try peers()
        let files = try FileManager.default.contentsOfDirectory(atPath: TestImages.root.path)
            .filter { !$0.hasPrefix(".") && $0 != "MANIFEST.tsv" && $0 != "README.md" && $0 != "peers" }
        XCTAssertEqual(Set(rows.map(\.file)), Set(files), "PEERS.tsv is out of date: run scripts/make-peer-references")
        var tally: [String: (files: Int, enlarger: Int, peer: Int, both: Int)] = [:]
        for row in rows {
            let bytes = try TestImages.bytes(row.file)
            let format = String(row.file.prefix { $0 != "-" && $0 != "." })
            let info = Result { try withBytes(bytes) { raw throws(ImagingError) in try ImagePipeline().info(of: raw) } }
            let resized = Result { try TestImages.run(bytes, ResizeOptions(width: 32, format: .png)).last! }
            let decoded = Result { try self.enlargerDecode(bytes) }
            let enlargerDecodes = (try? resized.get()) != nil
            XCTAssertEqual(enlargerDecodes, (try? decoded.get()) != nil, "\(row.file): resize and decode agree")
            var counts = tally[format, default: (0, 0, 0, 0)]
            counts.files += 1
            counts.enlarger += enlargerDecodes ? 1 : 0
            counts.peer += row.decodes ? 1 : 0
            counts.both += enlargerDecodes && row.decodes ? 1 : 0
            tally[format] = counts
            guard enlargerDecodes == row.decodes else {
                XCTAssertFalse(row.verdict.isEmpty, "\(row.file): Enlarger \(enlargerDecodes ? "decodes" : "refuses"), "
                               + "the peer \(row.decodes ? "decodes" : "refuses (\(row.refusal))"): PEERS.tsv needs a verdict")
                continue
            }
            guard enlargerDecodes else { continue }
            let facts = try info.get(), image = try decoded.get(), final = try resized.get()
            XCTAssertEqual(final.image.width, 32, row.file)
            XCTAssertEqual(final.sourceWidth, facts.width, row.file)
            guard (facts.width, facts.height) == (row.width, row.height) else {
                XCTAssertFalse(row.verdict.isEmpty, "\(row.file): Enlarger \(facts.width)×\(facts.height), the peer "
                               + "\(row.width ?? 0)×\(row.height ?? 0): PEERS.tsv needs a verdict")
                continue
            }
            XCTAssertEqual((image.width, image.height) == (facts.width, facts.height), true, row.file)
            guard facts.hasAlpha == row.alpha else {
                XCTAssertFalse(row.verdict.isEmpty, "\(row.file): Enlarger \(facts.hasAlpha ? "has" : "has no") alpha, the "
                               + "peer \(row.alpha ? "has" : "has none"): PEERS.tsv needs a verdict")
                continue
            }
            let channels = row.alpha ? 4 : 3
            let reference = try TestImages.decode(try [UInt8](Data(contentsOf: Self.root.appendingPathComponent(row.reference))))
            XCTAssertEqual(reference.channels, channels, row.file)
            let ours = comparable(image, channels: channels, factor: row.reduced)
            let theirs = comparable(reference, channels: channels, factor: 1)
            XCTAssertEqual(ours.count, theirs.count, row.file)
            guard ours.count == theirs.count else { continue }
            let quality = psnr(ours, theirs, channels: channels)
            if quality < 35 {
                XCTAssertFalse(row.verdict.isEmpty, "\(row.file): \(quality) dB against \(peer): PEERS.tsv needs a verdict")
            }
        }
        print("Enlarger against \(peer): files, decoded by Enlarger, by the peer, by both")
        for (format, c) in tally.sorted(by: { $0.key < $1.key }) {
            print("  \(format): \(c.files) files, Enlarger \(c.enlarger), peer \(c.peer), both \(c.both)")
        }
    }
}
