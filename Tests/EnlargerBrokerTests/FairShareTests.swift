import EnlargerProtocol
import Foundation
import TestSupport
import XCTest

@testable import EnlargerBroker

/// Priority lanes, the interactive reserve, weighted fair share between principals and
/// their limits: `WaitingJobs` and `TenantPolicy` on their own, then through the core.
final class FairShareTests: XCTestCase {
    let carol = Principal("curve:carol"), dave = Principal("curve:dave"), erin = Principal("curve:erin")
    let carolsPeer: PeerID = "client-carol", davesPeer: PeerID = "client-dave", erinsPeer: PeerID = "client-erin"
    let w1: PeerID = "worker-1", w2: PeerID = "worker-2"

    // MARK: WaitingJobs

    func testWeightedTurnsWithinALane() {
        var waiting = WaitingJobs()
        for jobID in UInt64(1)...6 { waiting.place(jobID, lane: .interactive, principal: carol) }
        for jobID in UInt64(11)...16 { waiting.place(jobID, lane: .interactive, principal: dave) }
        var order: [UInt64] = []
        while let jobID = waiting.next(in: .interactive, weight: { $0 == self.carol ? 2 : 1 }, eligible: { _ in true }) {
            order.append(jobID)
            XCTAssertEqual(waiting.inconsistencies, [])
        }
        // Two of Carol's for each of Dave's while both wait, then the rest of Dave's.
        XCTAssertEqual(order, [1, 2, 11, 3, 4, 12, 5, 6, 13, 14, 15, 16])
        XCTAssertTrue(waiting.isEmpty)
        XCTAssertEqual(waiting.queuedBy, [:])
    }

    /// Jobs that cost more take more of their principal's turns: at equal weights, one job
    /// of cost 3 for every three of cost 1 while both wait.
    func testACostlyJobTakesItsCostOfTheTurns() {
        var waiting = WaitingJobs()
        for jobID in UInt64(1)...4 { waiting.place(jobID, lane: .interactive, principal: carol) }
        for jobID in UInt64(11)...19 { waiting.place(jobID, lane: .interactive, principal: dave) }
        var order: [UInt64] = []
        while let jobID = waiting.next(in: .interactive, weight: { _ in 1 }, eligible: { _ in true },
                                       cost: { $0 < 10 ? 3 : 1 }) {
            order.append(jobID)
            XCTAssertEqual(waiting.inconsistencies, [])
        }
        XCTAssertEqual(order, [1, 11, 12, 13, 2, 14, 15, 16, 3, 17, 18, 19, 4])
        // A principal in debt alone in its lane still gets its jobs: nobody else waits.
        for jobID in UInt64(21)...23 { waiting.place(jobID, lane: .bulk, principal: carol) }
        var alone: [UInt64] = []
        while let jobID = waiting.next(in: .bulk, weight: { _ in 1 }, eligible: { _ in true }, cost: { _ in 8 }) {
            alone.append(jobID)
        }
        XCTAssertEqual(alone, [21, 22, 23])
    }

    /// A principal that keeps one costly job waiting at a time (it sends the next set as the
    /// last one goes) pays for each as one with a backlog does: its debt outlasts its empty
    /// queue while others wait, and is forgotten once the lane empties.
    func testADebtOutlastsAnEmptyQueue() {
        var waiting = WaitingJobs()
        var carols: UInt64 = 1
        waiting.place(carols, lane: .interactive, principal: carol)
        for jobID in UInt64(11)...19 { waiting.place(jobID, lane: .interactive, principal: dave) }
        var order: [UInt64] = []
        while let jobID = waiting.next(in: .interactive, weight: { _ in 1 }, eligible: { _ in true },
                                       cost: { $0 < 10 ? 3 : 1 }) {
            order.append(jobID)
            if jobID < 10 && carols < 4 {
                carols += 1
                waiting.place(carols, lane: .interactive, principal: carol)
            }
            XCTAssertEqual(waiting.inconsistencies, [])
        }
        XCTAssertEqual(order, [1, 11, 12, 13, 2, 14, 15, 16, 3, 17, 18, 19, 4])
        // The lane is empty: the last debt is gone, and Carol's next job goes at once.
        waiting.place(5, lane: .interactive, principal: carol)
        waiting.place(20, lane: .interactive, principal: dave)
        XCTAssertEqual(waiting.next(in: .interactive, weight: { _ in 1 }, eligible: { _ in true }, cost: { _ in 1 }), 5)
        XCTAssertEqual(waiting.inconsistencies, [])
    }

    /// A job `next` took but dispatch held back (none of its clients reads) is charged when it
    /// goes, not also when it was taken: its cost is given back.
    func testAHeldBackJobIsChargedOnce() {
        var waiting = WaitingJobs()
        waiting.place(1, lane: .interactive, principal: carol)
        waiting.place(2, lane: .interactive, principal: carol)
        for jobID in UInt64(11)...16 { waiting.place(jobID, lane: .interactive, principal: dave) }
        let cost: (UInt64) -> Int = { $0 < 10 ? 3 : 1 }
        XCTAssertEqual(waiting.next(in: .interactive, weight: { _ in 1 }, eligible: { _ in true }, cost: cost), 1)
        waiting.refund(3, to: carol, in: .interactive)
        waiting.holdBack(1, for: carolsPeer, principal: carol)
        var order: [UInt64] = []
        while let jobID = waiting.next(in: .interactive, weight: { _ in 1 }, eligible: { _ in true }, cost: cost) {
            order.append(jobID)
            XCTAssertEqual(waiting.inconsistencies, [])
        }
        // Charged for job 1 too, Carol would wait for three of Dave's: [11, 12, 13, 2, …].
        XCTAssertEqual(order, [11, 2, 12, 13, 14, 15, 16])
    }

    func testAnIneligiblePrincipalIsSkippedAndKeepsItsPlace() {
        var waiting = WaitingJobs()
        waiting.place(1, lane: .interactive, principal: carol)
        waiting.place(2, lane: .interactive, principal: carol)
        waiting.place(11, lane: .interactive, principal: dave)
        let notCarol: (Principal) -> Bool = { $0 != self.carol }
        XCTAssertEqual(waiting.next(in: .interactive, weight: { _ in 1 }, eligible: notCarol), 11)
        XCTAssertNil(waiting.next(in: .interactive, weight: { _ in 1 }, eligible: notCarol))
        XCTAssertEqual(waiting.next(in: .interactive, weight: { _ in 1 }, eligible: { _ in true }), 1)
        XCTAssertEqual(waiting.count, 1)
        XCTAssertEqual(waiting.inconsistencies, [])
    }

    func testEveryJobIsInExactlyOnePlace() {
        var waiting = WaitingJobs()
        waiting.place(1, lane: .bulk, principal: carol)
        waiting.place(2, lane: .bulk, principal: carol)
        waiting.quarantine(3)
        waiting.holdBack(4, for: carolsPeer, principal: carol)
        waiting.holdBack(5, for: carolsPeer, principal: carol)
        XCTAssertEqual(waiting.count, 5)
        XCTAssertEqual(waiting.count(in: .bulk), 2)
        XCTAssertEqual(waiting.withdraw(2), .lane(.bulk, carol))
        XCTAssertEqual(waiting.withdraw(3), .quarantine)
        XCTAssertNil(waiting.withdraw(3))
        // Released held jobs go to the front of their lane, oldest first.
        waiting.releaseHeldBack([5, 4], lane: { _ in .bulk }, principal: { _ in self.carol })
        XCTAssertEqual(waiting.heldBack(for: carolsPeer), [])
        waiting.move(1, to: .interactive)
        XCTAssertEqual(waiting.place(of: 1), .lane(.interactive, carol))
        XCTAssertEqual(waiting.next(in: .bulk, weight: { _ in 1 }, eligible: { _ in true }), 4)
        XCTAssertEqual(waiting.next(in: .bulk, weight: { _ in 1 }, eligible: { _ in true }), 5)
        XCTAssertEqual(waiting.inconsistencies, [])
    }

    func testRandomOperationsKeepWaitingJobsConsistent() {
        let principals = [carol, dave, erin]
        for seed in UInt64(1)...200 {
            var random = SeededGenerator(seed: seed)
            var waiting = WaitingJobs()
            var expected: Set<UInt64> = []
            for jobID in UInt64(1)...120 {
                switch random.next() % 6 {
                case 0, 1:
                    waiting.place(jobID, lane: random.next() % 2 == 0 ? .interactive : .bulk,
                                  principal: principals[Int(random.next() % 3)], atFront: random.next() % 4 == 0)
                    expected.insert(jobID)
                case 2:
                    waiting.holdBack(jobID, for: PeerID([UInt8(random.next() % 2)]), principal: random.next() % 2 == 0 ? carol : dave)
                    expected.insert(jobID)
                case 3:
                    if let victim = expected.randomElement(using: &random) {
                        XCTAssertNotNil(waiting.withdraw(victim))
                        expected.remove(victim)
                    }
                case 4:
                    let lane: Lane = random.next() % 2 == 0 ? .interactive : .bulk
                    if let taken = waiting.next(in: lane, weight: { $0.name.count % 3 + 1 },
                                                eligible: { _ in random.next() % 5 != 0 }) {
                        XCTAssertTrue(expected.remove(taken) != nil, "seed \(seed): \(taken) was not waiting")
                    }
                default:
                    waiting.releaseHeldBack(waiting.allHeldBack, lane: { _ in .bulk }, principal: { _ in self.erin })
                }
                XCTAssertEqual(waiting.inconsistencies, [], "seed \(seed)")
                XCTAssertEqual(Set(waiting.allPlaces.keys), expected, "seed \(seed)")
            }
        }
    }

    // MARK: TenantPolicy

    func testATenantsFileIsReadWithDefaultsAndComments() throws {
        let policy = try TenantPolicy(parsing: """
            # principal   terms
            *  weight=1 queued=256   # everyone else
            curve:ab#cd=  weight=4 queued=2000 running=32 image-mib=512 files=tenants/ab
            local weight=2 files=.

            """)
        XCTAssertEqual(policy.defaults, .init(weight: 1, maxQueued: 256))
        XCTAssertEqual(policy.terms(for: Principal("curve:ab#cd=")),
                       .init(weight: 4, maxQueued: 2000, maxRunning: 32, maxImageBytes: 512 << 20, files: "tenants/ab"))
        XCTAssertEqual(policy.terms(for: .local), .init(weight: 2, files: ""))
        XCTAssertEqual(policy.terms(for: Principal("curve:zz")), policy.defaults)
    }

    func testABadTenantsLineIsRefusedWithItsNumber() {
        let cases: [(String, String)] = [
            ("local weight=2\nlocal weight=3", "line 2: local is named twice"),
            ("local weight=0", "line 1: weight must be 1 to 1000"),
            ("local speed=3", "line 1: unknown term \"speed\" (weight, queued, running, live, image-mib or files)"),
            ("\n\nlocal weight", "line 3: \"weight\" is not NAME=NUMBER (weight, queued, running, live, image-mib or files)"),
            ("local image-mib=0", "line 1: image-mib must be 1 to 1048576"),
            ("local files=../x", "line 1: files must be a directory under the files root (like tenants/alice, without . or .. parts), or . for all of it"),
            ("local files=/srv", "line 1: files must be a directory under the files root (like tenants/alice, without . or .. parts), or . for all of it"),
            ("local files=a//b", "line 1: files must be a directory under the files root (like tenants/alice, without . or .. parts), or . for all of it"),
            ("local running=0", "line 1: running must be 1 or more"),
            ("local live=0", "line 1: live must be 1 or more"),
        ]
        for (text, message) in cases {
            XCTAssertThrowsError(try TenantPolicy(parsing: text), text) { error in
                XCTAssertEqual("\(error)", message)
            }
        }
    }

    // MARK: Through the core

    private func submit(_ broker: inout CoreHarness, _ peer: PeerID, _ id: String, as principal: Principal,
                        priority: Enlarger_V1_Priority = .interactive) {
        var submit = CoreHarness.submitMessage(id, delivery: .final)
        submit.priority = priority
        // Each request its own bytes: nothing is shared or cached.
        broker.client(peer, as: principal, .submit(submit, image: CoreHarness.jpeg + Array(id.utf8)))
    }

    func testInteractiveRequestsGoFirstAndKeepTheirReserve() {
        var broker = CoreHarness { $0.interactiveReserve = 0.25 }
        broker.ready(w1, capacity: 4)
        // A flood of bulk work takes 3 of the 4 slots; the fourth is kept.
        for index in 0..<10 { submit(&broker, davesPeer, "bulk\(index)", as: dave, priority: .bulk) }
        let bulk = broker.jobs(for: w1)
        XCTAssertEqual(bulk.map(\.requestID), ["bulk0", "bulk1", "bulk2"])
        // An interactive request takes the kept slot at once.
        submit(&broker, carolsPeer, "now", as: carol)
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["now"])
        // Waiting interactive work goes before waiting bulk work when a slot frees.
        submit(&broker, carolsPeer, "next", as: carol)
        broker.finish(w1, bulk[0])
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["next"])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    func testTheReserveNeverTakesTheLastSlot() {
        var broker = CoreHarness { $0.interactiveReserve = 0.9 }
        broker.ready(w1, capacity: 1)
        submit(&broker, davesPeer, "bulk", as: dave, priority: .bulk)
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["bulk"], "a fleet of one slot still runs bulk work")
    }

    func testEqualPrincipalsShareTheFleetEvenly() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        for index in 0..<50 {
            submit(&broker, carolsPeer, "c\(index)", as: carol)
            submit(&broker, davesPeer, "d\(index)", as: dave)
        }
        // Dave floods more; turns still alternate.
        for index in 50..<100 { submit(&broker, davesPeer, "d\(index)", as: dave) }
        var done: [String: Int] = [:]
        var running = broker.jobs(for: w1)
        for _ in 0..<60 {
            let job = running.removeFirst()
            done[String(job.requestID.prefix(1)), default: 0] += 1
            broker.finish(w1, job)
            running += broker.jobs(for: w1)
        }
        XCTAssertEqual(done["c"], 30)
        XCTAssertEqual(done["d"], 30)
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    /// A principal that floods sets of six outputs gets one set dispatched for every three
    /// single requests of another: about the same CPU each, not six times as much.
    func testFloodingSetsBuysNoMoreOfTheFleet() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 1)
        for index in 0..<20 {
            broker.client(carolsPeer, as: carol, .submit(.with {
                $0.requestID = "c\(index)"
                $0.variants = (1...6).map { width in .with { $0.width = UInt32(width * 10) } }
            }, image: CoreHarness.jpeg + Array("c\(index)".utf8)))
            submit(&broker, davesPeer, "d\(index)", as: dave)
        }
        var order: [String] = []
        var running = broker.jobs(for: w1)
        for _ in 0..<16 {
            let job = running.removeFirst()
            order.append(job.requestID)
            for (position, variant) in job.variants.enumerated() {
                broker.worker(w1, .jobResult(.with {
                    $0.jobID = job.jobID
                    $0.attempt = job.attempt
                    $0.stage = .final
                    $0.variant = variant.index
                    $0.terminal = position == job.variants.count - 1
                }, image: CoreHarness.image))
            }
            if job.variants.isEmpty { broker.finish(w1, job) }
            running += broker.jobs(for: w1)
        }
        // c0 went at once, to an idle worker; from then on three of Dave's for each set.
        XCTAssertEqual(order, ["c0", "d0", "c1", "d1", "d2", "d3", "c2", "d4", "d5", "d6", "c3", "d7", "d8", "d9",
                               "c4", "d10"])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    func testAPrincipalOverItsLimitsIsToldWhenToRetryAndOthersAreNotAffected() {
        var broker = CoreHarness {
            $0.tenants = TenantPolicy(principals: [self.dave.name: .init(maxQueued: 2, maxRunning: 1)])
        }
        broker.ready(w1, capacity: 3)
        for index in 0..<4 { submit(&broker, davesPeer, "d\(index)", as: dave) }
        // One runs (its running limit), two wait (its queued limit), the fourth is refused.
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["d0"])
        let refused = broker.events(for: davesPeer).compactMap { event -> Enlarger_V1_Rejected? in
            if case .rejected(let rejected) = event { rejected } else { nil }
        }
        XCTAssertEqual(refused.map(\.requestID), ["d3"])
        XCTAssertEqual(refused.first?.code, .overloaded)
        XCTAssertGreaterThanOrEqual(refused.first?.retryAfterMs ?? 0, 100)
        // Carol is untouched by Dave's limits: she gets the free slots at once.
        for index in 0..<3 { submit(&broker, carolsPeer, "c\(index)", as: carol) }
        let carols = broker.jobs(for: w1)
        XCTAssertEqual(carols.map(\.requestID), ["c0", "c1"])
        XCTAssertFalse(broker.events(for: carolsPeer).contains { if case .rejected = $0 { true } else { false } })
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
        // Once the operator lifts Dave's limits, his waiting work runs beside his first job.
        let actions = broker.core.setTenants(TenantPolicy(), now: broker.now)
        broker.record(actions)
        for job in carols { broker.finish(w1, job) }
        XCTAssertTrue(broker.jobs(for: w1).map(\.requestID).contains("d1"))
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    /// One principal cannot fill the broker's image memory: past its share (a quarter by
    /// default, or its tenant terms' `image-mib`) its Submits are refused OVERLOADED, told
    /// what it holds itself and nothing of the others, while another principal is still
    /// accepted; bytes are given back as its requests end.
    func testAPrincipalHoldsAtMostItsShareOfImageBytes() {
        let image = CoreHarness.jpeg.count + 3  // each request its own bytes: the jpeg and its id
        var broker = CoreHarness {
            $0.maxLiveImageBytes = 16 * image
            $0.maxInputBytes = 2 * image
            $0.tenants = TenantPolicy(principals: [self.erin.name: .init(maxImageBytes: 6 * image)])
        }
        XCTAssertEqual(broker.core.configuration.defaultImageBytesPerPrincipal, 4 * image)
        broker.ready(w1, capacity: 1)
        for index in 10..<16 { submit(&broker, davesPeer, "d\(index)", as: dave) }
        for index in 10..<17 { submit(&broker, erinsPeer, "e\(index)", as: erin) }
        func refused(_ peer: PeerID) -> [Enlarger_V1_Rejected] {
            broker.events(for: peer).compactMap { if case .rejected(let rejected) = $0 { rejected } else { nil } }
        }
        let davesRefused = refused(davesPeer)
        XCTAssertEqual(davesRefused.map(\.requestID), ["d14", "d15"])
        XCTAssertEqual(davesRefused.first?.code, .overloaded)
        XCTAssert(davesRefused.first?.message.hasPrefix(
            "this principal's live requests hold \(4 * image) bytes of images (its limit is \(4 * image))") == true,
                  "\(davesRefused)")
        XCTAssertEqual(refused(erinsPeer).map(\.requestID), ["e16"], "Erin's terms give her more")
        XCTAssertEqual(broker.core.liveImageBytesBy, [dave: 4 * image, erin: 6 * image])
        // Carol is still accepted, with the broker's memory far from full; an admin's requests
        // are bounded by the broker's total alone.
        for index in 10..<12 { submit(&broker, carolsPeer, "c\(index)", as: carol) }
        XCTAssertEqual(refused(carolsPeer), [])
        for index in 10..<14 { submit(&broker, w2, "l\(index)", as: .local) }
        XCTAssertEqual(refused(w2), [], "an admin is not held to a tenant's share")
        // Dave's first request ends: his share has room for one more.
        for job in broker.jobs(for: w1) { broker.finish(w1, job) }
        submit(&broker, davesPeer, "d20", as: dave)
        submit(&broker, davesPeer, "d21", as: dave)
        XCTAssertEqual(refused(davesPeer).map(\.requestID), ["d21"])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    /// Without a `queued=` term a tenant may have a quarter of the queue waiting: one that
    /// floods it (with file sources, say, which hold no image bytes) cannot have every other
    /// principal refused. An admin's own requests are bounded by the queue alone.
    func testATenantWithoutTermsHoldsAQuarterOfTheQueue() {
        var broker = CoreHarness { $0.queueLimit = 16 }
        for index in 10..<16 { submit(&broker, davesPeer, "d\(index)", as: dave) }
        let refused = broker.events(for: davesPeer).compactMap { event -> Enlarger_V1_Rejected? in
            if case .rejected(let rejected) = event { rejected } else { nil }
        }
        XCTAssertEqual(refused.map(\.requestID), ["d14", "d15"])
        XCTAssert(refused.first?.message.hasPrefix("this principal has 4 requests waiting (its limit is 4)") == true,
                  "\(refused)")
        for index in 10..<14 { submit(&broker, carolsPeer, "c\(index)", as: carol) }
        for index in 10..<18 { submit(&broker, erinsPeer, "l\(index)", as: .local) }
        XCTAssertFalse(broker.events(for: carolsPeer).contains { if case .rejected = $0 { true } else { false } })
        XCTAssertFalse(broker.events(for: erinsPeer).contains { if case .rejected = $0 { true } else { false } },
                       "an admin is bounded by the queue alone")
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    /// Live requests are bounded per principal over all its connections, requests that join
    /// another's job included (they take no queue slot): beyond, Rejected{OVERLOADED}, and
    /// the other principals are not affected. A `live=` term sets the bound; an admin has none.
    func testAPrincipalsLiveRequestsAreBoundedOverAllItsConnections() throws {
        var broker = CoreHarness {
            $0.maxLiveRequestsPerPrincipal = 4
            $0.maxLiveRequestsPerClient = 3
        }
        var shared = CoreHarness.submitMessage("x", delivery: .final)
        shared.source.inline.sha256 = Data(repeating: 5, count: 32)
        // One job, shared by every request after the first: only the first holds a queue slot.
        for (index, peer) in [davesPeer, davesPeer, "client-dave-2", "client-dave-2", "client-dave-3"].enumerated() {
            shared.requestID = "d\(index)"
            broker.client(peer, as: dave, .submit(shared, image: CoreHarness.jpeg))
        }
        XCTAssertEqual(broker.core.liveJobCount, 1)
        XCTAssertEqual(broker.core.liveRequestsBy, [dave: 4])
        let refused = broker.events(for: "client-dave-3").compactMap { event -> Enlarger_V1_Rejected? in
            if case .rejected(let rejected) = event { rejected } else { nil }
        }
        XCTAssertEqual(refused.map(\.code), [.overloaded])
        XCTAssert(refused.first?.message.hasPrefix("this principal has 4 live requests (its limit)") == true, "\(refused)")
        XCTAssertGreaterThan(refused.first?.retryAfterMs ?? 0, 0, "told when to retry")
        for index in 0..<3 { submit(&broker, carolsPeer, "c\(index)", as: carol) }
        for index in 0..<6 { submit(&broker, erinsPeer, "l\(index)", as: .local) }
        XCTAssertFalse(broker.events(for: carolsPeer).contains { if case .rejected = $0 { true } else { false } })
        let adminRefusals = broker.events(for: erinsPeer).compactMap { event -> String? in
            if case .rejected(let rejected) = event { rejected.message } else { nil }
        }
        XCTAssertEqual(adminRefusals.count, 3)
        XCTAssert(adminRefusals.allSatisfy { $0.hasPrefix("this connection has 3 live requests already") },
                  "an admin meets the connection's bound, not the principal's: \(adminRefusals)")
        broker.client(davesPeer, as: dave, .cancel(.with { $0.requestID = "d0" }))
        shared.requestID = "d9"
        broker.client("client-dave-3", as: dave, .submit(shared, image: CoreHarness.jpeg))
        XCTAssertEqual(broker.core.liveRequestsBy[dave], 4, "room again once one ended")
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")

        let policy = try TenantPolicy(parsing: "\(dave.name) live=5")
        XCTAssertEqual(policy.terms(for: dave).maxLive, 5)
    }

    /// A non-admin's status scans every live request: asked in a loop, it is made afresh at
    /// most every 100 ms, the last one given again in between.
    func testAPrincipalsStatusIsMadeAfreshAtMostTenTimesASecond() {
        var broker = CoreHarness()
        submit(&broker, davesPeer, "d1", as: dave)
        broker.client(davesPeer, as: dave, .statusRequest)
        submit(&broker, davesPeer, "d2", as: dave)
        broker.client(davesPeer, as: dave, .statusRequest)
        broker.advance(by: .milliseconds(100))
        broker.client(davesPeer, as: dave, .statusRequest)
        let depths = broker.events(for: davesPeer).compactMap { event -> UInt32? in
            if case .statusReply(let reply) = event { reply.queueDepth } else { nil }
        }
        XCTAssertEqual(depths, [1, 1, 2])
        XCTAssertEqual(broker.core.status(now: broker.now, for: .local).queueDepth, 2, "an admin's is always fresh")
    }

    /// An image is held once by the broker, and charged to every principal with a request on
    /// it: Hal's identical request joins Vera's job (results shared between principals) and
    /// Hal pays for the image as if he had sent it alone. Vera's cancel takes her charge off
    /// and leaves Hal's as it was: no principal's charge moves with another's doing.
    func testEachPrincipalIsChargedForTheImagesItsOwnRequestsHold() {
        let vera = carol, hal = dave
        let bytes = CoreHarness.jpeg.count
        var broker = CoreHarness { $0.shareAcrossPrincipals = true }
        var submit = CoreHarness.submitMessage("v", delivery: .final)
        submit.source.inline.sha256 = Data(repeating: 9, count: 32)
        broker.client(carolsPeer, as: vera, .submit(submit, image: CoreHarness.jpeg))
        submit.requestID = "h"
        broker.client(davesPeer, as: hal, .submit(submit, image: CoreHarness.jpeg))
        submit.requestID = "h2"
        broker.client(davesPeer, as: hal, .submit(submit, image: CoreHarness.jpeg))
        XCTAssertEqual(broker.core.liveJobCount, 1, "they share a job")
        XCTAssertEqual(broker.core.liveImageBytesBy, [vera: bytes, hal: bytes], "Hal's two requests hold one image")
        XCTAssertEqual(broker.core.liveImageBytes, bytes, "the broker holds the bytes once")
        broker.client(carolsPeer, as: vera, .cancel(.with { $0.requestID = "v" }))
        XCTAssertEqual(broker.core.liveImageBytesBy, [hal: bytes])
        XCTAssertEqual(broker.core.liveImageBytes, bytes)
        broker.client(davesPeer, as: hal, .cancel(.with { $0.requestID = "h" }))
        XCTAssertEqual(broker.core.liveImageBytesBy, [hal: bytes], "his other request still holds it")
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
        broker.client(davesPeer, as: hal, .cancel(.with { $0.requestID = "h2" }))
        XCTAssertEqual(broker.core.liveImageBytesBy, [:])
        XCTAssertEqual(broker.core.liveImageBytes, 0)
    }

    /// Joining a job is admitted against the joiner's own image limit: Hal, whose terms allow
    /// one image and who holds one, is refused a request that would join Vera's job, and Vera
    /// is unaffected. A request that joins a job his own requests already hold costs nothing.
    func testAJoinIsAdmittedAgainstTheJoinersImageLimit() {
        let vera = carol, hal = dave
        let bytes = CoreHarness.jpeg.count
        var broker = CoreHarness {
            $0.shareAcrossPrincipals = true
            $0.tenants = TenantPolicy(principals: [self.dave.name: .init(maxImageBytes: bytes)])
        }
        var own = CoreHarness.submitMessage("h-own", delivery: .final)
        own.source.inline.sha256 = Data(repeating: 1, count: 32)
        broker.client(davesPeer, as: hal, .submit(own, image: CoreHarness.jpeg))
        var shared = CoreHarness.submitMessage("v", delivery: .final)
        shared.source.inline.sha256 = Data(repeating: 9, count: 32)
        broker.client(carolsPeer, as: vera, .submit(shared, image: CoreHarness.jpeg))
        shared.requestID = "h-join"
        broker.client(davesPeer, as: hal, .submit(shared, image: CoreHarness.jpeg))
        let refused = broker.events(for: davesPeer).compactMap { event -> Enlarger_V1_Rejected? in
            if case .rejected(let rejected) = event { rejected } else { nil }
        }
        XCTAssertEqual(refused.map(\.requestID), ["h-join"])
        XCTAssertEqual(refused.first?.code, .overloaded)
        XCTAssertEqual(broker.core.liveImageBytesBy, [vera: bytes, hal: bytes])
        XCTAssertEqual(broker.core.liveJobCount, 2)
        XCTAssertEqual(broker.events(for: carolsPeer).map(\.summary), ["accepted v"], "Vera is unaffected")
        // His own image again: the request joins his job and is charged nothing more.
        own.requestID = "h-again"
        broker.client(davesPeer, as: hal, .submit(own, image: CoreHarness.jpeg))
        XCTAssertEqual(broker.events(for: davesPeer).last?.summary, "accepted h-again")
        XCTAssertEqual(broker.core.liveJobCount, 2)
        XCTAssertEqual(broker.core.liveImageBytesBy, [vera: bytes, hal: bytes])
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }

    /// A principal whose client does not read has its jobs held back rather than dispatched:
    /// they still wait, and count against its limit on waiting requests (they would let it
    /// fill the broker's queue and image bytes otherwise).
    func testHeldBackJobsCountAgainstTheQueuedLimit() {
        var broker = CoreHarness {
            $0.tenants = TenantPolicy(principals: [self.dave.name: .init(maxQueued: 2, maxRunning: 10)])
        }
        broker.ready(w1, capacity: 4)
        submit(&broker, davesPeer, "d0", as: dave)
        XCTAssertEqual(broker.jobs(for: w1).map(\.requestID), ["d0"])
        broker.backlog(davesPeer, bytes: 4 << 20)  // Dave stops reading
        for index in 1..<5 { submit(&broker, davesPeer, "d\(index)", as: dave) }
        XCTAssertEqual(broker.jobs(for: w1), [], "held back: nobody reads them")
        XCTAssertEqual(broker.core.waiting.heldBackBy[dave], 2)
        let refused = broker.events(for: davesPeer).compactMap { event -> String? in
            if case .rejected(let rejected) = event { rejected.requestID } else { nil }
        }
        XCTAssertEqual(refused, ["d3", "d4"])
        XCTAssertEqual(broker.inconsistencies, [])
    }

    func testASharedJobWaitsInTheHigherLane() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 1)
        submit(&broker, davesPeer, "blocker", as: dave)
        _ = broker.jobs(for: w1)
        var bulk = CoreHarness.submitMessage("b", delivery: .final)
        bulk.priority = .bulk
        bulk.source.inline.sha256 = Data(repeating: 7, count: 32)
        broker.client(davesPeer, as: dave, .submit(bulk, image: CoreHarness.jpeg))
        var urgent = bulk
        urgent.requestID = "u"
        urgent.priority = .interactive
        broker.client(davesPeer, as: dave, .submit(urgent, image: CoreHarness.jpeg))
        let jobID = broker.core.requests[RequestKey(principal: dave, id: "b")]!.jobID
        XCTAssertEqual(broker.core.requests[RequestKey(principal: dave, id: "u")]?.jobID, jobID, "they share a job")
        XCTAssertEqual(broker.core.waiting.place(of: jobID), .lane(.interactive, dave))
        XCTAssertTrue(broker.inconsistencies.isEmpty, "\(broker.inconsistencies)")
    }
}
