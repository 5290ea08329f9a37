import Enlarger
import Foundation
import ImageModel
import Imaging
import XCTest
import TestSupport

/// Ordered, all-or-nothing batches through the Swift client, over real sockets.
final class BatchTests: XCTestCase {
    func testABatchReturnsEveryResultInInputOrder() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(2, concurrency: 1)
        let client = try cluster.client()
        try await cluster.waitForWorkers(2, client: client)
        // Large first, small last: results arrive out of order and come back in order.
        let files = ["bimg_vertical.jpg", "sharp_2569067123_aca715a2ee_o.jpg", "ljt_testorig.jpg",
                     "jpegdecoder_jpg-size-33x33.jpg"]
        let options = ResizeOptions(width: 100, height: 100)
        let requests = try files.map { ResizeRequest(image: try Corpus.good($0), options: options, delivery: .final) }
        let images = try await client.resize(batch: requests, id: "order")
        XCTAssertEqual(images.count, files.count)
        for (file, image) in zip(files, images) {
            let header = try Corpus.good(file).withUnsafeBytes { try ImagePipeline().header(of: $0) }
            let expected = ResizePlan.outputBox(sourceWidth: header.orientedSize.width,
                                                sourceHeight: header.orientedSize.height, options: options)
            XCTAssertEqual([image.width, image.height], [expected.width, expected.height], file)
        }
        let status = try await client.status()
        XCTAssertEqual(status.totals.batchesCompleted, 1)
        await client.close()
    }

    func testAFailingItemFailsTheBatchNamingIt() async throws {
        let cluster = try Cluster(self)
        // Two slots and a second item of 99.6 MP, sent before the damaged one: it is still
        // running when the damaged one fails in milliseconds, so there is always a live item
        // to cancel. (With one slot and small items, both before the damaged one could finish
        // first and the last one arrive after the failure, refused as late: then nothing was
        // cancelled, and a busy machine made that happen.)
        try cluster.startThreadWorkers(1, concurrency: 2)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let options = ResizeOptions(width: 80)
        let requests = [
            ResizeRequest(id: "good-0", image: try Corpus.good("ljt_testorig.jpg"), options: options),
            ResizeRequest(id: "good-1", image: try Corpus.good("thumbor_9643x10328.jpg"), options: options),
            ResizeRequest(id: "bad-2", image: try Corpus.bad("sharp_truncated.jpg"), options: options),
            ResizeRequest(id: "good-3", image: try Corpus.good("sharp_flowers.jpeg"), options: options),
        ]
        let error = await batchError(client, requests)
        guard case .batchFailed(let index, let id, let reason) = error else { return XCTFail("\(String(describing: error))") }
        XCTAssertEqual(index, 2)
        XCTAssertEqual(id, "bad-2")
        guard case .failed(.truncated, _) = reason else { return XCTFail("\(reason)") }
        let status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.batchesFailed, 1)
        XCTAssertGreaterThan(status.totals.cancelled, 0, "the items still live were cancelled")
        // Every accepted item ended once; an item that came after the failure was refused.
        XCTAssertEqual(status.totals.finished + status.totals.cancelled + status.totals.failed, status.totals.accepted,
                       "\(status.totals)")
        XCTAssertEqual(status.totals.accepted + status.totals.rejected, 4, "\(status.totals)")
        await client.close()
    }

    func testAnInvalidItemSendsNothing() async throws {
        let cluster = try Cluster(self)
        let client = try cluster.client()
        let before = try await client.status().totals.submitted
        let photo = try Corpus.good("ljt_testorig.jpg")
        let invalid = await batchError(client, [
            ResizeRequest(image: photo, options: ResizeOptions(width: 80)),
            ResizeRequest(image: photo, options: ResizeOptions(width: 80, quality: 400)),
        ])
        guard case .batchFailed(1, _, .rejected(.invalidArgument, _)) = invalid else {
            return XCTFail("an invalid item fails the batch: \(String(describing: invalid))")
        }
        let repeated = await batchError(client, [ResizeRequest(id: "x", image: photo, options: ResizeOptions(width: 8)),
                                                 ResizeRequest(id: "x", image: photo, options: ResizeOptions(width: 9))])
        guard case .batchFailed(1, "x", .duplicateID) = repeated else {
            return XCTFail("a repeated id fails the batch: \(String(describing: repeated))")
        }
        let after = try await client.status().totals.submitted
        XCTAssertEqual(after, before, "nothing was sent")
        await client.close()
    }

    func testCancellingTheTaskOrAnItemElsewhereCancelsTheWholeBatch() async throws {
        let cluster = try Cluster(self)
        try cluster.startThreadWorkers(1, concurrency: 1)
        let client = try cluster.client(), other = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let huge = try Corpus.good("thumbor_9643x10328.jpg")
        let slow = (0..<4).map { ResizeRequest(id: "slow-\($0)", image: huge, options: ResizeOptions(width: 4000),
                                               sharesResults: false) }
        let task = Task.detached { [client, slow] in await batchError(client, slow, id: "slow") }
        try await Task.sleep(for: .milliseconds(300))
        task.cancel()
        let cancelledHere = await task.value
        XCTAssertEqual(cancelledHere, .cancelled, "a cancelled batch has no results")
        var status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.batchesCancelled, 1)

        let again = (0..<3).map { ResizeRequest(id: "again-\($0)", image: huge, options: ResizeOptions(width: 4000),
                                                sharesResults: false) }
        let second = Task.detached { [client, again] in await batchError(client, again) }
        try await Task.sleep(for: .milliseconds(300))
        let cancelled = try await other.cancel("again-2")
        XCTAssertEqual(cancelled, .cancelled)
        let cancelledElsewhere = await second.value
        XCTAssertEqual(cancelledElsewhere, .cancelled, "a batch with a cancelled item has no results")
        status = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(status.totals.batchesCancelled, 2)
        await client.close()
        await other.close()
    }
}

/// How the batch failed; nil when it succeeded.
private func batchError(
    _ client: EnlargerClient, _ requests: [ResizeRequest], id: String = UUID().uuidString
) async -> EnlargerClientError? {
    do {
        _ = try await client.resize(batch: requests, id: id)
        return nil
    } catch {
        return error
    }
}
