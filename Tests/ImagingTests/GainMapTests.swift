import Foundation
import ImageModel
@testable import Imaging
import TestSupport
import XCTest

/// HDR gain maps (UltraHDR, ISO 21496-1) through a resize: found, resized with the image's crop
/// and orientation, written back with their metadata and index, read back by exiftool; left
/// out or applied on request; a broken index is no gain map.
final class GainMapTests: XCTestCase {
    static let corpusFile = "sharp_gain-map.jpg"

    // MARK: Helpers

    static func decodeJPEG(_ bytes: some Collection<UInt8>) throws -> PixelBuffer {
        try withBytes(Array(bytes)) { raw throws(ImagingError) in
            try JPEGDecoder(data: raw, limits: DecodeLimits(), cancel: nil).decode(scaleNumerator: 8)
        }
    }

    static func gainMap(of bytes: [UInt8]) -> GainMapSource? {
        bytes.withUnsafeBytes { GainMapSource.find(in: $0) }
    }

    static func encode(_ image: PixelBuffer, quality: Int = 95) throws -> [UInt8] {
        try Encoder.encode(image, format: .jpeg, quality: quality, chroma444: true).bytes
    }

    /// An EXIF APP1 segment holding only an orientation.
    static func exifSegment(orientation: Int) -> [UInt8] {
        let tiff: [UInt8] = Array("MM".utf8) + [0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1,
                                                 0, UInt8(orientation), 0, 0, 0, 0, 0, 0]
        return JPEGSegments.segment(marker: 0xE1, payload: Array("Exif\0\0".utf8) + tiff)!
    }

    static func hdrgmSegment(_ attributes: String) -> [UInt8] {
        let xml = "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">"
            + "<rdf:Description xmlns:hdrgm=\"http://ns.adobe.com/hdr-gain-map/1.0/\" hdrgm:Version=\"1.0\" \(attributes)/>"
            + "</rdf:RDF></x:xmpmeta>"
        return JPEGSegments.segment(marker: 0xE1, payload: GainMapSource.xmpSignature + Array(xml.utf8))!
    }

    /// An UltraHDR file made here: `primary` (with an EXIF orientation when not 1) and `map`,
    /// with `attributes` as the map's hdrgm metadata.
    static func ultraHDR(primary: PixelBuffer, map: PixelBuffer, orientation: Int = 1,
                         attributes: String = "hdrgm:GainMapMax=\"2\" hdrgm:HDRCapacityMax=\"2\"") throws -> [UInt8] {
        var base = try encode(primary)
        if orientation != 1 { base.insert(contentsOf: exifSegment(orientation: orientation), at: 2) }
        let source = GainMapSource(range: 0..<0, metadataSegments: [hdrgmSegment(attributes)], primaryISOSegment: nil,
                                   hasXMPMetadata: true, parameters: nil)
        let gainMap = GainMapContainer.gainMapJPEG(try encode(map), source: source)
        return base.withUnsafeBytes { GainMapContainer.assemble(primary: $0, gainMap: gainMap, source: source) }
    }

    /// A `width`×`height` image in four parts holding the given values (grey, or RGB triples),
    /// split at `split` of each axis (off centre by default, so that a centred crop moves the
    /// split).
    static func quadrants(width: Int, height: Int, _ values: [[UInt8]], split: (x: Double, y: Double) = (0.3, 0.6)) -> PixelBuffer {
        let channels = values[0].count
        let sx = Int(Double(width) * split.x), sy = Int(Double(height) * split.y)
        var pixels: [UInt8] = []
        for y in 0..<height {
            for x in 0..<width {
                pixels += values[(y < sy ? 0 : 2) + (x < sx ? 0 : 1)]
            }
        }
        return PixelBuffer(width: width, height: height, channels: channels, pixels: pixels)
    }

    static func final(_ bytes: [UInt8], _ options: ResizeOptions, delivery: Delivery = .final) throws -> [StageResult] {
        var results: [StageResult] = []
        try ImagePipeline().run(bytes, options: options, delivery: delivery) { results.append($0) }
        return results
    }

    // MARK: The corpus's UltraHDR photo

    func testTheCorpusGainMapIsResizedWithTheImageAndIndexed() throws {
        let input = try Corpus.good(Self.corpusFile)
        let source = try XCTUnwrap(Self.gainMap(of: input), "the corpus file carries a gain map")
        let sourceMap = try Self.decodeJPEG(input[source.range])
        XCTAssertEqual([sourceMap.width, sourceMap.height, sourceMap.channels], [960, 540, 1])

        let result = try XCTUnwrap(Self.final(input, ResizeOptions(width: 800)).last)
        let output = result.image.bytes
        let kept = try XCTUnwrap(Self.gainMap(of: output), "the output carries the gain map")
        XCTAssertEqual(kept.range.upperBound, output.count, "the map follows the primary image")
        XCTAssertEqual(kept.metadataSegments, source.metadataSegments, "its metadata is written back unchanged")
        XCTAssertTrue(kept.hasXMPMetadata)
        XCTAssertEqual(kept.parameters?.gainMapMax, [6.64386])
        let primary = try Self.decodeJPEG(output[..<kept.range.lowerBound])
        XCTAssertEqual([primary.width, primary.height], [800, 450])
        let map = try Self.decodeJPEG(output[kept.range])
        // The map keeps its proportion to the image: a quarter on each axis.
        XCTAssertEqual([map.width, map.height, map.channels], [200, 113, 1])
        // Against the source's map resized on its own, exactly: the same picture.
        let direct = try Resampler.resample(sourceMap, region: PixelRect(x: 0, y: 0, width: 960, height: 540),
                                            width: 200, height: 113, filter: .lanczos3)
        XCTAssertGreaterThan(TestImages.psnr(map, direct), 40)
        XCTAssertTrue(result.notes.isEmpty, "\(result.notes)")
    }

    /// A file written by another writer (the test-image script: a little-endian MPF index): its
    /// map is found and kept.
    func testAMapIndexedLittleEndianIsFoundAndKept() throws {
        let input = try TestImages.bytes("jpeg-gain-map.jpg")
        let source = try XCTUnwrap(Self.gainMap(of: input))
        XCTAssertEqual(source.parameters?.gainMapMax, [2.5])
        XCTAssertEqual(try Self.decodeJPEG(input[source.range]).width, 24)
        let output = try XCTUnwrap(Self.final(input, ResizeOptions(width: 48)).last).image.bytes
        let kept = try XCTUnwrap(Self.gainMap(of: output))
        let map = try Self.decodeJPEG(output[kept.range])
        XCTAssertEqual([map.width, map.height, map.channels], [12, 8, 1])
        XCTAssertEqual(kept.metadataSegments, source.metadataSegments)
    }

    /// exiftool, an independent reader of MPF and XMP, sees the index, the container directory
    /// and the map's metadata, and extracts the very bytes written.
    func testExiftoolReadsTheIndexTheDirectoryAndTheMetadata() throws {
        let input = try Corpus.good(Self.corpusFile)
        let output = try XCTUnwrap(Self.final(input, ResizeOptions(width: 640, height: 640, fit: .cover)).last).image.bytes
        let kept = try XCTUnwrap(Self.gainMap(of: output))
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("gain-map-\(UUID().uuidString).jpg")
        try Data(output).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }

        let tags = try XCTUnwrap(try JSONSerialization.jsonObject(with: Self.exiftool(["-j", "-G1", "-a", file.path]))
            as? [[String: Any]]).first ?? [:]
        XCTAssertEqual(tags["MPF0:NumberOfImages"] as? Int, 2)
        XCTAssertEqual(tags["MPImage1:MPImageType"] as? String, "Baseline MP Primary Image")
        XCTAssertEqual(tags["MPImage1:MPImageLength"] as? Int, kept.range.lowerBound)
        XCTAssertEqual(tags["MPImage2:MPImageStart"] as? Int, kept.range.lowerBound)
        XCTAssertEqual(tags["MPImage2:MPImageLength"] as? Int, kept.range.count)
        XCTAssertEqual(tags["File:ImageWidth"] as? Int, 640)
        let xmp = try XCTUnwrap(try JSONSerialization.jsonObject(
            with: Self.exiftool(["-j", "-G1", "-struct", "-XMP:all", file.path])) as? [[String: Any]]).first ?? [:]
        XCTAssertEqual(xmp["XMP-hdrgm:Version"] as? Double, 1.0)
        let items = (xmp["XMP-Container:Directory"] as? [[String: Any]] ?? []).compactMap { $0["Item"] as? [String: Any] }
        XCTAssertEqual(items.map { $0["Semantic"] as? String }, ["Primary", "GainMap"])
        XCTAssertEqual(items.map { $0["Mime"] as? String }, ["image/jpeg", "image/jpeg"])
        XCTAssertEqual(items.last?["Length"] as? Int, kept.range.count)

        let extracted = try Self.exiftool(["-b", "-MPImage2", file.path])
        XCTAssertEqual([UInt8](extracted), Array(output[kept.range]))
        let mapFile = file.deletingPathExtension().appendingPathExtension("map.jpg")
        try extracted.write(to: mapFile)
        defer { try? FileManager.default.removeItem(at: mapFile) }
        let map = try XCTUnwrap(try JSONSerialization.jsonObject(with: Self.exiftool(["-j", "-G1", mapFile.path]))
            as? [[String: Any]]).first ?? [:]
        XCTAssertEqual(map["XMP-hdrgm:GainMapMax"] as? Double, 6.64386)
        XCTAssertEqual(map["XMP-hdrgm:BaseRenditionIsHDR"] as? Bool, false)
        XCTAssertEqual(map["File:ImageWidth"] as? Int, 160)
        XCTAssertEqual(map["File:ImageHeight"] as? Int, 160)
    }

    /// exiftool's standard output; it is installed by scripts/setup.
    static func exiftool(_ arguments: [String]) throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["exiftool"] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, "exiftool \(arguments) (scripts/setup installs it)")
        return data
    }

    // MARK: Geometry

    /// The map is cropped and turned exactly as the image is: wherever the output shows a
    /// quadrant's colour, its map shows that quadrant's gain.
    func testCropAndOrientationApplyToTheMapAsToTheImage() throws {
        let colours: [[UInt8]] = [[220, 30, 30], [30, 200, 30], [30, 30, 220], [230, 230, 230]]
        let gains: [UInt8] = [30, 90, 160, 230]
        let primary = Self.quadrants(width: 640, height: 480, colours)
        let map = Self.quadrants(width: 160, height: 120, gains.map { [$0] })
        for orientation in 1...8 {
            let input = try Self.ultraHDR(primary: primary, map: map, orientation: orientation)
            for options in [ResizeOptions(width: 300, height: 100, fit: .cover), ResizeOptions(width: 200),
                            ResizeOptions(width: 90, height: 160, fit: .fill)] {
                let output = try XCTUnwrap(Self.final(input, options).last).image.bytes
                let kept = try XCTUnwrap(Self.gainMap(of: output), "orientation \(orientation)")
                let image = try Self.decodeJPEG(output[..<kept.range.lowerBound])
                let gain = try Self.decodeJPEG(output[kept.range])
                XCTAssertEqual(Double(gain.width) / Double(image.width), 0.25, accuracy: 0.02)
                XCTAssertEqual(Double(gain.height) / Double(image.height), 0.25, accuracy: 0.02)
                // The quadrant the image shows at each map pixel's centre (nil: an edge's blend).
                let pixels = image.pixels, gainPixels = gain.pixels
                let shown: [[Int?]] = (0..<gain.height).map { gy in
                    (0..<gain.width).map { gx in
                        let x = min(image.width - 1, Int((Double(gx) + 0.5) * Double(image.width) / Double(gain.width)))
                        let y = min(image.height - 1, Int((Double(gy) + 0.5) * Double(image.height) / Double(gain.height)))
                        let at = (y * image.width + x) * 3
                        let rgb = [pixels[at], pixels[at + 1], pixels[at + 2]].map(Int.init)
                        return colours.firstIndex { c in zip(c, rgb).allSatisfy { abs(Int($0) - $1) < 12 } }
                    }
                }
                var checked = 0
                for gy in 0..<gain.height {
                    for gx in 0..<gain.width {
                        // Only where the image shows one quadrant all around (the filter rings
                        // for a pixel or two beside an edge, in the map as in the image).
                        guard let quadrant = shown[gy][gx], (-2...2).allSatisfy({ dy in (-2...2).allSatisfy { dx in
                            let (nx, ny) = (gx + dx, gy + dy)
                            return nx < 0 || ny < 0 || nx >= gain.width || ny >= gain.height || shown[ny][nx] == quadrant
                        } }) else { continue }
                        let value = Int(gainPixels[gy * gain.width + gx])
                        if abs(value - Int(gains[quadrant])) > 12 {
                            XCTFail("orientation \(orientation), \(options.width ?? 0)×\(options.height ?? 0) \(options.fit): "
                                    + "map (\(gx), \(gy)) is \(value) where the image shows quadrant \(quadrant)")
                            return
                        }
                        checked += 1
                    }
                }
                XCTAssertGreaterThan(checked, gain.width * gain.height / 4, "enough of the map was compared")
            }
        }
    }

    // MARK: Modes

    func testDropOtherFormatsAndDegradedResultsLeaveTheMapOut() throws {
        let input = try Corpus.good(Self.corpusFile)
        var drop = ResizeOptions(width: 400)
        drop.gainMap = .drop
        let dropped = try XCTUnwrap(Self.final(input, drop).last)
        XCTAssertNil(Self.gainMap(of: dropped.image.bytes))
        XCTAssertTrue(dropped.notes.isEmpty)

        let webp = try XCTUnwrap(Self.final(input, ResizeOptions(width: 400, format: .webp)).last)
        XCTAssertEqual(webp.image.format, .webp)
        XCTAssertTrue(webp.notes.contains { $0.contains("only JPEG output carries one") }, "\(webp.notes)")

        let results = try Self.final(input, ResizeOptions(width: 400), delivery: .progressive)
        XCTAssertEqual(results.map(\.stage), [.degraded, .final])
        XCTAssertNil(Self.gainMap(of: results[0].image.bytes), "a degraded result is a preview: no map")
        XCTAssertNotNil(Self.gainMap(of: results[1].image.bytes))
        XCTAssertNil(Self.gainMap(of: try XCTUnwrap(Self.final(input, ResizeOptions(width: 400), delivery: .degraded).last)
            .image.bytes))
        // Kept and dropped, the primary image is the same.
        let kept = results[1].image.bytes
        let range = try XCTUnwrap(Self.gainMap(of: kept)).range
        XCTAssertEqual(try Self.decodeJPEG(kept[..<range.lowerBound]), try Self.decodeJPEG(dropped.image.bytes))
    }

    func testApplyOnAnSDRBaseIsTheBaseItself() throws {
        let input = try Corpus.good(Self.corpusFile)
        var apply = ResizeOptions(width: 400)
        apply.gainMap = .apply
        var drop = apply
        drop.gainMap = .drop
        let applied = try XCTUnwrap(Self.final(input, apply).last)
        XCTAssertNil(Self.gainMap(of: applied.image.bytes))
        XCTAssertEqual(applied.image.bytes, try XCTUnwrap(Self.final(input, drop).last).image.bytes)
        XCTAssertTrue(applied.notes.contains { $0.contains("already its SDR rendition") }, "\(applied.notes)")
    }

    /// An HDR base comes out as SDR through the map: SDR = (HDR + offsetHDR) / 2^G - offsetSDR in
    /// linear light, G = min + map^(1/gamma) × (max - min).
    func testApplyToneMapsAnHDRBaseThroughTheMap() throws {
        let base: [UInt8] = [200, 120, 60]
        let primary = PixelBuffer(width: 64, height: 48, channels: 3, pixels: Array((0..<(64 * 48)).flatMap { _ in base }))
        // Left half: G = 1 (half the light); right half: G = 0 (unchanged, less the offsets).
        let map = Self.quadrants(width: 16, height: 12, [[255], [0], [255], [0]], split: (0.5, 0.5))
        let input = try Self.ultraHDR(
            primary: primary, map: map,
            attributes: "hdrgm:GainMapMin=\"0\" hdrgm:GainMapMax=\"1\" hdrgm:Gamma=\"1\" hdrgm:OffsetSDR=\"0.015625\" "
                + "hdrgm:OffsetHDR=\"0.015625\" hdrgm:BaseRenditionIsHDR=\"True\"")
        var options = ResizeOptions(width: 64, quality: 100)
        options.gainMap = .apply
        options.chroma444 = true
        let result = try XCTUnwrap(Self.final(input, options).last)
        XCTAssertNil(Self.gainMap(of: result.image.bytes), "the SDR rendition has no map")
        let image = try Self.decodeJPEG(result.image.bytes)
        func expected(_ value: UInt8, gain: Double) -> Double {
            let linear = SRGB.toLinear(Double(value) / 255)
            return SRGB.fromLinear(min(1, max(0, (linear + 1.0 / 64) / gain - 1.0 / 64))) * 255
        }
        for (x, gain) in [(8, 2.0), (56, 1.0)] {
            for c in 0..<3 {
                let value = Double(image.pixels[(24 * 64 + x) * 3 + c])
                XCTAssertEqual(value, expected(base[c], gain: gain), accuracy: 3, "x \(x), channel \(c)")
            }
        }
        XCTAssertLessThan(image.pixels[(24 * 64 + 8) * 3], image.pixels[(24 * 64 + 56) * 3] - 40, "the left half is darker")
    }

    func testParametersAreReadFromAttributesAndElements() {
        let attributes = GainMapParameters(xmp: "<rdf:Description hdrgm:GainMapMin=\"-0.5\" hdrgm:GainMapMax=\"3.25\" "
                                           + "hdrgm:Gamma=\"2\" hdrgm:BaseRenditionIsHDR=\"True\"/>")
        XCTAssertEqual(attributes, GainMapParameters(gainMapMin: [-0.5], gainMapMax: [3.25], gamma: [2], baseRenditionIsHDR: true))
        let elements = GainMapParameters(xmp: """
            <hdrgm:GainMapMax><rdf:Seq><rdf:li>1.5</rdf:li><rdf:li>2.5</rdf:li><rdf:li>3.5</rdf:li></rdf:Seq></hdrgm:GainMapMax>
            <hdrgm:OffsetSDR>0.25</hdrgm:OffsetSDR><hdrgm:BaseRenditionIsHDR>False</hdrgm:BaseRenditionIsHDR>
            """)
        XCTAssertEqual(elements, GainMapParameters(gainMapMax: [1.5, 2.5, 3.5], offsetSDR: [0.25]))
        XCTAssertEqual(GainMapParameters(xmp: "hdrgm:GainMapMax=\"many\""), GainMapParameters(), "unreadable: the default")
    }

    // MARK: Damage

    /// A broken index is no gain map, never a crash or a read outside the data: each field of the
    /// MPF segment and the map's head, overwritten with random bytes, 3,000 times (seeded).
    func testABrokenIndexIsNoGainMap() throws {
        let primary = Self.quadrants(width: 64, height: 48, [[200, 0, 0], [0, 200, 0], [0, 0, 200], [90, 90, 90]])
        let input = try Self.ultraHDR(primary: primary, map: Self.quadrants(width: 16, height: 12, [[10], [80], [150], [220]]))
        let source = try XCTUnwrap(Self.gainMap(of: input))
        let mpf = try XCTUnwrap(input.withUnsafeBytes { JPEGSegments.scan($0) }?.first {
            input[$0.payload].starts(with: GainMapSource.mpfSignature)
        })
        let seed = UInt64(ProcessInfo.processInfo.environment["GAIN_MAP_SEED"] ?? "") ?? 21496
        var generator = SeededGenerator(seed: seed)
        print("GainMapTests seed \(seed) (GAIN_MAP_SEED replays)")
        var found = 0
        for round in 0..<3000 {
            var damaged = input
            // The MPF segment's payload (its length bytes would break the primary image too),
            // or the head of the map.
            let target = round % 2 == 0 ? mpf.payload : source.range.lowerBound..<(source.range.lowerBound + 64)
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                damaged[Int.random(in: target, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            if let map = Self.gainMap(of: damaged) {
                found += 1
                XCTAssertLessThanOrEqual(map.range.upperBound, damaged.count)
                XCTAssertEqual(Array(damaged[map.range.lowerBound..<(map.range.lowerBound + 2)]), [0xFF, 0xD8])
            }
            // Every 20th: the whole resize, which must give the primary image whatever the map.
            if round % 20 == 0 {
                let result = try Self.final(damaged, ResizeOptions(width: 32)).last
                XCTAssertEqual(result.map { [$0.image.width, $0.image.height] }, [32, 24])
            }
        }
        XCTAssertGreaterThan(found, 0, "some damage leaves the map readable")
        XCTAssertLessThan(found, 3000, "some damage breaks the index")

        // Offsets past the end, and a map that is not a JPEG.
        var past = input
        let entry = mpf.payload.lowerBound + 4 + 50 + 16
        past[entry + 8] = 0x7F  // the map's offset, far past the end
        XCTAssertNil(Self.gainMap(of: past))
        var notJPEG = input
        notJPEG[source.range.lowerBound + 1] = 0x00
        XCTAssertNil(Self.gainMap(of: notJPEG))
        XCTAssertNil(Self.gainMap(of: try Self.encode(primary)), "no MPF, no map")
    }

    func testAnUnreadableOrOversizedMapIsLeftOutWithANote() throws {
        let primary = Self.quadrants(width: 64, height: 48, [[200, 0, 0], [0, 200, 0], [0, 0, 200], [90, 90, 90]])
        // Its entropy-coded data cut: the map's decode fails, the image does not.
        var cut = try Self.ultraHDR(primary: primary, map: Self.quadrants(width: 16, height: 12, [[10], [80], [150], [220]]))
        let range = try XCTUnwrap(Self.gainMap(of: cut)).range
        cut.replaceSubrange((range.upperBound - 40)..<range.upperBound, with: [UInt8](repeating: 0, count: 40))
        let result = try XCTUnwrap(Self.final(cut, ResizeOptions(width: 32)).last)
        XCTAssertNil(Self.gainMap(of: result.image.bytes))
        XCTAssertTrue(result.notes.contains { $0.hasPrefix("the HDR gain map is left out") }, "\(result.notes)")
        // A map with more pixels than the image is refused from its header.
        let oversized = try Self.ultraHDR(primary: primary, map: Self.quadrants(width: 128, height: 96, [[1], [2], [3], [4]]))
        let big = try XCTUnwrap(Self.final(oversized, ResizeOptions(width: 32)).last)
        XCTAssertNil(Self.gainMap(of: big.image.bytes))
        XCTAssertTrue(big.notes.contains { $0.contains("cannot be read") }, "\(big.notes)")
    }

    func testInfoSaysWhetherAJPEGHasAGainMap() throws {
        let pipeline = ImagePipeline()
        let info = try withBytes(try Corpus.good(Self.corpusFile)) { raw throws(ImagingError) in try pipeline.info(of: raw) }
        XCTAssertTrue(info.hasGainMap)
        let plain = try withBytes(try Self.encode(PixelBuffer(width: 8, height: 8, channels: 3))) {
            raw throws(ImagingError) in try pipeline.info(of: raw)
        }
        XCTAssertFalse(plain.hasGainMap)
    }

    func testTheEstimateCountsTheMap() throws {
        let input = try Corpus.good(Self.corpusFile)
        func estimate(_ mode: GainMapMode) throws -> Int {
            var options = ResizeOptions(width: 800)
            options.gainMap = mode
            return try withBytes(input) { raw throws(ImagingError) in
                try ImagePipeline().prepare(raw, options: options).memoryEstimate.bytes
            }
        }
        let kept = try estimate(.keep), dropped = try estimate(.drop)
        // The map's 960×540 decode, resize and encode.
        XCTAssertGreaterThan(kept - dropped, 960 * 540)
        XCTAssertLessThan(kept - dropped, 8 << 20)
    }
}
