import EnlargerProtocol
import Foundation
import Logging
import XCTest
import TestSupport

@testable import EnlargerWorker

/// File sources on a real worker against a fake broker: read beneath the files root with
/// openat2, refused when they would leave it, named by their version, and read only as far
/// as the header for an info request.
final class FileSourceTests: XCTestCase {
    private var endpoints: TemporaryEndpoints!
    /// The files root: photo.jpg, nested/deeper/photo.jpg, inner-link.jpg → photo.jpg,
    /// escape.jpg → ../outside.jpg, up → .., absolute.jpg → /etc/hostname, pipe.jpg (a FIFO),
    /// folder.jpg (a directory), huge.jpg (a real header, sparse to 2 GiB).
    private var root: URL!
    private var photo: [UInt8] = []

    override func setUpWithError() throws {
        endpoints = try TemporaryEndpoints(self)
        let base = endpoints.directory
        root = base.appendingPathComponent("root", isDirectory: true)
        let files = FileManager.default
        try files.createDirectory(at: root.appendingPathComponent("nested/deeper"), withIntermediateDirectories: true)
        try files.createDirectory(at: root.appendingPathComponent("folder.jpg"), withIntermediateDirectories: true)
        photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        try Data(photo).write(to: root.appendingPathComponent("photo.jpg"))
        try Data(photo).write(to: root.appendingPathComponent("nested/deeper/photo.jpg"))
        try Data(photo).write(to: base.appendingPathComponent("outside.jpg"))
        try files.createSymbolicLink(atPath: root.appendingPathComponent("inner-link.jpg").path, withDestinationPath: "photo.jpg")
        try files.createSymbolicLink(atPath: root.appendingPathComponent("escape.jpg").path, withDestinationPath: "../outside.jpg")
        try files.createSymbolicLink(atPath: root.appendingPathComponent("up").path, withDestinationPath: "..")
        try files.createSymbolicLink(atPath: root.appendingPathComponent("absolute.jpg").path,
                                     withDestinationPath: base.appendingPathComponent("outside.jpg").path)
        XCTAssertEqual(mkfifo(root.appendingPathComponent("pipe.jpg").path, 0o600), 0)
        let huge = root.appendingPathComponent("huge.jpg")
        try Data(photo).write(to: huge)
        XCTAssertEqual(truncate(huge.path, 2 << 30), 0, "a sparse file: no disk is used")
        let zeros = root.appendingPathComponent("zeros.bin")
        XCTAssertTrue(FileManager.default.createFile(atPath: zeros.path, contents: nil))
        XCTAssertEqual(truncate(zeros.path, 2 << 30), 0)
    }

    private func worker(filesRoot: String?) throws -> FakeBroker {
        let endpoint = endpoints.ipc("workers")
        let broker = try FakeBroker(endpoint: endpoint)
        var logger = Logger(label: "test.worker")
        logger.logLevel = .warning
        var configuration = WorkerConfiguration(brokerEndpoint: endpoint, concurrency: 2, logger: logger)
        configuration.filesRoot = filesRoot
        let handle = try WorkerService(configuration: configuration).start()
        addTeardownBlock { try handle.stop() }
        return broker
    }

    private func fileJob(_ id: UInt64, _ path: String, delivery: Enlarger_V1_Delivery = .final) -> BrokerToWorkerMessage<[UInt8]> {
        var job = Enlarger_V1_Job()
        job.jobID = id
        job.attempt = 1
        job.requestID = "request-\(id)"
        job.spec.width = 64
        job.delivery = delivery
        job.source.file.path = path
        return .job(job, image: [])
    }

    /// Every frame about the job up to its terminal one.
    private func run(_ message: BrokerToWorkerMessage<[UInt8]>, _ broker: FakeBroker, _ peer: [UInt8],
                     file: StaticString = #filePath, line: UInt = #line) throws -> [WorkerToBrokerMessage<[UInt8]>] {
        guard case .job(let job, _) = message else { preconditionFailure("not a job") }
        try broker.send(message, to: peer)
        var frames: [WorkerToBrokerMessage<[UInt8]>] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while frames.last?.isTerminal != true {
            frames.append(try broker.expect("a frame about job \(job.jobID)", timeout: deadline - .now, file: file, line: line) {
                $0.message.jobID == job.jobID ? $0.message : nil
            })
        }
        return frames
    }

    private func identity(_ frames: [WorkerToBrokerMessage<[UInt8]>]) -> Data? {
        for case .jobSourceOpened(let opened) in frames { return opened.identity }
        return nil
    }

    func testAFileBeneathTheRootIsReadAndNamedByItsVersion() throws {
        let broker = try worker(filesRoot: root.path)
        let (peer, _) = try broker.expectReady()
        // A file written less than a second ago is not trusted to keep its name (see below).
        Thread.sleep(forTimeInterval: 1.1)

        let frames = try run(fileJob(1, "photo.jpg"), broker, peer)
        XCTAssertEqual(frames.map(Self.kind), ["started", "opened", "final"])
        guard case .jobResult(let result, let image) = frames.last else { return XCTFail("\(frames)") }
        XCTAssertEqual(result.width, 64)
        XCTAssertFalse(image.isEmpty)
        XCTAssertTrue(result.digestVerified, "the file did not change while it was read")
        let first = try XCTUnwrap(identity(frames))
        XCTAssertTrue(first.starts(with: Data("file\u{0}photo.jpg\u{0}".utf8)))

        // The same file again: the same version. Rewritten: another one.
        XCTAssertEqual(identity(try run(fileJob(2, "photo.jpg"), broker, peer)), first)
        var changed = photo
        changed.append(0)
        try Data(changed).write(to: root.appendingPathComponent("photo.jpg"))
        let fresh = try run(fileJob(3, "photo.jpg"), broker, peer)
        XCTAssertNotEqual(identity(fresh), first, "a changed file is a new version")
        // Written within the last second: its times come from a coarse clock, so a same-size
        // rewrite in the same tick could keep its name. Delivered, but not vouched for.
        guard case .jobResult(let unsettled, _) = fresh.last else { return XCTFail("\(fresh)") }
        XCTAssertFalse(unsettled.digestVerified)

        // Nested paths, `.` and symbolic links that stay inside are fine.
        for (id, path) in [(4, "nested/deeper/photo.jpg"), (5, "./nested/../photo.jpg"), (6, "inner-link.jpg")] as [(UInt64, String)] {
            let frames = try run(fileJob(id, path), broker, peer)
            XCTAssertEqual(frames.map(Self.kind), ["started", "opened", "final"], path)
        }
    }

    func testPathsThatLeaveTheRootOrAreNoRegularFileAreRefused() throws {
        let broker = try worker(filesRoot: root.path)
        let (peer, _) = try broker.expectReady()
        let cases: [(String, Enlarger_V1_ErrorCode)] = [
            ("../outside.jpg", .sourceRefused),
            ("nested/../../outside.jpg", .sourceRefused),
            (root.appendingPathComponent("photo.jpg").path, .sourceRefused),  // absolute, even inside
            ("/etc/hostname", .sourceRefused),
            ("escape.jpg", .sourceRefused),
            ("up/outside.jpg", .sourceRefused),
            ("absolute.jpg", .sourceRefused),
            ("pipe.jpg", .sourceRefused),  // a FIFO: refused, and the open does not block
            ("folder.jpg", .sourceRefused),
            ("missing.jpg", .sourceUnavailable),
            ("nested/missing/photo.jpg", .sourceUnavailable),
        ]
        for (index, (path, code)) in cases.enumerated() {
            let started = ContinuousClock.now
            let frames = try run(fileJob(UInt64(index + 1), path), broker, peer)
            XCTAssertEqual(frames.map(Self.kind), ["started", "failed"], path)
            guard case .jobFailed(let failed) = frames.last else { continue }
            XCTAssertEqual(failed.code, code, "\(path): \(failed.message)")
            XCTAssertFalse(failed.message.isEmpty)
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(5), path)
        }
    }

    func testMagicLinksAreRefused() throws {
        // /proc/self holds magic links (root, cwd, exe, fd/N) that jump anywhere.
        let broker = try worker(filesRoot: "/proc/self")
        let (peer, _) = try broker.expectReady()
        for (id, path) in [(1, "root/etc/hostname"), (2, "cwd"), (3, "fd/0")] as [(UInt64, String)] {
            let frames = try run(fileJob(id, path), broker, peer)
            guard case .jobFailed(let failed) = frames.last else { XCTFail("\(path): \(frames)"); continue }
            XCTAssertEqual(failed.code, .sourceRefused, "\(path): \(failed.message)")
        }
    }

    func testWithoutARootFileSourcesAreRefused() throws {
        let broker = try worker(filesRoot: nil)
        let (peer, _) = try broker.expectReady()
        let frames = try run(fileJob(1, "photo.jpg"), broker, peer)
        guard case .jobFailed(let failed) = frames.last else { return XCTFail("\(frames)") }
        XCTAssertEqual(failed.code, .sourceRefused)
        XCTAssertTrue(failed.message.contains("not enabled"), failed.message)
    }

    func testARootThatCannotBeOpenedStopsTheWorkerAtStart() {
        var configuration = WorkerConfiguration(brokerEndpoint: endpoints.ipc("unused"), concurrency: 1)
        configuration.filesRoot = endpoints.directory.appendingPathComponent("no-such-dir").path
        XCTAssertThrowsError(try WorkerService(configuration: configuration)) { error in
            XCTAssertTrue("\(error)".contains("no-such-dir"), "\(error)")
        }
    }

    func testAnInfoRequestReadsOnlyTheHeader() throws {
        let broker = try worker(filesRoot: root.path)
        let (peer, _) = try broker.expectReady()
        // 2 GiB: far over the 64 MiB input limit, so reading it whole is impossible.
        let frames = try run(fileJob(1, "huge.jpg", delivery: .info), broker, peer)
        guard case .jobResult(let result, _) = frames.last else { return XCTFail("\(frames)") }
        XCTAssertEqual(result.stage, .info)
        XCTAssertEqual(result.info.width, 2725)
        XCTAssertEqual(result.info.byteSize, 2 << 30, "the file's size, not what was read")

        let resize = try run(fileJob(2, "huge.jpg"), broker, peer)
        guard case .jobFailed(let failed) = resize.last else { return XCTFail("\(resize)") }
        XCTAssertEqual(failed.code, .tooLarge, failed.message)

        // 2 GiB that are no image: the first 64 KiB say so, and nothing more is read.
        let started = ContinuousClock.now
        let zeros = try run(fileJob(3, "zeros.bin", delivery: .info), broker, peer)
        guard case .jobFailed(let notImage) = zeros.last else { return XCTFail("\(zeros)") }
        XCTAssertEqual(notImage.code, .notJpeg, notImage.message)
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(2))
    }

    private static func kind(_ message: WorkerToBrokerMessage<[UInt8]>) -> String {
        switch message {
        case .jobStarted: "started"
        case .jobSourceOpened: "opened"
        case .jobResult(let result, _): result.stage == .degraded ? "degraded" : "final"
        case .jobFailed: "failed"
        case .jobCancelled: "cancelled"
        default: "other"
        }
    }
}
