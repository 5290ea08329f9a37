import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker

/// STAGE_PLACEHOLDER through the core: asked of the worker unless the Submit opts out, passed
/// on once and only before any image, never to a request that opted out, and not asked again
/// of a retry once sent.
final class BrokerCorePlaceholderTests: XCTestCase {
    let alice: PeerID = "client-alice"
    let bob: PeerID = "client-bob"
    let w1: PeerID = "worker-1"
    let w2: PeerID = "worker-2"
    static let hash = Data([0x9F, 0x35, 0x0B, 0x05, 0x80, 0x57, 0x88, 0x87, 0x77, 0x78])
    static let digest = Data(repeating: 0xAB, count: 32)

    private func submit(_ broker: inout CoreHarness, _ peer: PeerID, _ id: String, placeholder: Bool = true,
                        delivery: Enlarger_V1_Delivery = .progressive, shared: Bool = false) {
        broker.client(peer, .submit(.with {
            $0.requestID = id
            $0.spec.width = 64
            $0.delivery = delivery
            $0.noPlaceholder = !placeholder
            if shared { $0.source.inline.sha256 = Self.digest }
        }, image: CoreHarness.jpeg))
    }

    private func placeholder(_ broker: inout CoreHarness, _ worker: PeerID, _ job: Enlarger_V1_Job, terminal: Bool = false) {
        broker.worker(worker, .jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = .placeholder
            $0.width = 32
            $0.height = 24
            $0.placeholder = Self.hash
            $0.terminal = terminal
        }, image: []))
    }

    func testAPlaceholderIsAskedForPassedOnOnceAndOnlyBeforeAnyImage() throws {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        submit(&broker, alice, "a")
        submit(&broker, alice, "quiet", placeholder: false)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.map(\.placeholder), [true, false])

        // One carrying a payload, or a hash far larger than ThumbHash's, is dropped.
        broker.worker(w1, .jobResult(.with {
            $0.jobID = jobs[0].jobID
            $0.attempt = jobs[0].attempt
            $0.stage = .placeholder
            $0.placeholder = Self.hash
        }, image: CoreHarness.image))
        broker.worker(w1, .jobResult(.with {
            $0.jobID = jobs[0].jobID
            $0.attempt = jobs[0].attempt
            $0.stage = .placeholder
            $0.placeholder = Data(repeating: 1, count: 65)
        }, image: []))
        placeholder(&broker, w1, jobs[0])
        placeholder(&broker, w1, jobs[0])  // a second one is dropped
        broker.result(w1, jobs[0], .degraded, terminal: false)
        broker.result(w1, jobs[0], .final, terminal: true)
        let events = broker.events(for: alice)
        XCTAssertEqual(events.map(\.summary), ["accepted a", "accepted quiet", "result a placeholder", "result a degraded",
                                               "result a final terminal"])
        guard case .result(let result, let payload) = events[2] else { return XCTFail() }
        XCTAssertEqual(result.placeholder, Self.hash)
        XCTAssertEqual([result.width, result.height], [32, 24])
        XCTAssertFalse(result.terminal)
        XCTAssertEqual(payload, [])

        // After the degraded result, a placeholder is too late: dropped, the request unharmed.
        broker.result(w1, jobs[1], .degraded, terminal: false)
        placeholder(&broker, w1, jobs[1])
        broker.result(w1, jobs[1], .final, terminal: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["result quiet degraded", "result quiet final terminal"])
        XCTAssertEqual(broker.core.totals.finished, 2)
        XCTAssertEqual(broker.core.counters.protocolBreaches, 0)
        XCTAssertTrue(broker.core.isIdle)
        XCTAssertEqual(broker.inconsistencies, [])
    }

    /// Terminal, or under DELIVERY_INFO, a placeholder breaks the delivery's table: the job is
    /// abandoned as broken and its request fails INTERNAL, as for any such result.
    func testAPlaceholderThatBreaksTheDeliveryIsABrokenJob() {
        var broker = CoreHarness()
        broker.ready(w1, capacity: 2)
        submit(&broker, alice, "a")
        submit(&broker, alice, "i", delivery: .info)
        let jobs = broker.jobs(for: w1)
        XCTAssertEqual(jobs.map(\.placeholder), [true, false], "an info job is never asked for one")
        placeholder(&broker, w1, jobs[0], terminal: true)
        placeholder(&broker, w1, jobs[1])
        let summaries = broker.events(for: alice).map(\.summary)
        XCTAssertEqual(summaries, ["accepted a", "accepted i", "failed a internal", "failed i internal"])
        XCTAssertEqual(broker.core.counters.protocolBreaches, 2)
    }

    /// A shared job: each request that wants it gets the placeholder, one that opted out does
    /// not; a joiner that wants one turns it on while the job waits.
    func testASharedJobsPlaceholderGoesOnlyToTheRequestsThatWantIt() {
        var broker = CoreHarness()
        submit(&broker, alice, "quiet", placeholder: false, shared: true)
        submit(&broker, bob, "b", shared: true)
        let jobs = broker.ready(w1)  // the job waiting is dispatched at once
        XCTAssertEqual(jobs.count, 1)
        guard jobs.count == 1 else { return }
        XCTAssertEqual(jobs.map(\.placeholder), [true], "the joiner wants one")
        placeholder(&broker, w1, jobs[0])
        broker.result(w1, jobs[0], .final, terminal: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted quiet", "result quiet final terminal"])
        XCTAssertEqual(broker.events(for: bob).map(\.summary),
                       ["accepted b", "result b placeholder", "result b final terminal"])
    }

    /// The worker dies after the placeholder: the retry is not asked for another (the client
    /// has it), and gets the rest.
    func testARetryIsNotAskedForASecondPlaceholder() {
        var broker = CoreHarness()
        broker.ready(w1)
        broker.ready(w2)
        submit(&broker, alice, "a")
        let first = broker.jobs(for: w1)
        XCTAssertEqual(first.map(\.placeholder), [true])
        placeholder(&broker, w1, first[0])
        broker.workerUnreachable(w1)
        let retry = broker.jobs(for: w2)
        XCTAssertEqual(retry.map(\.attempt), [2])
        XCTAssertEqual(retry.map(\.placeholder), [false])
        guard retry.count == 1 else { return }
        placeholder(&broker, w2, retry[0])  // sent anyway: dropped
        broker.result(w2, retry[0], .final, terminal: true)
        XCTAssertEqual(broker.events(for: alice).map(\.summary), ["accepted a", "result a placeholder", "result a final terminal"])
    }
}
