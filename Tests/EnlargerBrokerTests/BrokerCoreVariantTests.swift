import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker

/// A Submit's variants through the core: one final per variant, each forwarded once with its
/// index and the one completing the set terminal; frames outside that table are a breach; a retry
/// asks only for the variants not yet delivered; a late joiner is never given a set it would
/// get only part of; each variant is cached and shared under its own key.
final class BrokerCoreVariantTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let bob: PeerID = "client-bob"
    let w1: PeerID = "worker-1"
    let w2: PeerID = "worker-2"
    static let digest = Data(repeating: 0xCD, count: 32)

    private func submit(_ broker: inout CoreHarness, _ peer: PeerID, _ id: String, widths: [UInt32] = [640, 320, 160],
                        shared: Bool = false) {
        broker.client(peer, .submit(.with {
            $0.requestID = id
            $0.variants = widths.map { width in .with { $0.width = width } }
            if shared { $0.source.inline.sha256 = Self.digest }
        }, image: CoreHarness.jpeg))
    }

    private func variant(_ broker: inout CoreHarness, _ worker: PeerID, _ job: Enlarger_V1_Job, _ index: UInt32,
                         terminal: Bool, stage: Enlarger_V1_Stage = .final) {
        broker.worker(worker, .jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = stage
            $0.width = 10 * (index + 1)
            $0.height = 10
            $0.variant = index
            $0.terminal = terminal
            $0.digestVerified = true
        }, image: CoreHarness.image))
    }

    func testEachVariantIsForwardedOnceWithItsIndexAndTheLastIsTerminal() throws {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "set")
        let job = try XCTUnwrap(broker.jobs(for: w1).first)
        XCTAssertEqual(job.variants.map(\.index), [0, 1, 2])
        XCTAssertEqual(job.variants.map(\.spec.width), [640, 320, 160])
        XCTAssertEqual(job.delivery, .final, "no degraded result for variants")
        XCTAssertFalse(job.placeholder)
        variant(&broker, w1, job, 0, terminal: false)
        variant(&broker, w1, job, 2, terminal: false)
        variant(&broker, w1, job, 1, terminal: true)
        let events = broker.events(for: alice)
        XCTAssertEqual(events.map(\.summary), ["accepted set", "result set final", "result set final",
                                               "result set final terminal"])
        let indexes = events.compactMap { event -> UInt32? in
            if case .result(let result, _) = event { return result.variant } else { return nil }
        }
        XCTAssertEqual(indexes, [0, 2, 1])
        XCTAssertEqual(broker.core.totals.finished, 1)
        XCTAssertTrue(broker.core.isIdle)
    }

    /// A repeated variant, an unknown index, a degraded result, a terminal flag on any but the
    /// last outstanding variant, or none on it: the request fails INTERNAL, and nothing after.
    func testFramesOutsideTheTableAreABreach() throws {
        let breaches: [(String, (inout CoreHarness, BrokerCoreVariantTests, Enlarger_V1_Job) -> Void)] = [
            ("repeat", { b, t, job in t.variant(&b, t.w1, job, 0, terminal: false); t.variant(&b, t.w1, job, 0, terminal: false) }),
            ("unknown index", { b, t, job in t.variant(&b, t.w1, job, 7, terminal: false) }),
            ("degraded", { b, t, job in t.variant(&b, t.w1, job, 0, terminal: false, stage: .degraded) }),
            ("early terminal", { b, t, job in t.variant(&b, t.w1, job, 0, terminal: true) }),
            ("late non-terminal", { b, t, job in
                t.variant(&b, t.w1, job, 0, terminal: false)
                t.variant(&b, t.w1, job, 1, terminal: false)
                t.variant(&b, t.w1, job, 2, terminal: false)
            }),
        ]
        for (name, breach) in breaches {
            var broker = CoreHarness()
            broker.ready(w1)
            submit(&broker, alice, "set")
            let job = try XCTUnwrap(broker.jobs(for: w1).first)
            breach(&broker, self, job)
            let summaries = broker.events(for: alice).map(\.summary)
            XCTAssertEqual(summaries.last, "failed set internal", "\(name): \(summaries)")
            XCTAssertEqual(summaries.filter { $0 == "failed set internal" }.count, 1, name)
            XCTAssertFalse(summaries.contains("result set final terminal"), name)
            // Whatever the worker sends afterwards reaches no one.
            variant(&broker, w1, job, 1, terminal: false)
            XCTAssertEqual(broker.events(for: alice).map(\.summary), [], name)
        }
    }

    /// A worker lost after two of three variants: the retry asks only for the third, which
    /// completes the set; the client gets each variant once.
    func testARetryAsksOnlyForTheVariantsNotDelivered() throws {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "set")
        let first = try XCTUnwrap(broker.jobs(for: w1).first)
        variant(&broker, w1, first, 0, terminal: false)
        variant(&broker, w1, first, 2, terminal: false)
        broker.workerUnreachable(w1)
        let retry = try XCTUnwrap(broker.ready(w2).first)
        XCTAssertEqual(retry.attempt, 2)
        XCTAssertEqual(retry.variants.map(\.index), [1])
        variant(&broker, w2, retry, 1, terminal: true)
        let finals = broker.events(for: alice).filter { $0.summary.hasPrefix("result") }.map(\.summary)
        XCTAssertEqual(finals, ["result set final", "result set final", "result set final terminal"])
        XCTAssertEqual(broker.core.totals.finished, 1)
    }

    /// Identical sets share one job while it waits; once dispatched, an identical set gets a job
    /// of its own (it would miss the variants already sent).
    func testAnIdenticalSetJoinsOnlyAWaitingJob() throws {
        var broker = CoreHarness()
        submit(&broker, alice, "first", shared: true)
        submit(&broker, bob, "waiting", shared: true)
        XCTAssertEqual(broker.core.liveJobCount, 1, "joined while waiting")
        let job = try XCTUnwrap(broker.ready(w1, capacity: 2).first)
        variant(&broker, w1, job, 0, terminal: false)
        submit(&broker, bob, "late", shared: true)
        XCTAssertEqual(broker.core.liveJobCount, 2, "a set under way is not joined")
        variant(&broker, w1, job, 1, terminal: false)
        variant(&broker, w1, job, 2, terminal: true)
        XCTAssertEqual(broker.events(for: bob).map(\.summary).filter { $0.hasPrefix("result waiting") }.count, 3)
        let late = try XCTUnwrap(broker.jobs(for: w1).last)
        XCTAssertEqual(late.variants.map(\.index), [1, 2], "variant 0 came from the cache")
    }

    /// Each variant's final is cached under a single request's key: the set again is answered
    /// whole from the cache, a single request for one variant too; a set with one variant more
    /// gets the three at once and a job for the fourth alone, which completes it.
    func testTheCacheAnswersEachVariantUnderItsOwnKey() throws {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "set", shared: true)
        let job = try XCTUnwrap(broker.jobs(for: w1).first)
        variant(&broker, w1, job, 0, terminal: false)
        variant(&broker, w1, job, 1, terminal: false)
        variant(&broker, w1, job, 2, terminal: true)
        _ = broker.events(for: alice)
        submit(&broker, alice, "again", shared: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["accepted again", "result again final cached", "result again final cached",
                        "result again final terminal cached"])
        single(&broker, alice, "one", width: 320)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted one", "result one final terminal cached"])
        submit(&broker, alice, "more", widths: [640, 320, 160, 80], shared: true)
        let events = broker.events(for: alice)
        XCTAssertEqual(events.map(\.summary), ["accepted more", "result more final cached", "result more final cached",
                                               "result more final cached"])
        XCTAssertEqual(variantIndexes(events), [0, 1, 2])
        let rest = try XCTUnwrap(broker.jobs(for: w1).first)
        XCTAssertEqual(rest.variants.map(\.index), [3], "the worker is asked only for the variant not cached")
        // A second such set does not join this job: it would miss the cached three.
        submit(&broker, bob, "more too", widths: [640, 320, 160, 80], shared: true)
        XCTAssertEqual(broker.core.liveJobCount, 2)
        variant(&broker, w1, rest, 3, terminal: true)
        let last = broker.events(for: alice)
        XCTAssertEqual(last.map(\.summary), ["result more final terminal"])
        XCTAssertEqual(variantIndexes(last), [3])
        XCTAssertEqual(broker.inconsistencies, [])
    }

    /// A single-output request for one variant of a set under way shares it: no job of its
    /// own, nothing of the other variants, that variant's final as its own terminal Result
    /// (untagged), and it ends there while the set goes on.
    func testASingleRequestSharesOneVariantOfASetUnderWay() throws {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "set", shared: true)
        let job = try XCTUnwrap(broker.jobs(for: w1).first)
        single(&broker, bob, "small", width: 160)
        XCTAssertEqual(broker.core.liveJobCount, 1, "it joined the set's job")
        XCTAssertEqual(broker.jobs(for: w1), [])
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted small"])
        variant(&broker, w1, job, 0, terminal: false)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), [], "not its variant")
        variant(&broker, w1, job, 2, terminal: false)
        let mine = broker.events(for: bob)
        XCTAssertEqual(mine.map(\.summary), ["result small final terminal"])
        XCTAssertEqual(variantIndexes(mine), [0])
        if case .result(let result, _)? = mine.first { XCTAssertEqual(result.width, 30, "variant 2's final") }
        XCTAssertEqual(broker.core.totals.finished, 1)
        XCTAssertEqual(broker.core.totals.jobsShared, 1)
        XCTAssertEqual(broker.inconsistencies, [])
        // A variant already sent is not joined: the cache answers it.
        single(&broker, bob, "large", width: 640)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted large", "result large final terminal cached"])
        variant(&broker, w1, job, 1, terminal: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary).filter { $0.hasPrefix("result") }.count, 3, "the set whole")
        XCTAssertTrue(broker.core.isIdle)
    }

    /// Without the cache, joining still works on each variant's key; with sharing off nothing
    /// joins; another principal's set is not joined unless sharing spans principals.
    func testSharingAVariantFollowsTheSharingRules() throws {
        var noCache = CoreHarness { $0.resultCacheBytes = 0 }
        noCache.ready(w1)
        submit(&noCache, alice, "set", shared: true)
        single(&noCache, bob, "small", width: 160)
        XCTAssertEqual(noCache.core.liveJobCount, 1)

        var noSharing = CoreHarness { $0.shareJobs = false }
        noSharing.ready(w1, capacity: 2)
        submit(&noSharing, alice, "set", shared: true)
        single(&noSharing, bob, "small", width: 160)
        XCTAssertEqual(noSharing.core.liveJobCount, 2)

        var apart = CoreHarness()
        apart.ready(w1, capacity: 2)
        apart.client(alice, as: Principal("curve:alice"), .submit(.with {
            $0.requestID = "set"
            $0.variants = [640, 320].map { width in .with { $0.width = width } }
            $0.source.inline.sha256 = Self.digest
        }, image: CoreHarness.jpeg))
        apart.client(bob, as: Principal("curve:bob"), .submit(.with {
            $0.requestID = "small"
            $0.spec.width = 320
            $0.delivery = .final
            $0.source.inline.sha256 = Self.digest
        }, image: CoreHarness.jpeg))
        XCTAssertEqual(apart.core.liveJobCount, 2, "principals' work is kept apart")
    }

    /// The set's own request cancelled: the job goes on for the request sharing a variant,
    /// which gets it; once that one is served and nobody is left, the worker is told to stop,
    /// and its last frames reach no one.
    func testTheJobStopsWhenItsLastSharerIsServed() throws {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "set", shared: true)
        let job = try XCTUnwrap(broker.jobs(for: w1).first)
        single(&broker, bob, "middle", width: 320)
        broker.cancel(alice, "set")
        XCTAssertEqual(broker.events(for: alice).map(\.summary).filter { !$0.hasPrefix("cancelAck") },
                       ["accepted set", "cancelled set"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), [], "bob still needs the job")
        variant(&broker, w1, job, 0, terminal: false)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), [], "nothing after cancel")
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted middle"])
        variant(&broker, w1, job, 1, terminal: false)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["result middle final terminal"])
        XCTAssertEqual(broker.commands(for: w1).map(\.summary), ["cancelJob \(job.jobID) #1"])
        variant(&broker, w1, job, 2, terminal: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary) + broker.events(for: bob).map(\.summary), [])
        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.inconsistencies, [])
    }

    /// The set cancelled while its job still waits: the requests sharing its variants each
    /// get a job of their own (one output each, not the whole set), and the set's is gone.
    func testSharersOfAWaitingSetGetJobsOfTheirOwnWhenTheSetLeaves() throws {
        var broker = CoreHarness()
        submit(&broker, alice, "set", shared: true)
        single(&broker, bob, "small", width: 160)
        single(&broker, bob, "large", width: 640)
        XCTAssertEqual(broker.core.liveJobCount, 1)
        broker.cancel(alice, "set")
        XCTAssertEqual(broker.core.liveJobCount, 2, "one job for each sharer, the set's withdrawn")
        XCTAssertEqual(broker.inconsistencies, [])
        let jobs = broker.ready(w1, capacity: 2)
        XCTAssertEqual(jobs.map(\.variants), [[], []])
        XCTAssertEqual(Set(jobs.map(\.spec.width)), [160, 640])
        for job in jobs { broker.finish(w1, job) }
        XCTAssertEqual(broker.events(for: bob).map(\.summary).sorted(),
                       ["accepted large", "accepted small", "result large final terminal", "result small final terminal"])
        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.inconsistencies, [])
    }

    /// Many requests sharing one variant of a set that leaves get one job between them, not
    /// one each: a set leaves at most a job per variant, whatever number of requests shared it
    /// (they joined taking no queue slot and holding no image, and must not add up to more).
    func testSharersOfOneVariantGetOneJobBetweenThem() throws {
        var broker = CoreHarness()
        submit(&broker, alice, "set", shared: true)
        for id in ["a", "b", "c"] { single(&broker, bob, id, width: 160) }
        single(&broker, bob, "d", width: 640)
        XCTAssertEqual(broker.core.liveJobCount, 1)
        broker.cancel(alice, "set")
        XCTAssertEqual(broker.core.liveJobCount, 2, "one job for variant 2's three sharers, one for variant 0's")
        XCTAssertEqual(broker.core.waiting.queuedBy[.local], 2)
        // One image (the set's bytes, shared by both jobs), now charged to the sharers' principal.
        XCTAssertEqual(broker.core.liveImageBytes, CoreHarness.jpeg.count)
        XCTAssertEqual(broker.core.liveImageBytesBy, [.local: CoreHarness.jpeg.count])
        XCTAssertEqual(broker.inconsistencies, [])
        let jobs = broker.ready(w1, capacity: 4)
        XCTAssertEqual(jobs.map(\.spec.width).sorted(), [160, 640])
        for job in jobs { broker.finish(w1, job) }
        XCTAssertEqual(broker.events(for: bob).map(\.summary).filter { $0.hasPrefix("result") }.sorted(),
                       ["result a final terminal", "result b final terminal", "result c final terminal",
                        "result d final terminal"])
        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.inconsistencies, [])
    }

    /// A set that was quarantined (its worker died while it ran beside another job) and then
    /// left to a request sharing one of its variants: the sharer's job waits in quarantine and
    /// keeps the set's losses, so a variant that may be what kills workers runs alone and gets
    /// no fresh budget of crashes.
    func testASharersJobKeepsTheSetsQuarantine() throws {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        submit(&broker, alice, "set", shared: true)
        broker.client(alice, .submit(CoreHarness.submitMessage("other", delivery: .final), image: CoreHarness.jpeg))
        XCTAssertEqual(broker.jobs(for: w1).count, 2)
        broker.workerUnreachable(w1)
        single(&broker, bob, "small", width: 160)
        broker.cancel(alice, "set")
        XCTAssertEqual(broker.inconsistencies, [])
        XCTAssertEqual(broker.core.waiting.quarantined.count, 2, "the other request's job, and the sharer's in the set's place")
        let sharerJob = try XCTUnwrap(broker.core.jobs.first { $0.value.spec.width == 160 })
        XCTAssertTrue(sharerJob.value.quarantined)
        XCTAssertEqual(broker.core.waiting.place(of: sharerJob.key), .quarantine)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted small"])
    }

    /// A set left while a worker had its job goes on for the request sharing one of its
    /// variants; when that worker is lost, the sharer gets a job of its own (in quarantine with
    /// the set's loss: it ran alone), not the whole set again.
    func testASetLeftToItsSharersIsNotRetriedWhole() throws {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "set", shared: true)
        XCTAssertEqual(broker.jobs(for: w1).count, 1)
        single(&broker, bob, "small", width: 160)
        broker.cancel(alice, "set")
        XCTAssertEqual(broker.commands(for: w1).count, 0, "the sharer still waits for the set's job")
        broker.workerUnreachable(w1)
        XCTAssertEqual(broker.inconsistencies, [])
        let own = try XCTUnwrap(broker.core.jobs.values.first)
        XCTAssertEqual(broker.core.liveJobCount, 1)
        XCTAssertEqual(own.variants, [])
        XCTAssertEqual(own.spec.width, 160)
        XCTAssertTrue(own.quarantined)
        XCTAssertEqual(own.losses, 1)
        let retry = try XCTUnwrap(broker.ready(w2).first)
        XCTAssertEqual(retry.variants, [])
        XCTAssertEqual(retry.spec.width, 160)
        broker.finish(w2, retry)
        XCTAssertEqual(broker.events(for: bob).map(\.summary).filter { !$0.hasPrefix("started") },
                       ["accepted small", "result small final terminal"])
        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.inconsistencies, [])
    }

    /// The request sharing a variant is cancelled, or the set fails: each ends once, and the
    /// other's events are untouched.
    func testASharerEndsOnItsOwnOrWithTheSet() throws {
        var broker = CoreHarness()
        broker.ready(w1)
        submit(&broker, alice, "set", shared: true)
        let job = try XCTUnwrap(broker.jobs(for: w1).first)
        single(&broker, bob, "one", width: 320)
        single(&broker, bob, "two", width: 160)
        broker.cancel(bob, "one")
        XCTAssertEqual(broker.events(for: bob).map(\.summary).filter { !$0.hasPrefix("cancelAck") },
                       ["accepted one", "accepted two", "cancelled one"])
        variant(&broker, w1, job, 1, terminal: false)
        XCTAssertEqual(broker.events(for: bob).map(\.summary), [])
        broker.worker(w1, .jobFailed(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.code = .corrupt
            $0.message = "broken"
        }))
        XCTAssertEqual(broker.events(for: bob).map(\.summary), ["failed two corrupt"])
        XCTAssertEqual(broker.events(for: alice).map(\.summary).suffix(1), ["failed set corrupt"])
        XCTAssertTrue(broker.core.isIdle)
    }

    /// The set fails for a reason that may be another variant's (an output too large): the
    /// request sharing one variant is not failed with it but gets a job of its own, which
    /// serves it. A failure of the image itself (corrupt data) ends both alike.
    func testASharerOutlivesAFailureThatMayNotBeItsOwn() throws {
        for (code, sharerFails) in [(Enlarger_V1_ErrorCode.tooLarge, false), (.corrupt, true)] {
            var broker = CoreHarness()
            broker.ready(w1)
            submit(&broker, alice, "set", shared: true)
            let job = try XCTUnwrap(broker.jobs(for: w1).first)
            single(&broker, bob, "small", width: 160)
            broker.worker(w1, .jobFailed(.with {
                $0.jobID = job.jobID
                $0.attempt = job.attempt
                $0.code = code
                $0.message = "simulated"
            }))
            XCTAssertEqual(broker.events(for: alice).map(\.summary).last, "failed set \(code)")
            XCTAssertEqual(broker.inconsistencies, [], "\(code)")
            if sharerFails {
                XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted small", "failed small \(code)"])
                XCTAssertTrue(broker.core.isIdle)
                continue
            }
            XCTAssertEqual(broker.events(for: bob).map(\.summary), ["accepted small"])
            let own = try XCTUnwrap(broker.jobs(for: w1).first, "its own job, dispatched at once")
            XCTAssertNotEqual(own.jobID, job.jobID)
            XCTAssertEqual(own.variants, [])
            XCTAssertEqual(own.spec.width, 160)
            XCTAssertEqual(own.delivery, .final)
            broker.finish(w1, own)
            XCTAssertEqual(broker.events(for: bob).map(\.summary), ["result small final terminal"])
            XCTAssertTrue(broker.core.isIdle)
            XCTAssertEqual(broker.inconsistencies, [])
        }
    }

    private func single(_ broker: inout CoreHarness, _ peer: PeerID, _ id: String, width: UInt32) {
        broker.client(peer, .submit(.with {
            $0.requestID = id
            $0.spec.width = width
            $0.delivery = .final
            $0.source.inline.sha256 = Self.digest
        }, image: CoreHarness.jpeg))
    }

    private func variantIndexes(_ events: [ClientEvent]) -> [UInt32] {
        events.compactMap { event -> UInt32? in
            if case .result(let result, _) = event { return result.variant } else { return nil }
        }
    }

    func testSetsOutsideTheRulesAreRejected() {
        var broker = CoreHarness()
        submit(&broker, alice, "nine", widths: Array(repeating: 10, count: 9))
        broker.client(alice, .submit(.with {
            $0.requestID = "mixed"
            $0.variants = [.with { $0.width = 10 }, .with { $0.width = 20; $0.failOn = .none }]
        }, image: CoreHarness.jpeg))
        broker.client(alice, .submit(.with {
            $0.requestID = "info"
            $0.delivery = .info
            $0.variants = [.with { $0.width = 10 }]
        }, image: CoreHarness.jpeg))
        broker.client(alice, .submit(.with {
            $0.requestID = "boxless"
            $0.variants = [.with { $0.width = 10 }, Enlarger_V1_ResizeSpec()]
        }, image: CoreHarness.jpeg))
        XCTAssertEqual(broker.events(for: alice).map(\.summary),
                       ["rejected nine invalidArgument", "rejected mixed invalidArgument", "rejected info invalidArgument",
                        "rejected boxless invalidArgument"])
    }
}
