import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker

/// The result cache and shared jobs: identical requests (same digest, spec, delivery and
/// scope) are answered from the cache or join one job, each keeping its own events, deadline,
/// cancel and terminal event.
final class BrokerCoreSharingTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let bob: PeerID = "client-bob"
    let carol: PeerID = "client-carol"
    let w1: PeerID = "worker-1"

    static let photo: Bytes = Array(repeating: 0xD8, count: 40)
    static let other: Bytes = Array(repeating: 0xD9, count: 40)
    static let digest = Data(repeating: 0xAB, count: 32)

    private func submit(
        _ broker: inout CoreHarness, _ peer: PeerID, _ id: String, image: Bytes = photo, digest: Data? = digest,
        delivery: Enlarger_V1_Delivery = .progressive, quality: UInt32 = 0, deadlineMs: UInt32 = 0,
        as principal: Principal = .local
    ) {
        let submit = Enlarger_V1_Submit.with {
            $0.requestID = id
            $0.spec.width = 64
            $0.spec.quality = quality
            $0.delivery = delivery
            $0.deadlineMs = deadlineMs
            if let digest { $0.source.inline.sha256 = digest }
        }
        broker.client(peer, as: principal, .submit(submit, image: image))
    }

    private func result(
        _ broker: inout CoreHarness, _ job: Enlarger_V1_Job, _ stage: Enlarger_V1_Stage, terminal: Bool,
        verified: Bool = true, image: Bytes = [7, 7, 7]
    ) {
        broker.worker(w1, .jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = stage
            $0.width = 32
            $0.height = 24
            $0.terminal = terminal
            $0.contentType = "image/jpeg"
            $0.digestVerified = verified
        }, image: image))
    }

    private func assertConsistent(_ broker: CoreHarness, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(broker.inconsistencies, [], file: file, line: line)
    }

    func testIdenticalRequestsShareOneJobAndEachGetsEveryEvent() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.count, 1, "one job for both")
        XCTAssertEqual(jobs[0].source.inline.sha256, Self.digest, "the worker is given the digest to check")
        XCTAssertEqual(broker.core.totals.jobsShared, 1)
        XCTAssertEqual(broker.core.liveImageBytes, Self.photo.count, "the joiner's image is not kept")

        broker.worker(w1, .jobStarted(.with { $0.jobID = jobs[0].jobID; $0.attempt = 1 }))
        result(&broker, jobs[0], .degraded, terminal: false)
        result(&broker, jobs[0], .final, terminal: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["accepted a", "started a #1", "result a degraded", "result a final terminal"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary),
                       ["accepted b", "started b #1", "result b degraded", "result b final terminal"])
        XCTAssertEqual(broker.core.totals.finished, 2)
        let ends = broker.takeReports().compactMap { if case .requestEnded(let end) = $0 { end.requestID } else { nil } }
        XCTAssertEqual(ends.sorted(), ["a", "b"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testALateJoinerHearsOfTheAttemptButNotOfAnEarlierDegradedResult() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        let job = broker.jobs(for: w1)[0]
        broker.worker(w1, .jobStarted(.with { $0.jobID = job.jobID; $0.attempt = 1 }))
        result(&broker, job, .degraded, terminal: false)
        submit(&broker, bob, "b")
        result(&broker, job, .final, terminal: true)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "started b #1", "result b final terminal"])
        XCTAssertEqual(broker.jobs(for: w1), [], "no second job")
    }

    func testCancellingOneRequestLeavesTheJobToTheOthersAndTheLastStopsIt() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        submit(&broker, carol, "c")
        let job = broker.jobs(for: w1)[0]

        broker.cancel(alice, "a")
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "cancelled a", "cancelAck a cancelled"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), [], "the job goes on for b and c")
        assertConsistent(broker)

        result(&broker, job, .degraded, terminal: false)
        XCTAssertEqual(broker.events(for: alice), [], "nothing after Cancelled")
        broker.cancel(bob, "b")
        broker.cancel(carol, "c")
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(job.jobID) #1"], "stopped with the last")
        XCTAssertEqual(broker.events(for: bob).map(\.summary),
                       ["accepted b", "result b degraded", "cancelled b", "cancelAck b cancelled"])
        result(&broker, job, .final, terminal: true)
        XCTAssertEqual(broker.events(for: carol).map(\.summary),
                       ["accepted c", "result c degraded", "cancelled c", "cancelAck c cancelled"])
        XCTAssertEqual(broker.core.sharing.cachedCount, 0, "a result after every request ended is dropped, not cached")
        XCTAssertTrue(broker.core.isIdle)
    }

    func testEachRequestKeepsItsOwnDeadline() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b", deadlineMs: 500)
        let job = broker.jobs(for: w1)[0]
        broker.advance(by: .milliseconds(600))
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "failed b deadlineExceeded"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), [], "the job goes on for a")
        result(&broker, job, .final, terminal: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a final terminal"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testAVerifiedResultIsCachedAndAnswersTheNextIdenticalRequestAtOnce() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        let job = broker.jobs(for: w1)[0]
        result(&broker, job, .final, terminal: true, image: [1, 2, 3, 4])
        _ = broker.events(for: alice)

        // Final-only asks for the same terminal result as progressive; quality 80 is the default.
        submit(&broker, bob, "b", delivery: .final, quality: 80)
        let events = broker.events(for: bob)
        XCTAssertEqual(events.map(\.summary), ["accepted b", "result b final terminal cached"])
        guard case .result(let cached, let image) = events.last else { return XCTFail("no result") }
        XCTAssertEqual(image, [1, 2, 3, 4])
        XCTAssertEqual(cached.width, 32)
        XCTAssertEqual(cached.contentType, "image/jpeg")
        XCTAssertEqual(broker.jobs(for: w1), [], "no worker ran")
        XCTAssertEqual(broker.core.totals.cacheHits, 1)
        XCTAssertEqual(broker.core.totals.cacheMisses, 1, "the first request missed")
        XCTAssertEqual(broker.core.totals.finished, 2)
        XCTAssertEqual(broker.core.totals.accepted, 2)
        broker.cancel(bob, "b")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["cancelAck b finished"])
        let status = broker.core.status(now: broker.now)
        XCTAssertEqual(status.cache.entries, 1)
        XCTAssertGreaterThan(status.cache.bytes, 4)
        XCTAssertEqual(status.cache.limitBytes, UInt64(broker.configuration.resultCacheBytes))

        // A degraded-only request is other work.
        submit(&broker, bob, "c", delivery: .degraded)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted c"])
        XCTAssertEqual(broker.jobs(for: w1).count, 1)
    }

    func testAnUnverifiedResultIsSharedButNeverCached() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        let job = broker.jobs(for: w1)[0]
        result(&broker, job, .final, terminal: true, verified: false)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "result b final terminal"])
        XCTAssertEqual(broker.core.sharing.cachedCount, 0)
        submit(&broker, carol, "c")
        XCTAssertEqual(broker.jobs(for: w1).count, 1, "a new job, not a cached answer")
    }

    func testAMismatchedDigestFailsEveryRequestOnTheJobAndCachesNothing() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        let job = broker.jobs(for: w1)[0]
        broker.worker(w1, .jobFailed(.with {
            $0.jobID = job.jobID
            $0.attempt = 1
            $0.code = .digestMismatch
            $0.message = "the image's SHA-256 is not the digest its request named"
        }))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "failed a digestMismatch"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "failed b digestMismatch"])
        XCTAssertEqual(broker.core.sharing.cachedCount, 0)
        XCTAssertTrue(broker.core.isIdle)
    }

    func testOtherBytesUnderTheSameDigestNeverJoin() {
        var broker = CoreHarness { $0.queueLimit = 10 }
        broker.ready(w1, capacity: 2)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b", image: Self.other)
        submit(&broker, carol, "c", image: Array(Self.photo.prefix(39)))
        XCTAssertEqual(broker.jobs(for: w1).count, 2, "b has a job of its own")
        XCTAssertEqual(broker.core.totals.jobsShared, 0)
        assertConsistent(broker)
    }

    func testRequestsWithoutADigestAreNeitherSharedNorCached() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        submit(&broker, alice, "a", digest: nil)
        submit(&broker, bob, "b", digest: nil)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.count, 2)
        XCTAssertFalse(jobs[0].hasSource)
        result(&broker, jobs[0], .final, terminal: true)
        XCTAssertEqual(broker.core.sharing.cachedCount, 0)
        XCTAssertEqual(broker.core.totals.cacheMisses, 0, "only requests with a digest count")
    }

    func testResultsStayWithinAPrincipalUnlessTheOperatorSharesThem() {
        for acrossPrincipals in [false, true] {
            var broker = CoreHarness { $0.shareAcrossPrincipals = acrossPrincipals }
            broker.ready(w1, capacity: 2)
            submit(&broker, alice, "a", as: Principal("curve:alice"))
            submit(&broker, bob, "b", as: Principal("curve:bob"))
            XCTAssertEqual(broker.jobs(for: w1).count, acrossPrincipals ? 1 : 2, "across principals: \(acrossPrincipals)")
        }
    }

    /// Even where results are shared across principals, a digest alone never reads another
    /// principal's cached result: junk bytes sent with a known digest get a job of their own
    /// (whose worker then finds the mismatch), while the principal that proved the bytes hits.
    func testADigestAloneNeverReadsAnotherPrincipalsCachedResult() {
        var broker = CoreHarness { $0.shareAcrossPrincipals = true }
        broker.ready(w1, capacity: 2)
        let alicePrincipal = Principal("curve:alice"), mallory = Principal("curve:mallory")
        submit(&broker, alice, "a", as: alicePrincipal)
        result(&broker, broker.jobs(for: w1)[0], .final, terminal: true)
        XCTAssertEqual(broker.core.sharing.cachedCount, 1)
        _ = broker.events(for: alice)
        submit(&broker, bob, "m", image: Array("junk junk junk junk junk junk junk".utf8), as: mallory)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted m"], "no cached answer for a digest alone")
        XCTAssertEqual(broker.jobs(for: w1).count, 1, "the junk goes to a worker, which checks the digest")
        submit(&broker, alice, "a2", as: alicePrincipal)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a2", "result a2 final terminal cached"])
    }

    func testTheOperatorCanTurnSharingAndTheCacheOff() {
        var broker = CoreHarness {
            $0.shareJobs = false
            $0.resultCacheBytes = 0
        }
        broker.ready(w1, capacity: 2)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.count, 2)
        // Nothing is shared or cached on the strength of the digest: the worker is not asked
        // to check it, and hashes nothing.
        XCTAssertFalse(jobs[0].hasSource, "the digest went to the worker to be checked")
        result(&broker, jobs[0], .final, terminal: true)
        submit(&broker, carol, "c")
        XCTAssertEqual(broker.events(for: carol).map(\.summary), ["accepted c"])
        XCTAssertEqual(broker.core.sharing.cachedCount, 0)
    }

    /// Accepted tells the client whether its digests are used: only with both the cache and
    /// shared jobs off are they not, and a client may then spare itself the hashing.
    func testAcceptedSaysWhetherInlineDigestsAreUsed() {
        for (share, cache, unused) in [(true, 1 << 20, false), (false, 1 << 20, false), (true, 0, false), (false, 0, true)] {
            var broker = CoreHarness {
                $0.shareJobs = share
                $0.resultCacheBytes = cache
            }
            submit(&broker, alice, "a")
            let accepted = broker.events(for: alice).compactMap { event -> Enlarger_V1_Accepted? in
                if case .accepted(let message) = event { message } else { nil }
            }
            XCTAssertEqual(accepted.map(\.digestsUnused), [unused], "share \(share), cache \(cache)")
        }
    }

    func testAClientThatVanishesTakesOnlyItsOwnRequestsAlong() {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        let job = broker.jobs(for: w1)[0]
        broker.clientUnreachable(alice)
        XCTAssertEqual(broker.events(for: alice).last?.summary, "failed a clientSilent")
        XCTAssertEqual(broker.commands(for: w1), [])
        result(&broker, job, .final, terminal: true)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted b", "result b final terminal"])
        XCTAssertTrue(broker.core.isIdle)
    }

    func testASharedJobIsHeldBackOnlyWhileNoneOfItsClientsReads() {
        var broker = CoreHarness()
        broker.backlog(alice, bytes: 1000)
        broker.backlog(bob, bytes: 1000)
        submit(&broker, alice, "a")
        submit(&broker, bob, "b")
        broker.ready(w1)
        XCTAssertEqual(broker.jobs(for: w1), [], "nobody reads: held back")
        assertConsistent(broker)
        broker.backlog(bob, bytes: 0)
        XCTAssertEqual(broker.jobs(for: w1).count, 1, "released when one of its clients reads again")
        assertConsistent(broker)
    }

    func testTheOwnerOfAHeldJobLeavingReleasesItToTheOthers() {
        var broker = CoreHarness()
        broker.backlog(alice, bytes: 1000)
        submit(&broker, alice, "a")
        broker.ready(w1, capacity: 1)
        broker.submit(carol, "filler")  // takes the only credit
        let filler = broker.jobs(for: w1)
        XCTAssertEqual(filler.map(\.requestID), ["filler"])
        submit(&broker, bob, "b")
        broker.cancel(alice, "a")
        assertConsistent(broker)
        broker.finish(w1, filler[0])
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["b"], "the job goes on, named after b, its owner now")
        assertConsistent(broker)
    }

    func testADigestOfTheWrongLengthIsRejected() {
        var broker = CoreHarness()
        submit(&broker, alice, "a", digest: Data(repeating: 1, count: 20))
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["rejected a invalidArgument"])
    }

    func testSpecsThatMeanTheSameShareAndOthersDoNot() {
        func key(_ configure: (inout Enlarger_V1_ResizeSpec) -> Void, _ delivery: Enlarger_V1_Delivery = .final) -> [UInt8] {
            var spec = Enlarger_V1_ResizeSpec.with { $0.width = 100 }
            configure(&spec)
            return try! spec.sharingKey(delivery: delivery)
        }
        let plain = key { _ in }
        XCTAssertEqual(plain, key { $0.quality = 80 })
        XCTAssertEqual(plain, key { $0.failOn = .error })
        XCTAssertEqual(plain, key { $0.background = 0xFF_FFFF })
        XCTAssertNotEqual(plain, key { $0.quality = 81 })
        XCTAssertNotEqual(plain, key { $0.height = 100 })
        XCTAssertNotEqual(plain, key { $0.background = 0 })
        XCTAssertEqual(key { $0.accept = ["image/webp", "image/jpeg"]; $0.format = .png },
                       key { $0.accept = ["IMAGE/WEBP; q=1", "text/plain", "image/jpeg"] })
        XCTAssertNotEqual(key { $0.accept = ["image/webp", "image/jpeg"] }, key { $0.accept = ["image/jpeg", "image/webp"] })
        // A blank inside a type makes it unknown to the worker, which then makes a JPEG: the
        // key says JPEG too, and never WebP's.
        XCTAssertEqual(key { $0.accept = ["image/ webp", "image/jpeg"] }, key { $0.accept = ["image/jpeg"] })
        XCTAssertNotEqual(key { $0.accept = ["image/ webp", "image/jpeg"] }, key { $0.accept = ["image/webp", "image/jpeg"] })
        XCTAssertEqual(key { $0.accept = [" image/webp\t", "image/x-portable-pixmap"] },
                       key { $0.accept = ["image/webp", "image/x-portable-anymap"] })
        XCTAssertEqual(key({ $0.width = 10 }, .info), key({ $0.width = 20; $0.quality = 5 }, .info),
                       "an info request's spec is only its fail_on")
        XCTAssertNotEqual(key({ _ in }, .info), key({ $0.failOn = .warning }, .info))
    }

    /// A principal that floods the cache with new results evicts only its own entries while
    /// another keeps within an even share: the flood cannot flush the other's results, nor
    /// learn from its own evictions how much the other asks for. Once the other holds more, its
    /// oldest entries are the ones that go.
    func testTheCacheMakesRoomFromTheLargestHolder() {
        func shareKey(_ n: Int) -> ShareKey {
            ShareKey(scope: nil, kind: .digest, source: Data(repeating: UInt8(n & 0xFF), count: 31) + [UInt8(n >> 8)],
                     spec: [1], delivery: .final)
        }
        let alice = Principal("curve:alice"), mallory = Principal("curve:mallory")
        let result = Enlarger_V1_Result.with { $0.stage = .final; $0.terminal = true }
        let entryCost = 1000 + result.serializedSizeEstimate + shareKey(0).byteCount
        var cache = ResultCache<Bytes>(limit: 20 * entryCost)
        for n in 0..<8 { cache.store(result, payload: Bytes(repeating: 1, count: 1000), for: shareKey(n), holder: alice) }
        for n in 100..<400 {
            cache.store(result, payload: Bytes(repeating: 2, count: 1000), for: shareKey(n), holder: mallory)
        }
        for n in 0..<8 { XCTAssertNotNil(cache.lookup(shareKey(n)), "alice's entry \(n) was evicted by mallory's flood") }
        XCTAssertEqual(cache.bytes(heldBy: alice), 8 * entryCost)
        XCTAssertEqual(cache.bytes(heldBy: mallory), 12 * entryCost)
        XCTAssertNotNil(cache.lookup(shareKey(399)), "mallory's newest are kept")
        XCTAssertNil(cache.lookup(shareKey(387)), "mallory's oldest went")
        XCTAssertEqual(cache.evictions, 288)
        // Alice grows past mallory: then her least recently used entry (1; 0 was just read) goes.
        XCTAssertNotNil(cache.lookup(shareKey(0)))
        for n in 8..<10 { cache.store(result, payload: Bytes(repeating: 1, count: 1000), for: shareKey(n), holder: alice) }
        XCTAssertEqual(cache.bytes(heldBy: alice), 10 * entryCost, "until a tie, each store evicted one of mallory's")
        cache.store(result, payload: Bytes(repeating: 1, count: 1000), for: shareKey(10), holder: alice)
        XCTAssertEqual(cache.bytes(heldBy: alice), 10 * entryCost)
        XCTAssertNil(cache.lookup(shareKey(1)))
        XCTAssertNotNil(cache.lookup(shareKey(0)))
        XCTAssertLessThanOrEqual(cache.bytes, cache.limit)
    }

    func testTheCacheDropsTheLeastRecentlyUsedAndSkipsOversizeResults() {
        func shareKey(_ n: UInt8) -> ShareKey {
            ShareKey(scope: nil, kind: .digest, source: Data(repeating: n, count: 32), spec: [1], delivery: .final)
        }
        let result = Enlarger_V1_Result.with { $0.stage = .final; $0.terminal = true }
        let entryCost = 1000 + result.serializedSizeEstimate + shareKey(0).byteCount
        var cache = ResultCache<Bytes>(limit: 3 * entryCost + 10)
        XCTAssertEqual(cache.limit / 8 < entryCost, true)
        var roomy = ResultCache<Bytes>(limit: 24 * entryCost)
        for n: UInt8 in 0..<3 { roomy.store(result, payload: Bytes(repeating: n, count: 1000), for: shareKey(n), holder: .local) }
        XCTAssertEqual(roomy.count, 3)
        XCTAssertNotNil(roomy.lookup(shareKey(0)), "0 becomes the most recently used")
        // Shrink the room by filling it: 21 more entries fit, the 22nd evicts the least recent (1).
        for n: UInt8 in 3..<24 { roomy.store(result, payload: Bytes(repeating: n, count: 1000), for: shareKey(n), holder: .local) }
        XCTAssertEqual(roomy.count, 24)
        roomy.store(result, payload: Bytes(repeating: 99, count: 1000), for: shareKey(99), holder: .local)
        XCTAssertEqual(roomy.count, 24)
        XCTAssertEqual(roomy.evictions, 1)
        XCTAssertNil(roomy.lookup(shareKey(1)), "the least recently used went first")
        XCTAssertNotNil(roomy.lookup(shareKey(0)))
        XCTAssertEqual(roomy.lookup(shareKey(99))?.payload.first, 99)
        XCTAssertLessThanOrEqual(roomy.bytes, roomy.limit)

        cache.store(result, payload: Bytes(repeating: 1, count: 1000), for: shareKey(1), holder: .local)
        XCTAssertEqual(cache.count, 0, "an entry over an eighth of the limit is not kept")
        var off = ResultCache<Bytes>(limit: 0)
        off.store(result, payload: [1], for: shareKey(1), holder: .local)
        XCTAssertEqual(off.count, 0)
    }
}
