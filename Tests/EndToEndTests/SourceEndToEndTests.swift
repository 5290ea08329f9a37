import Enlarger
import EnlargerWorker
import Foundation
import ImageModel
import XCTest
import TestSupport

/// File sources through the whole service: a client names a path, a worker reads it beneath
/// its files root, and the broker caches by the version the worker found, so a changed file
/// is never answered from the cache.
final class SourceEndToEndTests: XCTestCase {
    private func filesRoot() throws -> URL {
        let root = FileManager.default.temporaryDirectory
            .appendingPathComponent("enlarger-files-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: root) }
        return root
    }

    func testAFileSourceIsCachedByItsVersionAndAChangedFileIsReadAgain() async throws {
        let root = try filesRoot()
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let other = try Corpus.good("bimg_test_exif_full.jpg")
        let path = root.appendingPathComponent("photo.jpg")
        try Data(photo).write(to: path)

        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2) { $0.filesRoot = root.path }
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let options = ResizeOptions(width: 320)

        var events: [String] = []
        var first: EncodedImage?
        for try await event in client.submit(ResizeRequest(source: .file(path: "photo.jpg"), options: options)) {
            events.append(event.name)
            if case .final(let image) = event { first = image }
        }
        XCTAssertEqual(events, ["accepted", "started", "degraded", "final"])
        let fromFile = try XCTUnwrap(first)
        XCTAssertFalse(fromFile.cached)
        let inline = try await client.resize(ResizeRequest(image: photo, options: options, delivery: .final,
                                                           sharesResults: false))
        XCTAssertEqual(fromFile.bytes, inline.bytes, "the same pixels as the image sent inline")

        // Unchanged: the worker opens it, names the same version, and the cache answers.
        let again = try await client.resize(ResizeRequest(source: .file(path: "photo.jpg"), options: options,
                                                          delivery: .final))
        XCTAssertTrue(again.cached)
        XCTAssertEqual(again.bytes, fromFile.bytes)
        let hits = try await client.status().totals.cacheHits
        XCTAssertEqual(hits, 1)

        // Rewritten (a different photo under the same name): never the stale result.
        try Data(other).write(to: path)
        let changed = try await client.resize(ResizeRequest(source: .file(path: "photo.jpg"), options: options,
                                                            delivery: .final))
        XCTAssertFalse(changed.cached)
        XCTAssertNotEqual(changed.bytes, fromFile.bytes)
        let fresh = try await client.resize(ResizeRequest(image: other, options: options, delivery: .final,
                                                          sharesResults: false))
        XCTAssertEqual(changed.bytes, fresh.bytes)

        // The header alone, from the file.
        let info = try await client.info(source: .file(path: "photo.jpg"))
        let local = try await client.info(other)
        XCTAssertEqual(info, local)

        // Cache hits for a file source: the worker opens and stats the file, nothing more.
        var latencies: [Double] = []
        for _ in 0..<40 {
            let start = ContinuousClock.now
            let hit = try await client.resize(ResizeRequest(source: .file(path: "photo.jpg"), options: options,
                                                            delivery: .final))
            latencies.append(milliseconds(ContinuousClock.now - start))
            XCTAssertTrue(hit.cached)
        }
        latencies.sort()
        print(String(format: "file-source cache hit over ipc: p50 %.2f ms, p90 %.2f ms (40 requests)",
                     latencies[20], latencies[36]))
        await client.close()
    }

    func testRefusedAndMissingFilesFailWithTheirCodes() async throws {
        let root = try filesRoot()
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1) { $0.filesRoot = root.path }
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        for (path, expected) in [("../etc/passwd", EnlargerClientError.Code.sourceRefused),
                                 ("/etc/passwd", .sourceRefused), ("missing.jpg", .sourceUnavailable)] {
            do {
                _ = try await client.resize(ResizeRequest(source: .file(path: path), options: ResizeOptions(width: 64)))
                XCTFail("\(path) was read")
            } catch {
                guard case .failed(let code, let message) = error else { XCTFail("\(path): \(error)"); continue }
                XCTAssertEqual(code, expected, "\(path): \(message)")
            }
        }
        await client.close()
    }

    func testIdenticalFileRequestsInFlightShareOneRead() async throws {
        let root = try filesRoot()
        try Data(try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")).write(to: root.appendingPathComponent("p.jpg"))
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1) { $0.filesRoot = root.path }
        let probe = try cluster.client()
        try await cluster.waitForWorkers(1, client: probe)
        var clients: [EnlargerClient] = []
        for _ in 0..<12 { clients.append(try cluster.client()) }
        let finals = try await withThrowingTaskGroup(of: EncodedImage.self) { group in
            for (index, client) in clients.enumerated() {
                group.addTask {
                    try await client.resize(ResizeRequest(id: "p-\(index)", source: .file(path: "p.jpg"),
                                                          options: ResizeOptions(width: 200), delivery: .final))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(finals.count, 12)
        XCTAssertTrue(finals.allSatisfy { $0.bytes == finals[0].bytes })
        let totals = try await probe.status().totals
        // Every request but the first joined a job (by location, or merged by version) or was
        // answered from the cache (a request that joined a job the cache then answered counts
        // twice).
        XCTAssertGreaterThanOrEqual(totals.jobsShared + totals.cacheHits, 11, "\(totals)")
        XCTAssertEqual(totals.finished, 12)
        for client in clients { await client.close() }
        await probe.close()
    }
}
