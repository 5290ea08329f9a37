import Enlarger
import EnlargerWorker
import Fetching
import Foundation
import Locking
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
        // Only files last written a second or more before they are read are cached.
        try await Task.sleep(for: .milliseconds(1100))

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
        XCTAssertEqual(events, ["accepted", "started", "placeholder", "degraded", "final"])
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
        try await Task.sleep(for: .milliseconds(1100))
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
        try await Task.sleep(for: .milliseconds(1100))
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

    // MARK: - URL sources

    /// A cluster whose one worker may download from this host's loopback (the test servers).
    private func urlCluster(allowLoopback: Bool = true) async throws -> (Cluster, EnlargerClient) {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2) {
            if allowLoopback { $0.urlSources?.addresses = AddressPolicy(allowed: [IPNetwork("127.0.0.1/32")!]) }
        }
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        return (cluster, client)
    }

    func testAURLSourceStreamsDownloadEventsBeforeItsResultsAndIsCachedByItsValidator() async throws {
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let served = Lock(0)
        let server = try TestHTTPServer(routes: [
            "/photo.jpg": TestHTTPServer.ok(photo, headers: [("ETag", "\"v1\"")], piece: 32768, pause: .milliseconds(15)),
            "/changing.jpg": { request, connection in
                let version = served.withLock { count in
                    count += 1
                    return count
                }
                TestHTTPServer.ok(photo, headers: [("ETag", "\"v\(version)\"")])(request, connection)
            },
            "/plain.jpg": TestHTTPServer.ok(photo),
        ])
        defer { server.stop() }
        let (_, client) = try await urlCluster()
        let options = ResizeOptions(width: 320)

        var events: [RequestEvent] = []
        for try await event in client.submit(ResizeRequest(source: .url(server.url("/photo.jpg")), options: options)) {
            events.append(event)
        }
        let names = events.map(\.name)
        XCTAssertEqual(names.first, "accepted")
        XCTAssertEqual(Array(names.suffix(2)), ["degraded", "final"])
        let downloads = events.compactMap { if case .download(let step) = $0 { step } else { nil } }
        XCTAssertEqual(downloads.first, DownloadProgress(phase: .started, bytes: 0, expectedBytes: photo.count))
        XCTAssertEqual(downloads.last, DownloadProgress(phase: .finished, bytes: photo.count, expectedBytes: photo.count))
        XCTAssertGreaterThanOrEqual(downloads.count, 3, "started, progress while it trickles, finished: \(names)")
        let lastDownload = names.lastIndex { $0.hasPrefix("download") }!
        XCTAssertLessThan(lastDownload, names.firstIndex(of: "degraded")!, "the download ends before any result")
        guard case .final(let first) = events.last else { return XCTFail("\(names)") }
        XCTAssertFalse(first.cached)

        // The same URL, the same validator: answered from the cache once the head is in.
        let again = try await client.resize(ResizeRequest(source: .url(server.url("/photo.jpg")), options: options,
                                                          delivery: .final))
        XCTAssertTrue(again.cached)
        XCTAssertEqual(again.bytes, first.bytes)

        // A validator that changes, or none at all: never from the cache.
        for path in ["/changing.jpg", "/changing.jpg", "/plain.jpg", "/plain.jpg"] {
            let image = try await client.resize(ResizeRequest(source: .url(server.url(path)), options: options,
                                                              delivery: .final))
            XCTAssertFalse(image.cached, path)
            XCTAssertEqual(image.bytes, first.bytes, path)
        }
        await client.close()
    }

    func testCancelDuringADownloadStopsTheDownload() async throws {
        let body = [UInt8](repeating: 0xAB, count: 8 << 20)
        let server = try TestHTTPServer(routes: [
            "/slow.jpg": TestHTTPServer.ok(body, piece: 16384, pause: .milliseconds(20)),
        ])
        defer { server.stop() }
        let (_, client) = try await urlCluster()
        let request = ResizeRequest(id: "slow", source: .url(server.url("/slow.jpg")), options: ResizeOptions(width: 64))
        var afterCancel = 0
        var cancelled = false
        for try await event in client.submit(request) {
            if cancelled { afterCancel += 1 }
            if case .download(let step) = event, step.phase == .started, !cancelled {
                cancelled = true
                let outcome = try await client.cancel("slow")
                XCTAssertEqual(outcome, .cancelled)
            }
        }
        XCTAssertTrue(cancelled, "the download started")
        XCTAssertEqual(afterCancel, 0, "nothing after the cancel")
        // The worker closed the connection: the server stops sending long before the end.
        XCTAssertTrue(server.waitUntilIdle(timeout: .seconds(3)), "the download went on after the cancel")
        XCTAssertGreaterThanOrEqual(server.peerClosures, 1)
        XCTAssertLessThan(server.bodyBytesSent, body.count / 4, "sent \(server.bodyBytesSent) of \(body.count)")
        await client.close()
    }

    func testAnInfoRequestDownloadsOnlyTheHeader() async throws {
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let server = try TestHTTPServer(routes: [
            "/photo.jpg": TestHTTPServer.ok(photo, piece: 8192, pause: .milliseconds(2)),
        ])
        defer { server.stop() }
        let (_, client) = try await urlCluster()
        let info = try await client.info(source: .url(server.url("/photo.jpg")))
        XCTAssertEqual(info.width, 2725)
        XCTAssertEqual(info.byteSize, photo.count, "from Content-Length")
        XCTAssertTrue(server.waitUntilIdle(timeout: .seconds(3)))
        XCTAssertLessThan(server.bodyBytesSent, photo.count / 4, "sent \(server.bodyBytesSent) of \(photo.count)")
        print("info over a URL: \(server.bodyBytesSent) of \(photo.count) bytes sent")
        await client.close()
    }

    func testTheAddressGuardRefusesLoopbackByDefaultWithoutConnecting() async throws {
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let server = try TestHTTPServer(routes: ["/photo.jpg": TestHTTPServer.ok(photo)])
        defer { server.stop() }
        let (_, client) = try await urlCluster(allowLoopback: false)
        let forms = [
            server.url("/photo.jpg"),
            "http://2130706433:\(server.port)/photo.jpg",
            "http://[::ffff:127.0.0.1]:\(server.port)/photo.jpg",
            "http://localhost:\(server.port)/photo.jpg",
            "http://user@127.0.0.1:\(server.port)/photo.jpg",
            "file:///etc/passwd",
            "http://169.254.169.254/latest/meta-data/",
        ]
        for url in forms {
            do {
                _ = try await client.resize(ResizeRequest(source: .url(url), options: ResizeOptions(width: 64)))
                XCTFail("\(url) was downloaded")
            } catch {
                guard case .failed(let code, let message) = error else { XCTFail("\(url): \(error)"); continue }
                XCTAssertEqual(code, .sourceRefused, "\(url): \(message)")
            }
        }
        XCTAssertEqual(server.requests.count, 0, "no connection reached the server")
        await client.close()
    }
}
