import XCTest

@testable import EnlargerBroker

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
