import Enlarger
import EnlargerProtocol
import Foundation
import ImageModel
import Imaging
import SwiftProtobuf
import XCTest
import ZeroMQ
import TestSupport

/// The product over real sockets: broker, workers and the client library.
final class EndToEndTests: XCTestCase {
    /// The displayed size the pipeline itself computes for a file and options.
    private func expectedSize(_ bytes: [UInt8], _ options: ResizeOptions) throws -> (Int, Int) {
        let header = try bytes.withUnsafeBytes { try ImagePipeline().header(of: $0) }
        let oriented = header.orientedSize
        let box = ResizePlan.outputBox(sourceWidth: oriented.width, sourceHeight: oriented.height, options: options)
        return (box.width, box.height)
    }

    func testDegradedThenFinalOnCorpusPhotos() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(2, concurrency: 1)
        let client = try cluster.client()
        try await cluster.waitForWorkers(2, client: client)
        let options = ResizeOptions(width: 720, height: 588)
        let files = ["bimg_test_exif_full.jpg", "jxltestdata_flower.png.im_q85_420_progr.jpg",
                     "sharp_2569067123_aca715a2ee_o.jpg", "sharp_Landscape_6.jpg", "libvips_cd1.1.jpg"]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for file in files {
                let bytes = try Corpus.good(file)
                let expected = try expectedSize(bytes, options)
                group.addTask {
                    var events: [RequestEvent] = []
                    for try await event in client.submit(ResizeRequest(id: "e2e-\(file)", image: bytes, options: options)) {
                        events.append(event)
                    }
                    XCTAssertEqual(events.count, 5, "\(file): \(events.map(\.name))")
                    guard events.count == 5, case .accepted = events[0], case .started(1) = events[1],
                          case .placeholder(let placeholder) = events[2], case .degraded(let degraded) = events[3],
                          case .final(let final) = events[4] else {
                        return XCTFail("\(file): unexpected events \(events.map(\.name))")
                    }
                    // The placeholder says the final's exact size before any image.
                    XCTAssertEqual([placeholder.width, placeholder.height], [final.width, final.height], file)
                    XCTAssert((5...32).contains(placeholder.thumbHash.count), "\(file): \(placeholder.thumbHash.count) bytes")
                    XCTAssertEqual(final.width, expected.0, file)
                    XCTAssertEqual(final.height, expected.1, file)
                    let header = try final.bytes.withUnsafeBytes { try ImagePipeline().header(of: $0) }
                    XCTAssertEqual(header.width, expected.0, file)
                    XCTAssertEqual(header.height, expected.1, file)
                    XCTAssertLessThanOrEqual(degraded.width, final.width, file)
                    XCTAssertLessThanOrEqual(degraded.height, final.height, file)
                }
            }
            try await group.waitForAll()
        }
        let status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.finished, UInt64(files.count))
        XCTAssertEqual(status.workers.reduce(0) { $0 + $1.capacity }, 2)
        await client.close()
    }

    /// Info over the wire: a worker reads the header and the client gets the same facts as a
    /// local read, next to resizes; damage and limits fail it like a resize.
    /// Twenty clients ask for the same photo at once: one job, twenty identical finals; the
    /// next identical request is answered from the cache without a worker; without a digest
    /// the same request is worked out again.
    func testIdenticalRequestsShareOneJobAndRepeatsComeFromTheCache() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1)
        let probe = try cluster.client()
        try await cluster.waitForWorkers(1, client: probe)
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let options = ResizeOptions(width: 640)
        var clients: [EnlargerClient] = []
        for _ in 0..<20 { clients.append(try cluster.client()) }
        let finals = try await withThrowingTaskGroup(of: (Bool, EncodedImage).self) { group in
            for (index, client) in clients.enumerated() {
                group.addTask {
                    var sawStarted = false
                    for try await event in client.submit(ResizeRequest(id: "same-\(index)", image: photo, options: options)) {
                        if case .started = event { sawStarted = true }
                        if case .final(let image) = event { return (sawStarted, image) }
                    }
                    throw ClusterError("same-\(index) ended without a final")
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(finals.count, 20)
        XCTAssertTrue(finals.allSatisfy { $0.1 == finals[0].1 }, "every client got the same final")
        XCTAssertTrue(finals.allSatisfy { !$0.1.cached })
        let shared = try await probe.status().totals
        // The first request starts the job; the others join it while it runs, or (if they
        // arrive after it ended) are answered from the cache.
        XCTAssertEqual(shared.jobsShared + shared.cacheHits, 19, "\(shared)")
        XCTAssertGreaterThan(shared.jobsShared, 0)

        let again = try await clients[0].resize(ResizeRequest(image: photo, options: options, delivery: .final))
        XCTAssertTrue(again.cached)
        XCTAssertEqual(again, finals[0].1)
        var events: [String] = []
        for try await event in clients[1].submit(ResizeRequest(image: photo, options: options)) { events.append(event.name) }
        XCTAssertEqual(events, ["accepted", "final"], "a cache hit: no worker, no degraded result")
        let after = try await probe.status()
        XCTAssertEqual(after.totals.cacheHits, shared.cacheHits + 2)
        XCTAssertGreaterThan(after.cache.entries, 0)

        // The same image without a digest is worked out again.
        let fresh = try await clients[2].resize(ResizeRequest(image: photo, options: options, delivery: .final,
                                                              sharesResults: false))
        XCTAssertFalse(fresh.cached)
        XCTAssertEqual(fresh, finals[0].1)
        for client in clients { await client.close() }
        await probe.close()
    }

    func testInfoTravelsAsARequest() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        for file in ["bimg_test_exif_full.jpg", "thumbor_grayscale-icc.jpg", "jxltestdata_flower.png.im_q85_420_progr.jpg"] {
            let bytes = try Corpus.good(file)
            let local = try bytes.withUnsafeBytes { try ImagePipeline().info(of: $0) }
            async let resized = client.resize(bytes, options: ResizeOptions(width: 64))
            let remote = try await client.info(bytes)
            XCTAssertEqual(remote, local, file)
            _ = try await resized
        }
        let bomb = try Corpus.bad("jpegdecoder_max_size.jpg"), junk = try Corpus.bad("pillow_junk_jpeg_header.jpg")
        do {
            _ = try await client.info(bomb)
            XCTFail("a bomb's info was read")
        } catch {
            guard case .failed(.tooLarge, _) = error else { return XCTFail("\(error)") }
        }
        do {
            _ = try await client.info(junk, failOn: .warning)
            XCTFail("stray bytes accepted under fail_on=warning")
        } catch {
            guard case .failed(.corrupt, _) = error else { return XCTFail("\(error)") }
        }
        let status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.finished, 6)
        XCTAssertEqual(status.totals.failed, 2)
        await client.close()
    }

    /// `fail_on` travels in the Submit and reaches the worker's decoder.
    func testTheDecodePolicyTravelsWithTheRequest() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let junk = try Corpus.bad("pillow_junk_jpeg_header.jpg")
        let image = try await client.resize(junk, options: ResizeOptions(width: 64))
        XCTAssertEqual(image.width, 64)
        do {
            _ = try await client.resize(junk, options: ResizeOptions(width: 64, failOn: .warning))
            XCTFail("decoded under fail_on=warning")
        } catch {
            guard case .failed(.corrupt, _) = error else { return XCTFail("\(error)") }
        }
        let truncated = try Corpus.bad("sharp_truncated.jpg")
        let repaired = try await client.resize(truncated, options: ResizeOptions(width: 64, failOn: .none))
        XCTAssertEqual(repaired.width, 64)
        await client.close()
    }

    /// PNG, WebP, HEIC, AVIF, GIF and JPEG XL through the service: the accept list chooses the
    /// output, the result says which type it is, and notes travel with it.
    func testOtherFormatsThroughTheService() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let rgba = try SampleImages.bytes("png-rgba8.png")
        var options = ResizeOptions(width: 48)
        options.accept = [.jpeg, .avif, .png]
        let avif = try await client.resize(rgba, options: options)
        XCTAssertEqual(avif.format, .avif)
        XCTAssertEqual(Array(avif.bytes[4..<12]), Array("ftypavif".utf8))
        options.flatten = true
        options.background = RGBColour(hex: "#123456")!
        let flattened = try await client.resize(rgba, options: options)
        XCTAssertEqual(flattened.format, .jpeg)
        XCTAssertTrue(flattened.notes.contains { $0.contains("#123456") }, "\(flattened.notes)")
        do {
            _ = try await client.resize(rgba, options: ResizeOptions(width: 48, format: .jpeg).accepting([.jpeg]))
            XCTFail("transparency went to JPEG without flattening")
        } catch {
            guard case .failed(.invalidArgument, _) = error else { return XCTFail("\(error)") }
        }
        // HEIC in: the thumbnail item first, then the final, in WebP.
        let heic = try SampleImages.bytes("heic-thumbnail.heic")
        let events = try await collect(client.submit(ResizeRequest(image: heic, options: ResizeOptions(width: 400, format: .webp))))
        XCTAssertEqual(events.map(\.name), ["accepted", "started", "placeholder", "degraded", "final"])
        guard case .placeholder(let placeholder) = events[2], case .degraded(let degraded) = events[3],
              case .final(let final) = events[4] else { return XCTFail() }
        XCTAssertEqual([placeholder.width, placeholder.height], [final.width, final.height])
        XCTAssertEqual(degraded.width, 320)
        XCTAssertEqual(final.width, 400)
        XCTAssertEqual(final.format, .webp)
        let info = try await client.info(try SampleImages.bytes("avif-rgba.avif"))
        XCTAssertEqual(info.format, "avif")
        XCTAssertTrue(info.hasAlpha)
        // GIF in, transparency kept in WebP; an animation's note travels with its result.
        options = ResizeOptions(width: 48)
        options.accept = [.jpeg, .webp]
        let gif = try await client.resize(try SampleImages.bytes("gif-transparent.gif"), options: options)
        XCTAssertEqual(gif.format, .webp)
        let animated = try await client.resize(try SampleImages.bytes("gif-animated.gif"), options: options)
        XCTAssertEqual(animated.format, .jpeg)
        XCTAssertTrue(animated.notes.contains { $0.contains("first frame") }, "\(animated.notes)")
        let jxl = try await client.resize(try SampleImages.bytes("jxl-lossy-p3.jxl"), options: ResizeOptions(width: 48))
        XCTAssertEqual([jxl.width, jxl.height], [48, 32])
        let jxlInfo = try await client.info(try SampleImages.bytes("jxl-rgba.jxl"))
        XCTAssertEqual([jxlInfo.format, jxlInfo.colorSpace], ["jxl", "rgb"])
        XCTAssertTrue(jxlInfo.hasAlpha)
        await client.close()
    }

    func testDeliveryModesAndFailures() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let photo = try Corpus.good("sharp_flowers.jpeg")
        let options = ResizeOptions(width: 300)

        let finalOnly = try await collect(client.submit(ResizeRequest(image: photo, options: options, delivery: .final)))
        XCTAssertEqual(finalOnly.map(\.name), ["accepted", "started", "placeholder", "final"])
        let degradedOnly = try await collect(client.submit(ResizeRequest(image: photo, options: options, delivery: .degraded)))
        XCTAssertEqual(degradedOnly.map(\.name), ["accepted", "started", "placeholder", "degraded"])
        // Asked for none, none comes.
        var plain = ResizeRequest(image: photo, options: options, delivery: .final)
        plain.placeholder = false
        plain.sharesResults = false  // not from the cache, where the one above left its final
        let quiet = try await collect(client.submit(plain))
        XCTAssertEqual(quiet.map(\.name), ["accepted", "started", "final"])

        // A bad image fails with its imaging code; the worker and broker keep serving.
        do {
            _ = try await collect(client.submit(ResizeRequest(image: try Corpus.bad("sharp_truncated.jpg"), options: options)))
            XCTFail("a truncated JPEG must fail")
        } catch let error as EnlargerClientError {
            guard case .failed(.truncated, let message) = error else { return XCTFail("unexpected \(error)") }
            XCTAssertFalse(message.isEmpty)
        }
        let resized = try await client.resize(photo, options: options)
        XCTAssertEqual(resized.width, 300)

        // Cancel answers: unknown id, finished request.
        let unknown = try await client.cancel("never-submitted")
        XCTAssertEqual(unknown, .unknown)
        _ = try await collect(client.submit(ResizeRequest(id: "done-1", image: photo, options: options, delivery: .final)))
        let finished = try await client.cancel("done-1")
        XCTAssertEqual(finished, .finished)
        await client.close()
    }

    func testDuplicateLiveIDFromAnotherConnectionIsRefused() async throws {
        let cluster = try Cluster(self)
        let first = try cluster.client(), second = try cluster.client()
        // No worker yet: the first request waits, its id live, while the duplicate arrives.
        let photo = try Corpus.good("exifsamples_DSCN0010.jpg")
        let original = first.submit(ResizeRequest(id: "dup", image: photo, options: .init(width: 200), delivery: .final))
        var iterator = original.makeAsyncIterator()
        let accepted = try await iterator.next()
        XCTAssertEqual(accepted?.name, "accepted")
        do {
            _ = try await collect(second.submit(ResizeRequest(id: "dup", image: photo, options: .init(width: 100))))
            XCTFail("the duplicate must be refused")
        } catch let error as EnlargerClientError {
            guard case .duplicateID = error else { return XCTFail("unexpected \(error)") }
        }
        try cluster.startThreadWorkers(1, concurrency: 1)
        var rest: [String] = []
        while let event = try await iterator.next() { rest.append(event.name) }
        XCTAssertEqual(rest, ["started", "placeholder", "final"], "the first request is untouched")
        await first.close()
        await second.close()
    }

    /// Every kind of malformed input on both broker sockets, each followed by a good request
    /// that still succeeds.
    func testMalformedInputNeverStopsTheBroker() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let photo = try Corpus.good("ljt_testorig.jpg")
        let context = try Context()
        let raw = try Socket(context, .dealer)
        try raw.connect(cluster.clientsEndpoint)
        let rawWorker = try Socket(context, .dealer)
        try rawWorker.connect(cluster.workersEndpoint)
        defer {
            raw.close()
            rawWorker.close()
        }

        var submit = Enlarger_V1_ClientToBroker()
        submit.submit.requestID = "raw-1"
        submit.submit.spec.width = 10
        let submitHeader: [UInt8] = try submit.serializedBytes()
        var ready = Enlarger_V1_WorkerToBroker()
        ready.ready.capacity = 1
        let readyHeader: [UInt8] = try ready.serializedBytes()
        let emptyHeader: [UInt8] = try Enlarger_V1_ClientToBroker().serializedBytes()
        let clientTag = ProtocolTag.client.bytes, workerTag = ProtocolTag.worker.bytes

        let cases: [(String, Socket, [[UInt8]], expectReply: Bool)] = [
            ("wrong tag", raw, [Array("HTTP/1.1".utf8), submitHeader, photo], true),
            ("garbage protobuf", raw, [clientTag, [0xFF, 0xFF, 0xFF, 0x01], photo], true),
            ("tag only", raw, [clientTag], true),
            ("submit without its payload", raw, [clientTag, submitHeader], true),
            ("extra frames", raw, [clientTag, submitHeader, photo, photo], true),
            ("no message kind", raw, [clientTag, emptyHeader], true),
            ("worker message on the client socket", raw, [workerTag, readyHeader], true),
            ("client message on the worker socket", rawWorker, [clientTag, submitHeader, photo], false),
            ("garbage on the worker socket", rawWorker, [workerTag, [0x08, 0x96]], false),
            ("empty frame", raw, [[]], true),
        ]
        for (name, socket, frames, expectReply) in cases {
            for (index, frame) in frames.enumerated() {
                XCTAssertTrue(try socket.send(frame, index < frames.count - 1 ? .more : []), name)
            }
            if expectReply {
                let reply = try receive(raw, timeout: .seconds(5))
                XCTAssertNotNil(reply, "\(name): the sender is told")
                if let reply {
                    let message = try BrokerToClientMessage<[UInt8]>(frames: reply.map(\.bytes))
                    switch message {
                    case .error(let error): XCTAssertEqual(error.code, .malformed, name)
                    case .rejected(let rejected): XCTAssertEqual(rejected.code, .malformed, name)
                    default: XCTFail("\(name): unexpected reply \(message)")
                    }
                }
            }
            let result = try await client.resize(photo, options: .init(width: 50))
            XCTAssertEqual(result.width, 50, "a good request after \(name)")
        }
        let status = try await client.status()
        XCTAssertGreaterThanOrEqual(status.totals.malformedDropped, UInt64(cases.count - 1))
        await client.close()
    }

    func testUnreachableBrokerFailsInBoundedTime() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-nobroker-\(UUID().uuidString)")
        let client = try EnlargerClient(brokerEndpoint: "ipc://\(directory.path)/none.sock",
                                        configuration: .init(heartbeatInterval: .milliseconds(100), missedHeartbeats: 3))
        let start = ContinuousClock.now
        do {
            _ = try await client.resize(try Corpus.good("ljt_testorig.jpg"), options: .init(width: 10))
            XCTFail("no broker: the request must fail")
        } catch let error as EnlargerClientError {
            XCTAssertEqual(error, .brokerUnreachable)
        }
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(5))
        await client.close()
    }

    /// A broker killed and restarted on the same endpoint answers Pings again, but has lost
    /// the requests. With resubmission off, the client notices the new broker instance and
    /// fails them, long before its silence limit (10 s here) would.
    func testRequestsOfARestartedBrokerFailInsteadOfHanging() async throws {
        try await withRestartedBroker(resubmit: false) { client, iterator in
            let start = ContinuousClock.now
            do {
                _ = try await iterator.next()
                XCTFail("the forgotten request must fail")
            } catch {
                XCTAssertEqual(error as? EnlargerClientError, .brokerLost)
            }
            XCTAssertLessThan(ContinuousClock.now - start, .seconds(5), "noticed by the instance change, not by silence")
            // The same client goes on working with the new broker.
            let status = try await client.status()
            XCTAssertEqual(status.queueDepth, 0)
        }
    }

    /// By default the client submits what the old broker forgot again, under the same id:
    /// the new broker holds it, and it can be cancelled there.
    func testRequestsOfARestartedBrokerAreSubmittedAgain() async throws {
        try await withRestartedBroker(resubmit: true) { client, iterator in
            var status = try await client.status()
            let deadline = ContinuousClock.now + .seconds(5)
            while status.queueDepth == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                status = try await client.status()
            }
            XCTAssertEqual(status.queueDepth, 1, "the request was submitted to the new broker")
            XCTAssertEqual(status.totals.accepted, 1)
            let outcome = try await client.cancel("orphan")
            XCTAssertEqual(outcome, .cancelled, "the new broker knows the id")
            let next = try await iterator.next()
            XCTAssertNil(next, "nothing after cancel, and no second Accepted")
        }
    }

    private func withRestartedBroker(
        resubmit: Bool, _ body: (EnlargerClient, inout RequestEvents.Iterator) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-restart-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let clients = "ipc://\(directory.path)/clients.sock", workers = "ipc://\(directory.path)/workers.sock"
        func startBroker() throws -> Process {
            let broker = Process()
            broker.executableURL = Cluster.enlargerBinary
            broker.arguments = ["broker", "--clients", clients, "--workers", workers, "--heartbeat-ms", "200"]
            broker.standardError = FileHandle.nullDevice
            try broker.run()
            return broker
        }
        let first = try startBroker()
        let client = try EnlargerClient(
            brokerEndpoint: clients,
            configuration: .init(heartbeatInterval: .milliseconds(200), missedHeartbeats: 50,
                                 resubmitAfterBrokerRestart: resubmit))
        // No workers: the request stays queued at the broker.
        var iterator = client.submit(ResizeRequest(id: "orphan", image: try Corpus.good("ljt_testorig.jpg"),
                                                   options: .init(width: 10))).makeAsyncIterator()
        let accepted = try await iterator.next()
        XCTAssertEqual(accepted?.name, "accepted")
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        let second = try startBroker()
        defer {
            second.terminate()
            second.waitUntilExit()
        }
        try await body(client, &iterator)
        await client.close()
    }

    private func collect(_ events: RequestEvents) async throws -> [RequestEvent] {
        var all: [RequestEvent] = []
        for try await event in events { all.append(event) }
        return all
    }

    private func receive(_ socket: Socket, timeout: Duration) throws -> [ZeroMQ.Message]? {
        var poller = Poller()
        _ = poller.register(socket)
        guard try poller.poll(timeout: timeout) > 0 else { return nil }
        return try socket.receiveMultipart()
    }
}

extension RequestEvent {
    var name: String {
        switch self {
        case .accepted: "accepted"
        case .started: "started"
        case .placeholder: "placeholder"
        case .degraded: "degraded"
        case .final: "final"
        case .info: "info"
        case .download(let progress): "download \(progress.phase)"
        }
    }
}
