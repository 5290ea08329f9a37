import Enlarger
import Foundation
import ImageModel
import Imaging
import TestSupport
import XCTest

/// A poison image among ordinary photos, through the broker to an `enlarger worker` process
/// with a small memory budget: the poison fails TOO_LARGE from its header, the photos are
/// resized, and the worker process keeps serving.
final class WorkerMemoryBudgetTests: XCTestCase {
    func testPoisonImageFailsTooLargeWhileOrdinaryPhotosSucceedAndTheWorkerLives() async throws {
        let cluster = try Cluster(self)
        let worker = Process()
        worker.executableURL = Cluster.enlargerBinary
        worker.arguments = ["worker", "--broker", cluster.workersEndpoint, "--concurrency", "2",
                            "--heartbeat-ms", "\(Int(milliseconds(cluster.heartbeat)))", "--name", "small-budget",
                            "--memory-budget", "256M"]
        try worker.run()
        addTeardownBlock {
            if worker.isRunning {
                worker.terminate()
                worker.waitUntilExit()
            }
        }
        let client = try cluster.client()
        let before = try await cluster.waitForWorkers(1, client: client)

        let poison = try Corpus.good("thumbor_9643x10328.jpg")
        let photos = try ["sharp_2569067123_aca715a2ee_o.jpg", "bimg_test_exif_full.jpg", "sharp_gain-map.jpg",
                          "jxltestdata_flower.png.im_q85_420_progr.jpg"].map { try Corpus.good($0) }
        let started = ContinuousClock.now
        let poisonOutcome = Task { () -> (Result<EncodedImage, EnlargerClientError>, Duration) in
            do throws(EnlargerClientError) {
                return (.success(try await client.resize(poison, options: ResizeOptions(width: 9000))), .now - started)
            } catch {
                return (.failure(error), .now - started)
            }
        }
        let ordinary = photos.map { photo in
            Task { try await client.resize(photo, options: ResizeOptions(width: 320)) }
        }
        for task in ordinary {
            let image = try await task.value
            XCTAssertEqual(image.width, 320)
            XCTAssertEqual(image.bytes.prefix(2), [0xFF, 0xD8])
        }
        let (outcome, latency) = await poisonOutcome.value
        guard case .failure(.failed(.tooLarge, let message)) = outcome else {
            return XCTFail("the poison image must fail TOO_LARGE, got \(outcome)")
        }
        print("poison image failed after \(latency) with: \(message)")
        XCTAssert(message.contains("memory budget"), message)
        XCTAssertLessThan(latency, .seconds(2), "refused from its header, not after decoding 99.6 MP")

        // The same process still serves, with nothing held.
        XCTAssertTrue(worker.isRunning)
        let again = try await client.resize(photos[0], options: ResizeOptions(width: 200))
        XCTAssertEqual(again.width, 200)
        let after = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(after.workers.map(\.pid), before.workers.map(\.pid), "the same worker process, not a restarted one")
        await client.close()
    }
}
