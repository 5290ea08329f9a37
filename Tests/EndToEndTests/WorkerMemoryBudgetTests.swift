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
        let message = try await runPoisonBesidePhotos(workerArguments: ["--concurrency", "2", "--memory-budget", "256M"])
        XCTAssert(message.contains("memory budget"), message)
    }

    /// A real cap (`ulimit -v`, 1 GiB) and the default budget: the budget comes from the cap,
    /// so the poison is refused from its header.
    func testUnderAMemoryCapTheDefaultBudgetRefusesThePoison() async throws {
        let message = try await runPoisonBesidePhotos(workerArguments: ["--concurrency", "2"], addressSpaceCap: 1 << 30)
        XCTAssert(message.contains("memory budget"), message)
    }

    /// A real cap (640 MiB) with a budget set far above it (a misconfiguration): the poison is
    /// admitted, its allocations fail, and that is an error for the poison alone, not an abort.
    func testUnderAMemoryCapAnAllocationFailureFailsOnlyThePoison() async throws {
        let message = try await runPoisonBesidePhotos(
            workerArguments: ["--concurrency", "1", "--memory-budget", "8G"], addressSpaceCap: 640 << 20, quickRefusal: false)
        XCTAssert(message.contains("out of memory") || message.contains("no memory"), message)
    }

    /// Sends the 99.6 MP poison and four ordinary photos to one `enlarger worker` process
    /// (under `ulimit -v addressSpaceCap` when given); the photos must be resized, the poison
    /// must fail TOO_LARGE, and the same process must go on serving. Returns the poison's message.
    private func runPoisonBesidePhotos(
        workerArguments: [String], addressSpaceCap: Int? = nil, quickRefusal: Bool = true
    ) async throws -> String {
        let cluster = try Cluster(self)
        let worker = Process()
        let arguments = ["worker", "--broker", cluster.workersEndpoint, "--heartbeat-ms",
                         "\(Int(milliseconds(cluster.heartbeat)))", "--name", "capped"] + workerArguments
        if let addressSpaceCap {
            worker.executableURL = URL(fileURLWithPath: "/bin/sh")
            worker.arguments = ["-c", "ulimit -v \(addressSpaceCap >> 10) && exec \"$0\" \"$@\"",
                                Cluster.enlargerBinary.path] + arguments
        } else {
            worker.executableURL = Cluster.enlargerBinary
            worker.arguments = arguments
        }
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
            let got = switch outcome {
            case .success(let image): "a \(image.width)×\(image.height) image"
            case .failure(let error): "\(error)"
            }
            XCTFail("the poison image must fail TOO_LARGE, got \(got)")
            return ""
        }
        print("poison image failed after \(latency) with: \(message)")
        if quickRefusal {
            XCTAssertLessThan(latency, .seconds(2), "refused from its header, not after decoding 99.6 MP")
        }

        // The same process still serves, with nothing held.
        XCTAssertTrue(worker.isRunning)
        let again = try await client.resize(photos[0], options: ResizeOptions(width: 200))
        XCTAssertEqual(again.width, 200)
        let after = try await cluster.waitUntilIdle(client: client)
        XCTAssertEqual(after.workers.map(\.pid), before.workers.map(\.pid), "the same worker process, not a restarted one")
        XCTAssertEqual(after.totals.workersLost, 0)
        await client.close()
        return message
    }
}
