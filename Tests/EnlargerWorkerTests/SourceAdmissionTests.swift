import EnlargerProtocol
import Fetching
import Foundation
import ImageModel
import Imaging
import Locking
import Logging
import TestSupport
import XCTest

@testable import EnlargerWorker

/// Admission before bytes: a file or URL job reads nothing before its source bytes are
/// admitted against the memory budget; what it does not need is given back.
final class SourceAdmissionCoreTests: XCTestCase {
    func testASourceIsReadOnlyOnceItsBytesAreAdmittedAndItsEstimateReplacesThem() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        harness.job(2)
        let (t1, t2) = (harness.token(1), harness.token(2))
        harness.estimated(t1, bytes: 70)
        XCTAssertEqual(harness.admitted, [t1])
        harness.record(harness.core.jobSourceWanted(t2, bytes: 40))
        XCTAssertEqual(harness.admitted, [t1], "40 more source bytes do not fit: job 2 reads nothing yet")
        XCTAssertEqual(harness.core.jobs[t2]?.phase, .waitingForMemory)
        harness.clear()
        harness.result(t1, .final, terminal: true)
        harness.ended(t1)
        XCTAssertEqual(harness.admitted, [t2], "admitted for its bytes once job 1's memory is free")
        XCTAssertEqual(harness.core.jobs[t2]?.phase, .reading)
        XCTAssertEqual(harness.core.memoryInUse, 40)
        harness.clear()
        harness.estimated(t2, bytes: 30)
        XCTAssertEqual(harness.admitted, [t2], "its estimate fits in what it reserved: it runs at once")
        XCTAssertEqual(harness.core.jobs[t2]?.phase, .running)
        XCTAssertEqual(harness.core.memoryInUse, 30, "the unused 10 are given back")
    }

    func testASourceLargerThanTheWholeBudgetIsRefusedBeforeReading() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        let token = harness.token(1)
        harness.clear()
        harness.record(harness.core.jobSourceWanted(token, bytes: 101))
        XCTAssertEqual(harness.sentSummary, ["failed 1 tooLarge"])
        XCTAssertEqual(harness.cancelled, [token], "its thread is released without reading")
        XCTAssertEqual(harness.admitted, [])
        harness.ended(token, .failed(ImagingError(.cancelled, "cancelled before its source was admitted")))
        XCTAssertEqual(harness.core.memoryInUse, 0)
    }

    func testHoldersGrowOldestFirstAheadOfEveryOtherRequest() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        for id in 1...4 { harness.job(UInt64(id)) }
        let t = (1...4).map { harness.token(UInt64($0)) }
        harness.record(harness.core.jobSourceWanted(t[0], bytes: 30))
        harness.record(harness.core.jobSourceWanted(t[1], bytes: 10))
        harness.estimated(t[2], bytes: 20)
        XCTAssertEqual(harness.admitted, [t[0], t[1], t[2]], "two downloads may hold their bytes at once")
        harness.clear()
        harness.estimated(t[0], bytes: 80)
        harness.estimated(t[1], bytes: 25)
        harness.estimated(t[3], bytes: 5)
        XCTAssertEqual(harness.admitted, [], "job 1 must grow by 50 and job 2 by 15: both wait, and job 4 behind them")
        XCTAssertEqual(harness.yielded, [], "job 3 runs and will free its 20: no standoff")
        harness.ended(t[2])
        XCTAssertEqual(harness.admitted, [t[0]], "the oldest grows first; job 2 needs 15 more than is left")
        harness.ended(t[0])
        XCTAssertEqual(harness.admitted, [t[0], t[1], t[3]])
        XCTAssertEqual(harness.core.memoryInUse, 30)
    }

    /// Results waiting to be sent leave as the broker reads: holders kept waiting by them are
    /// in no standoff, and none throws away what it read.
    func testHoldersWaitingOnlyForTheOutboxDoNotYield() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        harness.job(2)
        let (t1, t2) = (harness.token(1), harness.token(2))
        harness.record(harness.core.jobSourceWanted(t1, bytes: 30))
        harness.record(harness.core.jobSourceWanted(t2, bytes: 30))
        harness.record(harness.core.outboxHolds(30))
        harness.clear()
        harness.estimated(t1, bytes: 45)
        harness.estimated(t2, bytes: 45)
        XCTAssertEqual(harness.yielded, [], "the outbox drains: no one yields")
        XCTAssertEqual(harness.admitted, [])
        harness.record(harness.core.outboxHolds(0))
        XCTAssertEqual(harness.admitted, [t1, t2])
        XCTAssertEqual(harness.core.memoryInUse, 90)
    }

    func testHoldersWaitingForEachOtherAreUntangledByTheYoungestYielding() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        harness.job(2)
        let (t1, t2) = (harness.token(1), harness.token(2))
        harness.record(harness.core.jobSourceWanted(t1, bytes: 40))
        harness.record(harness.core.jobSourceWanted(t2, bytes: 40))
        XCTAssertEqual(harness.admitted, [t1, t2])
        harness.clear()
        harness.estimated(t1, bytes: 90)
        XCTAssertEqual(harness.yielded, [], "job 2 still reads: it may yet need no more")
        harness.estimated(t2, bytes: 50)
        XCTAssertEqual(harness.yielded, [t2], "each waits for the other's bytes: the younger drops its own")
        XCTAssertEqual(harness.core.jobs[t2]?.phase, .yielding)
        XCTAssertEqual(harness.admitted, [], "not before its thread has really dropped them")
        XCTAssertEqual(harness.core.memoryInUse, 80)
        // Its thread drops the bytes and asks for them again.
        harness.record(harness.core.jobSourceWanted(t2, bytes: 40))
        XCTAssertEqual(harness.admitted, [t1], "job 1 grows to 90; job 2 waits for its 40 again")
        XCTAssertEqual(harness.core.memoryInUse, 90)
        harness.clear()
        harness.result(t1, .final, terminal: true)
        harness.ended(t1)
        XCTAssertEqual(harness.admitted, [t2])
        harness.estimated(t2, bytes: 50)
        XCTAssertEqual(harness.core.jobs[t2]?.phase, .running)
        XCTAssertEqual(harness.core.memoryInUse, 50)
    }

    func testAJobThatReadsAgainSendsItsVersionOnceAndIsNotCachedIfItChanged() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        let token = harness.token(1)
        harness.clear()
        harness.record(harness.core.jobSourceOpened(token, identity: Data("v1".utf8)))
        harness.record(harness.core.jobSourceOpened(token, identity: Data("v2".utf8)))
        XCTAssertEqual(harness.sentSummary, ["opened 1"], "once per attempt")
        harness.record(harness.core.jobSourceRead(token, verified: true))
        XCTAssertEqual(harness.core.jobs[token]?.verified, false, "the bytes read are not the version named")
    }

    func testAContentLengthGivesBackTheRestOfTheReservation() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        harness.job(1)
        harness.job(2)
        let (t1, t2) = (harness.token(1), harness.token(2))
        harness.record(harness.core.jobSourceWanted(t1, bytes: 64))
        harness.estimated(t2, bytes: 50)
        XCTAssertEqual(harness.admitted, [t1])
        harness.record(harness.core.jobSourceExpected(t1, bytes: 20))
        XCTAssertEqual(harness.admitted, [t1, t2])
        XCTAssertEqual(harness.core.memoryInUse, 70)
    }

    func testACancelWhileWaitingForSourceBytesLetsTheNextIn() {
        var harness = WorkerCoreHarness(memoryBudget: 100)
        for id in 1...3 { harness.job(UInt64(id)) }
        let t = (1...3).map { harness.token(UInt64($0)) }
        harness.estimated(t[0], bytes: 60)
        harness.record(harness.core.jobSourceWanted(t[1], bytes: 60))
        harness.estimated(t[2], bytes: 30)
        XCTAssertEqual(harness.admitted, [t[0]])
        harness.clear()
        harness.cancel(2)
        XCTAssertEqual(harness.admitted, [t[2]])
        harness.ended(t[1], .failed(ImagingError(.cancelled, "cancelled before its source was admitted")))
        XCTAssertEqual(harness.sentSummary, ["cancelled 2"])
        XCTAssertEqual(harness.core.memoryInUse, 90)
    }
}

/// The same on a real worker: a download waits for the budget before it connects.
final class SourceAdmissionServiceTests: XCTestCase {
    private func worker(budget: Int, maxInputBytes: Int) throws -> FakeBroker {
        let endpoints = try TemporaryEndpoints(self)
        let endpoint = endpoints.ipc("workers")
        let broker = try FakeBroker(endpoint: endpoint)
        var logger = Logger(label: "test.worker")
        logger.logLevel = .warning
        var configuration = WorkerConfiguration(brokerEndpoint: endpoint, concurrency: 2, logger: logger)
        configuration.memoryBudget = budget
        configuration.limits.maxInputBytes = maxInputBytes
        configuration.urlSources?.addresses = AddressPolicy(allowed: [IPNetwork("127.0.0.1/32")!])
        let handle = try WorkerService(configuration: configuration).start()
        addTeardownBlock { try handle.stop() }
        return broker
    }

    private func urlJob(_ id: UInt64, _ url: String) -> BrokerToWorkerMessage<[UInt8]> {
        var job = Enlarger_V1_Job()
        job.jobID = id
        job.attempt = 1
        job.requestID = "request-\(id)"
        job.spec.width = 64
        job.delivery = .final
        job.source.url.url = url
        return .job(job, image: [])
    }

    /// The terminal frames of `ids`, by id; other frames are passed over.
    private func terminals(_ ids: Set<UInt64>, _ broker: FakeBroker) throws -> [UInt64: WorkerToBrokerMessage<[UInt8]>] {
        var found: [UInt64: WorkerToBrokerMessage<[UInt8]>] = [:]
        let deadline = ContinuousClock.now + .seconds(20)
        while found.count < ids.count, case let left = deadline - .now, left > .zero,
              let received = try broker.receive(timeout: left) {
            if let id = received.message.jobID, ids.contains(id), received.message.isTerminal { found[id] = received.message }
        }
        XCTAssertEqual(Set(found.keys), ids, "terminal frames")
        return found
    }

    func testADownloadWaitsForTheBudgetBeforeItConnects() throws {
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let release = DispatchSemaphore(value: 0)
        let server = try TestHTTPServer(routes: [
            // Chunked, so its whole reservation (the input limit) is held while it stalls.
            "/held.jpg": { _, connection in
                guard connection.send(head: 200, reason: "OK", headers: [("Transfer-Encoding", "chunked")]) else { return }
                release.wait()
                _ = connection.send(chunk: [0x00, 0x01, 0x02])
                _ = connection.send(Array("0\r\n\r\n".utf8))
                _ = connection.waitForPeerClose(timeout: .seconds(2))
            },
            "/photo.jpg": TestHTTPServer.ok(photo),
        ])
        addTeardownBlock { release.signal(); server.stop() }
        let limit = 16 << 20
        let broker = try worker(budget: limit + limit / 2, maxInputBytes: limit)
        let (peer, _) = try broker.expectReady()
        try broker.send(urlJob(1, server.url("/held.jpg")), to: peer)
        let deadline = ContinuousClock.now + .seconds(10)
        while !server.requests.contains(where: { $0.path == "/held.jpg" }), ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.01)
        }
        try broker.send(urlJob(2, server.url("/photo.jpg")), to: peer)
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(server.requests.map(\.path), ["/held.jpg"],
                       "job 2's 16 MiB do not fit beside job 1's: it has not even connected")
        release.signal()
        let ends = try terminals([1, 2], broker)
        guard case .jobFailed? = ends[1] else { return XCTFail("job 1 is not an image: \(String(describing: ends[1]))") }
        guard case .jobResult(let result, _)? = ends[2] else { return XCTFail("job 2: \(String(describing: ends[2]))") }
        XCTAssertEqual(result.width, 64)
        XCTAssertEqual(server.requests.map(\.path), ["/held.jpg", "/photo.jpg"])
    }

    /// Two file jobs that both hold their bytes and both need more than is left beside the
    /// other's: without the youngest yielding they would wait for each other forever.
    func testTwoFileJobsThatCannotGrowBesideEachOtherBothFinish() throws {
        let endpoints = try TemporaryEndpoints(self)
        let root = endpoints.directory.appendingPathComponent("root", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        try Data(photo).write(to: root.appendingPathComponent("photo.jpg"))
        var spec = Enlarger_V1_ResizeSpec()
        spec.width = 64
        let options = try ResizeOptions(spec)
        let estimate = try photo.withUnsafeBytes { input in
            try ImagePipeline().prepare(input, options: options, delivery: .final).memoryEstimate.bytes
        }
        XCTAssertGreaterThan(estimate, photo.count)
        // Both files' bytes fit at once, but neither estimate fits beside the other's bytes.
        let budget = estimate + photo.count - 1
        XCTAssertLessThanOrEqual(2 * photo.count, budget)

        let endpoint = endpoints.ipc("workers")
        let broker = try FakeBroker(endpoint: endpoint)
        var logger = Logger(label: "test.worker")
        logger.logLevel = .warning
        var configuration = WorkerConfiguration(brokerEndpoint: endpoint, concurrency: 2, logger: logger)
        configuration.memoryBudget = budget
        configuration.filesRoot = root.path
        let handle = try WorkerService(configuration: configuration).start()
        addTeardownBlock { try handle.stop() }
        let (peer, _) = try broker.expectReady()
        for id in [1, 2] as [UInt64] {
            var job = Enlarger_V1_Job()
            job.jobID = id
            job.attempt = 1
            job.requestID = "request-\(id)"
            job.spec = spec
            job.delivery = .final
            job.source.file.path = "photo.jpg"
            try broker.send(.job(job, image: []), to: peer)
        }
        let ends = try terminals([1, 2], broker)
        for id in [1, 2] as [UInt64] {
            guard case .jobResult(let result, _)? = ends[id] else { return XCTFail("job \(id): \(String(describing: ends[id]))") }
            XCTAssertEqual(result.width, 64)
        }
    }

    func testADownloadWhoseLimitExceedsTheBudgetIsRefusedWithoutConnecting() throws {
        let server = try TestHTTPServer(routes: ["/photo.jpg": TestHTTPServer.ok([0xFF, 0xD8])])
        addTeardownBlock { server.stop() }
        let broker = try worker(budget: 1 << 20, maxInputBytes: 2 << 20)
        let (peer, _) = try broker.expectReady()
        try broker.send(urlJob(1, server.url("/photo.jpg")), to: peer)
        guard case .jobFailed(let failed)? = try terminals([1], broker)[1] else { return XCTFail("not refused") }
        XCTAssertEqual(failed.code, .tooLarge)
        XCTAssertTrue(failed.message.contains("its source may need"), failed.message)
        XCTAssertEqual(server.requests.count, 0, "not a byte was asked for")
    }
}
