import XCTest

@testable import EnlargerBroker
import Telemetry

/// The small containers behind the core: the job queue and the memory of ended ids.
final class BrokerBookkeepingTests: XCTestCase {
    func testJobQueueKeepsOrderThroughGrowthPrependsAndRemovals() {
        var queue = JobQueue(capacity: 4)
        for jobID in 1...40 { queue.append(UInt64(jobID)) }
        queue.prepend(0)
        XCTAssertTrue(queue.remove(20))
        XCTAssertFalse(queue.remove(20))
        XCTAssertFalse(queue.remove(99))
        for _ in 0..<5 { _ = queue.popFirst() }
        queue.prepend(100)
        var drained: [UInt64] = []
        while let jobID = queue.popFirst() { drained.append(jobID) }
        XCTAssertEqual(drained, [100] + (5...40).filter { $0 != 20 }.map(UInt64.init))
        XCTAssertTrue(queue.isEmpty)
        XCTAssertNil(queue.popFirst())
    }

    func testEndedRequestsForgetByAgeAndCountButKeepTheNewestOfAReusedID() {
        let start = MonotonicInstant(nanoseconds: 0)
        var ended = EndedRequests(limit: 3, lifetime: .seconds(10))
        ended.remember("a", at: start)
        ended.remember("b", at: start + .seconds(1))
        ended.remember("a", at: start + .seconds(2))
        ended.remember("c", at: start + .seconds(3))
        // The oldest entry ("a" at 0) was evicted, but "a" ended again at 2 s.
        XCTAssertTrue(ended.contains("a", at: start + .seconds(4)))
        XCTAssertTrue(ended.contains("b", at: start + .seconds(4)))
        XCTAssertEqual(ended.count, 3)

        ended.expire(at: start + .seconds(11.5))
        XCTAssertFalse(ended.contains("b", at: start + .seconds(11.5)))
        XCTAssertTrue(ended.contains("a", at: start + .seconds(11.5)))
        ended.expire(at: start + .seconds(14))
        XCTAssertEqual(ended.count, 0)
    }

    /// Each principal's memory is its own: one that ends requests by the thousand pushes out
    /// only its own ids, and another's late Cancel is still answered FINISHED.
    func testAPrincipalsChurnForgetsOnlyItsOwnEndedRequests() {
        let start = MonotonicInstant(nanoseconds: 0)
        let alice = Principal("curve:alice"), mallory = Principal("curve:mallory")
        var ended = EndedRequests(limit: 3, lifetime: .seconds(10))
        ended.remember(RequestKey(principal: alice, id: "a"), at: start)
        for n in 0..<1000 { ended.remember(RequestKey(principal: mallory, id: "m\(n)"), at: start + .milliseconds(n)) }
        XCTAssertTrue(ended.contains(RequestKey(principal: alice, id: "a"), at: start + .seconds(2)))
        XCTAssertFalse(ended.contains(RequestKey(principal: mallory, id: "m996"), at: start + .seconds(2)))
        XCTAssertTrue(ended.contains(RequestKey(principal: mallory, id: "m997"), at: start + .seconds(2)))
        XCTAssertFalse(ended.contains(RequestKey(principal: mallory, id: "a"), at: start + .seconds(2)))
        XCTAssertEqual(ended.count, 4)
        ended.expire(at: start + .seconds(10.5))
        XCTAssertEqual(ended.count, 3, "alice's went with its age")
        ended.expire(at: start + .seconds(12))
        XCTAssertEqual(ended.count, 0)
    }

    /// The per-request text line is written straight from the fields (`appendFields`); it
    /// must say what the dictionary path (`logFields`) says, field for field.
    func testTheRequestLinesFieldsMatchItsLogFields() {
        let ends = [
            RequestEnd(requestID: "photo 1\n", jobID: 17, principal: "local", outcome: .finished,
                       queueWait: .microseconds(1_250), duration: .milliseconds(4) + .microseconds(140), attempts: 2,
                       bytesIn: 85_267, bytesOut: 1_614),
            RequestEnd(requestID: "x", jobID: .max, principal: "Zx3q=", outcome: .failed(.deadlineExceeded),
                       queueWait: nil, duration: .seconds(30), attempts: 0, bytesIn: 0, bytesOut: 0),
        ]
        for end in ends {
            var direct = TextLogLine()
            end.appendFields(to: &direct)
            var general = TextLogLine()
            for (key, value) in end.logFields { general.append(key: key, value) }
            XCTAssertEqual(String(decoding: direct.bytes, as: UTF8.self), String(decoding: general.bytes, as: UTF8.self))
        }
    }

    func testPeerIDsPrintAsHex() {
        XCTAssertEqual(PeerID([0x00, 0x8B, 0x45, 0x67, 0xFF]).description, "008b4567ff")
    }
}

/// Tests name requests by id alone; they belong to the ipc principal.
extension RequestKey: ExpressibleByStringLiteral {
    public init(stringLiteral id: String) {
        self.init(principal: .local, id: id)
    }
}
