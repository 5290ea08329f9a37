import Enlarger
import Foundation
import ImageModel
import Imaging
import TestSupport
import XCTest

/// A request with variants through the broker and a worker: one final per variant, tagged, the
/// last terminal; each variant cached under its own key; cancel and failure end the set.
final class VariantEndToEndTests: XCTestCase {
    static let boxes: [(Int, OutputFormat)] = [(320, .webp), (640, .webp), (1280, .webp), (320, .jpeg), (640, .jpeg),
                                               (1280, .jpeg)]

    static func request(_ id: String, _ photo: [UInt8]) -> ResizeRequest {
        var request = ResizeRequest(id: id, image: photo, options: ResizeOptions(width: 1), delivery: .progressive)
        request.variants = boxes.map { ResizeOptions(width: $0.0, height: $0.0, format: $0.1) }
        return request
    }

    func testVariantsComeTaggedWithTheLastTerminalAndAreCachedOneByOne() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        // 2 MP: large enough for every box, quick even under the thread sanitizer.
        let photo = try Corpus.good("sharp_flowers.jpeg")

        var names: [String] = []
        var finals: [EncodedImage] = []
        for try await event in client.submit(Self.request("srcset", photo)) {
            names.append(event.name)
            if case .final(let image) = event { finals.append(image) }
        }
        XCTAssertEqual(names, ["accepted", "started"] + Array(repeating: "final", count: 6),
                       "no degraded result, no placeholder: one final per variant")
        XCTAssertEqual(finals.map(\.variant), [2, 5, 1, 4, 0, 3], "largest first, WebP before JPEG as listed")
        for image in finals {
            let (box, format) = Self.boxes[image.variant]
            XCTAssertEqual(max(image.width, image.height), box)
            XCTAssertEqual(image.format, format)
            XCTAssertFalse(image.cached)
        }
        // Each variant is what the same single request would get.
        let single = try await client.resize(ResizeRequest(image: photo, options: ResizeOptions(width: 640, height: 640),
                                                           delivery: .final))
        XCTAssertTrue(single.cached, "a single request is answered from a variant's entry")
        XCTAssertEqual(single, finals.first { $0.variant == 4 })

        // The same set again: every variant from the cache, in order, no worker.
        names = []
        var again: [EncodedImage] = []
        for try await event in client.submit(Self.request("srcset-again", photo)) {
            names.append(event.name)
            if case .final(let image) = event { again.append(image) }
        }
        XCTAssertEqual(names, ["accepted"] + Array(repeating: "final", count: 6))
        XCTAssertEqual(again.map(\.variant), Array(0..<6))
        XCTAssertTrue(again.allSatisfy(\.cached))
        for image in again { XCTAssertEqual(image, finals.first { $0.variant == image.variant }) }
        // One variant more: the six at once from the cache, and the worker makes only the
        // seventh.
        var more = Self.request("srcset-more", photo)
        more.variants.append(ResizeOptions(width: 160, height: 160, format: .jpeg))
        names = []
        var seventh: [EncodedImage] = []
        for try await event in client.submit(more) {
            names.append(event.name)
            if case .final(let image) = event { seventh.append(image) }
        }
        XCTAssertEqual(names, ["accepted"] + Array(repeating: "final", count: 6) + ["started", "final"])
        XCTAssertEqual(seventh.map(\.variant), Array(0..<7))
        XCTAssertEqual(seventh.map(\.cached), Array(repeating: true, count: 6) + [false])
        XCTAssertEqual(seventh.last.map { max($0.width, $0.height) }, 160)
        let totals = try await client.status().totals
        XCTAssertEqual(totals.cacheHits, 2)
        XCTAssertEqual(totals.finished, 4)
        await client.close()
    }

    /// A single request for one variant of a set under way shares the set's job: its final is
    /// that variant's, made once, and the set still gets all six.
    func testASingleRequestSharesAVariantOfASetUnderWay() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        // 24 MP: the set is still being made when the single request comes.
        let photo = try Corpus.good("bimg_vertical.jpg")
        var finals: [EncodedImage] = []
        var single: EncodedImage?
        for try await event in client.submit(Self.request("srcset", photo)) {
            if case .started = event {
                single = try await client.resize(ResizeRequest(
                    id: "one", image: photo, options: ResizeOptions(width: 320, height: 320, format: .jpeg), delivery: .final))
            }
            if case .final(let image) = event { finals.append(image) }
        }
        XCTAssertEqual(finals.map(\.variant).sorted(), Array(0..<6))
        let shared = try XCTUnwrap(single)
        XCTAssertFalse(shared.cached, "made by the set's job, not found in the cache")
        XCTAssertEqual(shared.variant, 0)
        let made = try XCTUnwrap(finals.first { $0.variant == 3 })
        XCTAssertEqual(shared.bytes, made.bytes)
        let totals = try await client.status().totals
        XCTAssertEqual(totals.jobsShared, 1)
        XCTAssertEqual(totals.finished, 2)
        await client.close()
    }

    func testCancelAfterTheFirstVariantEndsTheSetAndNothingFollows() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let photo = try Corpus.good("bimg_vertical.jpg")
        var request = Self.request("cancel-me", photo)
        request.sharesResults = false
        var finals = 0
        for try await event in client.submit(request) {
            if case .final = event {
                finals += 1
                _ = try await client.cancel("cancel-me")
            }
        }
        XCTAssertEqual(finals, 1, "nothing is delivered after the cancel")
        let status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.cancelled, 1)
        XCTAssertEqual(status.totals.finished, 0)
        await client.close()
    }

    func testBadVariantsAreRejectedByTheClientAndTheBroker() async throws {
        let cluster = try Cluster(self)
        let client = try cluster.client()
        var tooMany = Self.request("many", [0xFF, 0xD8])
        tooMany.variants = Array(repeating: ResizeOptions(width: 10), count: 9)
        var mixed = Self.request("mixed", [0xFF, 0xD8])
        mixed.variants = [ResizeOptions(width: 10), ResizeOptions(width: 20, failOn: .none)]
        var degraded = Self.request("degraded", [0xFF, 0xD8])
        degraded.delivery = .degraded
        for request in [tooMany, mixed, degraded] {
            do {
                for try await _ in client.submit(request) {}
                XCTFail("\(request.id) was accepted")
            } catch {
                guard case .rejected(.invalidArgument, _) = error else { return XCTFail("\(request.id): \(error)") }
            }
        }
        await client.close()
    }
}
