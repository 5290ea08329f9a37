import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker

/// File and URL sources at the broker: requests share by location until the worker names the
/// version it opened; then the cache may answer, or the job merges into another reading the
/// same version. Download progress reaches every request on the job, and nothing reaches a
/// request after its end.
final class BrokerCoreSourceTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let bob: PeerID = "client-bob"
    let carol: PeerID = "client-carol"
    let w1: PeerID = "worker-1"
    let w2: PeerID = "worker-2"

    static let version1 = Data("file\u{0}photos/a.jpg\u{0}v1".utf8)
    static let version2 = Data("file\u{0}photos/a.jpg\u{0}v2".utf8)

    private func submit(
        _ broker: inout CoreHarness, _ peer: PeerID, _ id: String, file: String? = "photos/a.jpg", url: String? = nil,
        noShare: Bool = false, delivery: Enlarger_V1_Delivery = .final, image: Bytes = [], as principal: Principal = .local
    ) {
        let submit = Enlarger_V1_Submit.with {
            $0.requestID = id
            $0.spec.width = 64
            $0.delivery = delivery
            if let url { $0.source.url.url = url } else if let file { $0.source.file.path = file }
            $0.source.noShare = noShare
        }
        broker.client(peer, as: principal, .submit(submit, image: image))
    }

    private func opened(_ broker: inout CoreHarness, _ worker: PeerID, _ job: Enlarger_V1_Job, _ identity: Data) {
        broker.worker(worker, .jobSourceOpened(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.identity = identity
        }))
    }

    private func final(
        _ broker: inout CoreHarness, _ worker: PeerID, _ job: Enlarger_V1_Job, verified: Bool = true, image: Bytes = [9, 9]
    ) {
        broker.worker(worker, .jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = .final
            $0.width = 32
            $0.height = 24
            $0.terminal = true
            $0.contentType = "image/jpeg"
            $0.digestVerified = verified
        }, image: image))
    }

    private func download(
        _ broker: inout CoreHarness, _ worker: PeerID, _ job: Enlarger_V1_Job, _ phase: Enlarger_V1_DownloadPhase,
        bytes: UInt64, expected: UInt64 = 0
    ) {
        broker.worker(worker, .jobDownload(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.phase = phase
            $0.bytes = bytes
            $0.expectedBytes = expected
        }))
    }

    private func assertConsistent(_ broker: CoreHarness, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(broker.inconsistencies, [], file: file, line: line)
    }

    /// Principals sharing a files root read only their own directory of it: the tenants file
    /// names it (`files=DIR`), and the Job carries it for the worker to resolve the path
    /// beneath; a principal given none is refused a file source, an admin reads the whole
    /// root. The same path in two directories is two files: never one shared job.
    func testEachPrincipalReadsFilesOnlyBeneathItsOwnDirectory() {
        let vera = Principal("curve:vera"), hal = Principal("curve:hal"), mallory = Principal("curve:mallory")
        var broker = CoreHarness {
            $0.shareAcrossPrincipals = true
            $0.tenants = TenantPolicy(principals: [vera.name: .init(files: "tenants/vera"),
                                                   hal.name: .init(files: "tenants/hal")])
        }
        func submitFile(_ peer: PeerID, _ principal: Principal, _ id: String) {
            broker.client(peer, as: principal, .submit(.with {
                $0.requestID = id
                $0.spec.width = 64
                $0.delivery = .final
                $0.source.file.path = "a.jpg"
            }, image: []))
        }
        submitFile(alice, vera, "v")
        submitFile(bob, hal, "h")
        submitFile(carol, mallory, "m")
        submitFile(carol, .local, "l")
        let refused = broker.events(for: carol).compactMap { event -> Enlarger_V1_Rejected? in
            if case .rejected(let rejected) = event { rejected } else { nil }
        }
        XCTAssertEqual(refused.map(\.requestID), ["m"])
        XCTAssertEqual(refused.first?.code, .sourceRefused)
        let jobs = broker.ready(w1, capacity: 4)
        XCTAssertEqual(jobs.map(\.requestID), ["v", "h", "l"], "one job each: the same path names three files")
        XCTAssertEqual(jobs.map(\.filesScope), ["tenants/vera", "tenants/hal", ""])
        assertConsistent(broker)
    }

    func testFileRequestsJoinByLocationUntilDispatchedThenMergeByVersion() {
        var broker = CoreHarness()
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        let first = broker.ready(w1, capacity: 4)
        XCTAssertEqual(first.count, 1, "a request for the same place joins the job that waits to be dispatched")
        XCTAssertEqual(first[0].source.file.path, "photos/a.jpg")
        XCTAssertEqual(broker.core.totals.jobsShared, 1)
        XCTAssertEqual(broker.core.totals.cacheMisses, 0, "a location is not a version: the cache is not asked")

        broker.worker(w1, .jobStarted(.with { $0.jobID = first[0].jobID; $0.attempt = 1 }))
        opened(&broker, w1, first[0], Self.version1)
        XCTAssertEqual(broker.core.totals.cacheMisses, 2, "both requests missed the cache for version 1")

        // Opened: the job now reads a version, and a new request for the place cannot know
        // which version it will find, so it gets a job of its own.
        submit(&broker, carol, "c")
        let second = broker.jobs(for: w1)
        XCTAssertEqual(second.count, 1)
        XCTAssertNotEqual(second[0].jobID, first[0].jobID)
        assertConsistent(broker)

        // ... which, opening the same version, merges into the first: its worker stops.
        opened(&broker, w1, second[0], Self.version1)
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(second[0].jobID) #1"])
        XCTAssertEqual(broker.events(for: carol).map(\.summary), ["accepted c", "started c #1"],
                       "the moved request hears of the attempt under way")
        XCTAssertEqual(broker.core.totals.jobsShared, 2)
        assertConsistent(broker)

        final(&broker, w1, first[0])
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "started a #1", "result a final terminal"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "started b #1", "result b final terminal"])
        XCTAssertEqual(broker.events(for: carol).map(\.summary), ["result c final terminal"])
        XCTAssertEqual(broker.core.sharing.cachedCount, 1, "the verified result of a named version is cached")
        broker.worker(w1, .jobCancelled(.with { $0.jobID = second[0].jobID; $0.attempt = 1 }))
        XCTAssertTrue(broker.core.isIdle)
        assertConsistent(broker)
    }

    /// Once a job is dispatched its worker may open the file at any moment: a request that
    /// comes later gets a job of its own (it may have been sent after the file changed), which
    /// merges only when both name the same version. A request is counted as shared once, however
    /// often its job moves.
    func testADispatchedJobTakesNoJoinersByLocationAndSharingIsCountedOnce() {
        var broker = CoreHarness()
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        let first = broker.ready(w1, capacity: 1)
        XCTAssertEqual(first.count, 1)
        XCTAssertEqual(broker.core.totals.jobsShared, 1, "b joined a")
        submit(&broker, carol, "c")
        submit(&broker, alice, "a2")
        XCTAssertEqual(broker.core.totals.jobsShared, 2, "a2 joined c's waiting job, not a's dispatched one")
        let second = broker.ready(w2, capacity: 1)
        XCTAssertEqual(second.count, 1)
        XCTAssertNotEqual(second[0].jobID, first[0].jobID)
        submit(&broker, bob, "b2")
        XCTAssertEqual(broker.core.totals.jobsShared, 2, "no job waits for the place: b2 starts a third")
        broker.worker(w1, .jobStarted(.with { $0.jobID = first[0].jobID; $0.attempt = 1 }))
        opened(&broker, w1, first[0], Self.version1)
        opened(&broker, w2, second[0], Self.version1)
        XCTAssertEqual(broker.commands(for: w2).map(\.summary), ["cancelJob \(second[0].jobID) #1"])
        XCTAssertEqual(broker.core.totals.jobsShared, 3, "c is counted when it moves; a2, already counted, is not")
        final(&broker, w1, first[0])
        for (peer, ids) in [(alice, ["a", "a2"]), (bob, ["b"]), (carol, ["c"])] {
            let finals = broker.events(for: peer).filter { $0.summary.hasPrefix("result") }.map(\.summary)
            XCTAssertEqual(finals, ids.map { "result \($0) final terminal" }, "\(peer)")
        }
        assertConsistent(broker)
    }

    func testAVersionTheCacheHoldsAnswersEveryRequestOnTheJobAndStopsTheRead() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 1)
        submit(&broker, alice, "a")
        let job = broker.jobs(for: w1)[0]
        opened(&broker, w1, job, Self.version1)
        final(&broker, w1, job, image: [1, 2, 3])
        _ = broker.events(for: alice)

        // Another place holds the worker, so b and c wait together.
        submit(&broker, alice, "x", file: "photos/x.jpg")
        let busy = broker.jobs(for: w1)
        submit(&broker, bob, "b")
        submit(&broker, carol, "c")
        final(&broker, w1, busy[0])
        _ = broker.events(for: alice)
        let again = broker.jobs(for: w1)
        XCTAssertEqual(again.count, 1, "b and c share a job by location: the file may have changed")
        opened(&broker, w1, again[0], Self.version1)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "result b final terminal cached"])
        XCTAssertEqual(broker.events(for: carol).map(\.summary), ["accepted c", "result c final terminal cached"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(again[0].jobID) #1"],
                       "the worker stops reading what the cache answered")
        XCTAssertEqual(broker.core.totals.cacheHits, 2)
        XCTAssertEqual(broker.core.totals.finished, 4)

        // Whatever the stopped job still sends is late; its cancel returns the credit.
        final(&broker, w1, again[0])
        XCTAssertEqual(broker.events(for: bob), [])
        broker.worker(w1, .jobCancelled(.with { $0.jobID = again[0].jobID; $0.attempt = 1 }))
        XCTAssertTrue(broker.core.isIdle)
        assertConsistent(broker)
    }

    func testAChangedFileIsAnotherVersionAndIsNeverAnsweredFromTheCache() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        let job = broker.jobs(for: w1)[0]
        opened(&broker, w1, job, Self.version1)
        final(&broker, w1, job, image: [1])

        submit(&broker, bob, "b")
        let next = broker.jobs(for: w1)[0]
        opened(&broker, w1, next, Self.version2)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b"], "version 2 is not cached: no answer yet")
        XCTAssertEqual(broker.commands(for: w1), [], "the worker goes on reading")
        final(&broker, w1, next, image: [2])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["result b final terminal"])
        XCTAssertEqual(broker.core.sharing.cachedCount, 2, "each version has its own entry")
        XCTAssertEqual(broker.core.totals.cacheHits, 0)
    }

    func testResultsWithoutANamedOrVerifiedVersionAreNotCachedNorShared() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 4)
        // A response without a validator names no version.
        submit(&broker, alice, "a", url: "https://example.com/a.jpg", as: Principal("curve:alice"))
        let job = broker.jobs(for: w1)[0]
        XCTAssertEqual(job.source.url.url, "https://example.com/a.jpg")
        // The worker bounds name lookups per principal: a URL's Job says whose it is.
        XCTAssertEqual(job.principal, "curve:alice")
        opened(&broker, w1, job, Data())
        submit(&broker, bob, "b", url: "https://example.com/a.jpg", as: Principal("curve:alice"))
        XCTAssertEqual(broker.jobs(for: w1).count, 1, "b cannot join a job reading an unnamed version")
        final(&broker, w1, job)
        XCTAssertEqual(broker.core.sharing.cachedCount, 0)

        // A file that changed while it was read: delivered, not cached.
        submit(&broker, carol, "c")
        let file = broker.jobs(for: w1)[0]
        XCTAssertEqual(file.principal, "", "only a URL's Job names its principal")
        opened(&broker, w1, file, Self.version1)
        final(&broker, w1, file, verified: false)
        XCTAssertEqual(broker.events(for: carol).map(\.summary), ["accepted c", "result c final terminal"])
        XCTAssertEqual(broker.core.sharing.cachedCount, 0)
        assertConsistent(broker)
    }

    func testNoShareOptsOutOfJoiningMergingAndTheCache() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 4)
        submit(&broker, alice, "a")
        let shared = broker.jobs(for: w1)[0]
        opened(&broker, w1, shared, Self.version1)
        final(&broker, w1, shared)
        XCTAssertEqual(broker.core.sharing.cachedCount, 1)

        submit(&broker, bob, "b", noShare: true)
        submit(&broker, carol, "c", noShare: true)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.count, 2, "no joining")
        opened(&broker, w1, jobs[0], Self.version1)
        opened(&broker, w1, jobs[1], Self.version1)
        XCTAssertEqual(broker.commands(for: w1), [], "neither answered from the cache nor merged")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b"])
        assertConsistent(broker)
    }

    func testDownloadEventsReachEveryLiveRequestOnTheJobAndNoneAfterItsEnd() {
        var broker = CoreHarness()
        let url = "https://images.example/big.jpg"
        submit(&broker, alice, "a", url: url)
        submit(&broker, bob, "b", url: url)
        let job = broker.ready(w1)[0]
        download(&broker, w1, job, .started, bytes: 0, expected: 1000)
        download(&broker, w1, job, .progress, bytes: 400, expected: 1000)
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["accepted a", "download a started 0", "download a progress 400"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary),
                       ["accepted b", "download b started 0", "download b progress 400"])

        broker.cancel(alice, "a")
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["cancelled a", "cancelAck a cancelled"])
        download(&broker, w1, job, .finished, bytes: 1000, expected: 1000)
        XCTAssertEqual(broker.events(for: alice), [], "nothing after Cancelled")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["download b finished 1000"])

        broker.cancel(bob, "b")
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(job.jobID) #1"], "the last cancel stops the download")
        download(&broker, w1, job, .progress, bytes: 1000)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["cancelled b", "cancelAck b cancelled"])
        XCTAssertEqual(broker.core.totals.lateResultsDropped, 1)
    }

    func testSourceFailuresReachTheClientWithTheirCodes() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a", file: "../etc/passwd")
        let job = broker.jobs(for: w1)[0]
        broker.worker(w1, .jobFailed(.with {
            $0.jobID = job.jobID
            $0.attempt = 1
            $0.code = .sourceRefused
            $0.message = "../etc/passwd leads outside the files root"
        }))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "failed a sourceRefused"])
        submit(&broker, bob, "b", url: "https://gone.example/x.jpg")
        let next = broker.jobs(for: w1)[0]
        broker.worker(w1, .jobFailed(.with { $0.jobID = next.jobID; $0.attempt = 1; $0.code = .sourceUnavailable }))
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "failed b sourceUnavailable"])
    }

    func testMalformedSourcesAreRejectedAndSourceFramesThatBreakTheProtocolEndTheJob() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "with-bytes", image: [1, 2, 3])
        submit(&broker, alice, "empty-path", file: "")
        submit(&broker, alice, "long-url", url: "https://x.example/" + String(repeating: "a", count: 2100))
        submit(&broker, alice, "nul", file: "a\u{0}b")
        XCTAssertEqual(broker.events(for: alice).map(\.summary), [
            "rejected with-bytes invalidArgument", "rejected empty-path invalidArgument",
            "rejected long-url invalidArgument", "rejected nul invalidArgument",
        ])

        // JobSourceOpened about an inline job, or with an oversize identity, is a breach.
        broker.submit(bob, "inline", delivery: .final)
        let inline = broker.jobs(for: w1)[0]
        opened(&broker, w1, inline, Self.version1)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted inline", "failed inline internal"])
        XCTAssertEqual(broker.core.totals.protocolBreaches, 1)
        broker.worker(w1, .jobCancelled(.with { $0.jobID = inline.jobID; $0.attempt = 1 }))

        submit(&broker, carol, "huge")
        let file = broker.jobs(for: w1)[0]
        opened(&broker, w1, file, Data(repeating: 1, count: WireLimits.maxSourceIdentityBytes + 1))
        XCTAssertEqual(broker.events(for: carol).map(\.summary), ["accepted huge", "failed huge internal"])
        XCTAssertEqual(broker.core.totals.protocolBreaches, 2)
        assertConsistent(broker)
    }

    func testAJobOnlyMergesIntoAJobAWorkerRunsAndADroppedVersionIsNotKept() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.ready(w2)
        submit(&broker, alice, "a")
        let onFirst = broker.jobs(for: w1)
        let onSecond = broker.jobs(for: w2)
        let first = onFirst + onSecond
        XCTAssertEqual(first.count, 1)
        let holder = onFirst.isEmpty ? w2 : w1
        opened(&broker, holder, first[0], Self.version1)
        XCTAssertEqual(broker.core.sharing.liveJobs.count, 1)
        // Its worker is lost: the job waits in quarantine, its version forgotten (the next
        // attempt may find another).
        broker.workerUnreachable(holder)
        XCTAssertTrue(broker.core.sharing.liveJobs.isEmpty, "\(broker.core.sharing.liveJobs)")
        let other = holder == w1 ? w2 : w1
        let retried = broker.jobs(for: other)
        XCTAssertEqual(retried.map(\.attempt), [2])
        guard !retried.isEmpty else { return }
        opened(&broker, other, retried[0], Self.version1)
        XCTAssertEqual(broker.core.sharing.liveJobs.count, 1)
        assertConsistent(broker)

        // JobDownload with a phase that is not a download step breaks the protocol.
        download(&broker, other, retried[0], .unspecified, bytes: 0)
        XCTAssertEqual(broker.events(for: alice).map(\.summary).last, "failed a internal")
        XCTAssertEqual(broker.core.totals.protocolBreaches, 1)
        assertConsistent(broker)
    }

    func testARetryThatFindsAnotherVersionMovesToIt() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        let job = broker.jobs(for: w1)[0]
        opened(&broker, w1, job, Self.version1)
        // The worker dies; the retry on another worker finds the file changed.
        broker.workerUnreachable(w1)
        let retry = broker.ready(w2)
        XCTAssertEqual(retry.map(\.attempt), [2])
        opened(&broker, w2, retry[0], Self.version2)
        final(&broker, w2, retry[0], image: [5])
        XCTAssertEqual(broker.events(for: alice).map(\.summary).last, "result a final terminal")

        // Version 2 is what is cached, not version 1.
        submit(&broker, bob, "b")
        let next = broker.jobs(for: w2)[0]
        opened(&broker, w2, next, Self.version2)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "result b final terminal cached"])
        broker.worker(w2, .jobCancelled(.with { $0.jobID = next.jobID; $0.attempt = 1 }))
        submit(&broker, carol, "c")
        let old = broker.jobs(for: w2)[0]
        opened(&broker, w2, old, Self.version1)
        XCTAssertEqual(broker.events(for: carol).map(\.summary), ["accepted c"], "version 1 was never cached")
        assertConsistent(broker)
    }
}
