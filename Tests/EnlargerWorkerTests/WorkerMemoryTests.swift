import EnlargerProtocol
import ImageModel
import Imaging
import Logging
import TestSupport
import XCTest

@testable import EnlargerWorker

/// The worker's memory budget, allocation failures and backpressure, against a fake broker
/// over ipc.
final class WorkerMemoryTests: XCTestCase {
    private var endpoints: TemporaryEndpoints!

    override func setUpWithError() throws {
        endpoints = try TemporaryEndpoints(self)
    }

    private func start(
        concurrency: Int = 2, memoryBudget: Int = 1 << 34, limits: DecodeLimits = DecodeLimits(),
        sendHighWaterMark: Int32? = nil, brokerReceiveHighWaterMark: Int32? = nil
    ) throws -> (FakeBroker, WorkerService, peer: [UInt8]) {
        let endpoint = endpoints.ipc("workers")
        let broker = try FakeBroker(endpoint: endpoint, receiveHighWaterMark: brokerReceiveHighWaterMark)
        var logger = Logger(label: "test.worker")
        logger.logLevel = .warning
        var configuration = WorkerConfiguration(
            brokerEndpoint: endpoint, concurrency: concurrency, limits: limits, memoryBudget: memoryBudget, logger: logger)
        configuration.sendHighWaterMark = sendHighWaterMark
        let service = try WorkerService(configuration: configuration)
        let handle = service.start()
        addTeardownBlock { try handle.stop() }
        let (peer, _) = try broker.expectReady()
        return (broker, service, peer)
    }

    /// Every frame about the given jobs until each has its terminal frame; fails on a second
    /// terminal frame or anything after one.
    private func collect(_ ids: Set<UInt64>, from broker: FakeBroker, timeout: Duration = .seconds(60),
                         file: StaticString = #filePath, line: UInt = #line) throws -> [UInt64: [WorkerToBrokerMessage<[UInt8]>]] {
        var frames: [UInt64: [WorkerToBrokerMessage<[UInt8]>]] = [:]
        var ended = Set<UInt64>()
        let deadline = ContinuousClock.now + timeout
        while ended != ids, case let remaining = deadline - .now, remaining > .zero,
              let received = try broker.receive(timeout: remaining) {
            guard let id = received.message.jobID else { continue }
            XCTAssertFalse(ended.contains(id), "job \(id): \(received.message) after its terminal frame", file: file, line: line)
            frames[id, default: []].append(received.message)
            if received.message.isTerminal { ended.insert(id) }
        }
        XCTAssertEqual(ended, ids, "every job ended", file: file, line: line)
        XCTAssertEqual(try broker.collect(for: .milliseconds(100)).compactMap(\.message.jobID), [], file: file, line: line)
        return frames
    }

    private func waitUntil(_ what: String, timeout: Duration = .seconds(10), _ condition: () -> Bool) throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else { return XCTFail("not within \(timeout): \(what)") }
            Thread.sleep(forTimeInterval: 0.005)
        }
    }

    private func estimate(_ file: String, _ options: ResizeOptions, _ delivery: ImageModel.Delivery) throws -> Int {
        let bytes = try Corpus.good(file)
        return try bytes.withUnsafeBytes { raw in
            try ImagePipeline().prepare(raw, options: options, delivery: delivery).memoryEstimate.bytes
        }
    }

    // MARK: Budget

    /// A poison image next to ordinary photos under a small budget: it fails TOO_LARGE from
    /// its header at once, the photos succeed, and the worker keeps serving.
    func testPoisonImageFailsAtOnceWhileOrdinaryPhotosSucceed() throws {
        let (broker, service, peer) = try start(concurrency: 2, memoryBudget: 256 << 20)
        let poison = try Corpus.good("thumbor_9643x10328.jpg")
        let photos = ["sharp_2569067123_aca715a2ee_o.jpg", "bimg_test_exif_full.jpg", "exifsamples_DSCN0010.jpg",
                      "jxltestdata_flower.png.im_q85_420_progr.jpg"]
        try broker.send(job(1, width: 320, image: try Corpus.good(photos[0])), to: peer)
        let sentAt = ContinuousClock.now
        try broker.send(job(2, width: 9000, delivery: .final, image: poison), to: peer)
        for (index, file) in photos.dropFirst().enumerated() {
            try broker.send(job(UInt64(3 + index), width: 320, image: try Corpus.good(file)), to: peer)
        }
        var failedAt: ContinuousClock.Instant?
        var frames: [UInt64: [WorkerToBrokerMessage<[UInt8]>]] = [:]
        var ended = Set<UInt64>()
        let all = Set(UInt64(1)...UInt64(1 + photos.count))
        let deadline = ContinuousClock.now + .seconds(60)
        while ended != all, case let remaining = deadline - .now, remaining > .zero,
              let received = try broker.receive(timeout: remaining) {
            guard let id = received.message.jobID else { continue }
            frames[id, default: []].append(received.message)
            if received.message.isTerminal { ended.insert(id) }
            if id == 2, received.message.isTerminal { failedAt = received.at }
        }
        XCTAssertEqual(ended, all)
        guard case .jobFailed(let failed)? = frames[2]?.last else { return XCTFail("poison: \(frames[2] ?? [])") }
        XCTAssertEqual(failed.code, .tooLarge)
        XCTAssert(failed.message.contains("memory budget of 256.0 MiB"), failed.message)
        XCTAssert(failed.message.contains("can never run"), failed.message)
        let latency = try XCTUnwrap(failedAt) - sentAt
        print("poison image refused in \(latency): \(failed.message)")
        XCTAssertLessThan(latency, .milliseconds(1000), "from its header, without decoding 99.6 MP")
        for id in all.subtracting([2]) {
            guard case .jobResult(let result, _)? = frames[id]?.last else { return XCTFail("job \(id): \(frames[id] ?? [])") }
            XCTAssertTrue(result.terminal)
            XCTAssertEqual(result.width, 320)
        }
        // Still serving, and nothing held.
        try broker.send(job(9, width: 200, image: try Corpus.good(photos[0])), to: peer)
        XCTAssertTrue(try collect([9], from: broker)[9]?.last?.isTerminal == true)
        try waitUntil("the budget is free again") { service.memoryInUse == 0 && service.jobCount == 0 }
    }

    /// With room for one large job at a time, the second waits (holding no pixel memory),
    /// stays cancellable while it waits, and a third runs when the first ends.
    func testJobsWaitForTheBudgetAndStayCancellable() throws {
        let huge = try Corpus.good("thumbor_9643x10328.jpg")
        let large = ResizeOptions(width: 9000)
        let one = try estimate("thumbor_9643x10328.jpg", large, .final)
        let (broker, service, peer) = try start(concurrency: 3, memoryBudget: one * 3 / 2)
        try broker.send(job(1, width: 9000, delivery: .final, image: huge), to: peer)
        try waitUntil("job 1 admitted") { service.memoryInUse == one }
        try broker.send(job(2, width: 9000, delivery: .final, image: huge), to: peer)
        try waitUntil("job 2 waiting for memory") { service.jobsWaitingForMemory == 1 }
        XCTAssertEqual(service.memoryInUse, one, "the waiting job holds nothing")

        let cancelledAt = ContinuousClock.now
        try broker.send(cancelJob(2), to: peer)
        var acknowledged: ContinuousClock.Instant?
        let deadline = ContinuousClock.now + .seconds(10)
        while acknowledged == nil, case let remaining = deadline - .now, remaining > .zero,
              let received = try broker.receive(timeout: remaining) {
            switch received.message {
            case .heartbeat, .jobStarted: continue
            case .jobCancelled(let cancelled) where cancelled.jobID == 2: acknowledged = received.at
            default: XCTFail("while waiting for JobCancelled of the waiting job: \(received.message)")
            }
        }
        let acknowledgedAt = try XCTUnwrap(acknowledged, "JobCancelled for the job waiting for memory")
        print("a job waiting for memory was cancelled in \(acknowledgedAt - cancelledAt)")
        XCTAssertLessThan(acknowledgedAt - cancelledAt, .milliseconds(200))
        XCTAssertEqual(service.jobsWaitingForMemory, 0)

        // A small job behind a waiting large one would wait too (first come, first served);
        // here nothing waits, so it runs beside job 1.
        try broker.send(job(3, width: 320, delivery: .final, image: try Corpus.good("exifsamples_DSCN0010.jpg")), to: peer)
        let frames = try collect([3], from: broker, timeout: .seconds(120))
        guard case .jobResult(let small, _)? = frames[3]?.last else { return XCTFail("\(frames[3] ?? [])") }
        XCTAssertEqual(small.width, 320)
        // Job 1 scales 99.6 MP to 9000 px: seconds optimised, minutes under ThreadSanitizer.
        // It has played its part (holding memory while the others came and went): cancelled
        // rather than awaited, it ends once, and its memory comes back.
        if frames[1]?.last?.isTerminal != true {
            try broker.send(cancelJob(1), to: peer)
            let rest = try collect([1], from: broker, timeout: .seconds(120))
            XCTAssertTrue(rest[1]?.last?.isTerminal == true)
        }
        try waitUntil("the budget is free again") { service.memoryInUse == 0 }
    }

    // MARK: Allocation failure

    /// A buffer over the allocation limit fails that job cleanly with TOO_LARGE; the next job
    /// on the same worker succeeds.
    func testAllocationFailureFailsTheJobAndTheNextOneSucceeds() throws {
        let (broker, service, peer) = try start(limits: DecodeLimits(maxBufferBytes: 16 << 20))
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")  // 2725×2225: 18.2 MB decoded
        try broker.send(job(1, width: 2000, delivery: .final, image: photo), to: peer)
        let first = try collect([1], from: broker)
        guard case .jobFailed(let failed)? = first[1]?.last else { return XCTFail("\(first[1] ?? [])") }
        XCTAssertEqual(failed.code, .tooLarge)
        XCTAssert(failed.message.contains("decoded image"), failed.message)
        XCTAssert(failed.message.contains("above the limit of 16.0 MiB per buffer"), failed.message)
        print("allocation failure reported as: \(failed.message)")
        // Shrink-on-load (to 1/4) keeps the next job's buffers under the limit.
        try broker.send(job(2, width: 300, delivery: .final, image: photo), to: peer)
        let next = try collect([2], from: broker)
        guard case .jobResult(let result, _)? = next[2]?.last else { return XCTFail("\(next[2] ?? [])") }
        XCTAssertEqual(result.width, 300)
        try waitUntil("the budget is free again") { service.memoryInUse == 0 }
    }

    // MARK: Backpressure

    /// The broker stops reading while jobs finish: the worker's socket refuses messages, and
    /// still every job's terminal frame arrives, once, when the broker reads again.
    func testTerminalFramesAreNotDroppedWhenTheBrokerConnectionIsFull() throws {
        let (broker, _, peer) = try start(concurrency: 4, sendHighWaterMark: 1, brokerReceiveHighWaterMark: 1)
        let photo = try Corpus.good("exifsamples_DSCN0010.jpg")  // 640×480
        let ids = Set(UInt64(1)...UInt64(24))
        for id in ids.sorted() {
            // Uncompressed full-size output: ~0.9 MB per frame fills the pipes quickly.
            var message = job(id, width: 640, delivery: .progressive, image: photo)
            if case .job(var spec, let image) = message {
                spec.spec.format = .pnm
                message = .job(spec, image: image)
            }
            try broker.send(message, to: peer)
        }
        // Not reading for a while (less than the worker's 3 s silence limit).
        Thread.sleep(forTimeInterval: 1.5)
        let frames = try collect(ids, from: broker)
        var dropped = 0
        for id in ids {
            let kinds = frames[id]?.map { WorkerCoreHarness.summary($0) } ?? []
            XCTAssertEqual(kinds.filter { $0.hasPrefix("final") }.count, 1, "job \(id): \(kinds)")
            dropped += 3 - kinds.count
        }
        print("all 24 terminal frames arrived; \(dropped) optional frames (JobStarted, degraded) were dropped")
    }
}
