import EnlargerProtocol
import XCTest

@testable import EnlargerWorker

/// The queue of messages the broker connection could not take yet.
final class OutboxTests: XCTestCase {
    /// A socket that takes messages while `open`, recording them.
    private struct FakeSocket {
        var open = true
        var taken: [String] = []

        mutating func send(_ message: String) -> Bool {
            if open { taken.append(message) }
            return open
        }
    }

    func testSendsAtOnceWhileTheSocketTakesMessages() {
        var outbox = Outbox<String>(optionalLimit: 2)
        var socket = FakeSocket()
        outbox.send("a", .required) { socket.send($0) }
        outbox.send("b", .optional) { socket.send($0) }
        XCTAssertEqual(socket.taken, ["a", "b"])
        XCTAssertTrue(outbox.isEmpty)
    }

    func testRequiredMessagesWaitInOrderAndLaterOnesQueueBehindThem() {
        var outbox = Outbox<String>(optionalLimit: 10)
        var socket = FakeSocket(open: false)
        outbox.send("terminal 1", .required) { socket.send($0) }
        socket.open = true
        // The socket would take this one, but it must not overtake the first.
        outbox.send("started 2", .optional) { socket.send($0) }
        XCTAssertEqual(socket.taken, [])
        XCTAssertEqual(outbox.count, 2)
        outbox.flush { socket.send($0) }
        XCTAssertEqual(socket.taken, ["terminal 1", "started 2"])
        XCTAssertTrue(outbox.isEmpty)
    }

    func testFlushStopsWhereTheSocketRefusesAgain() {
        var outbox = Outbox<String>(optionalLimit: 10)
        var socket = FakeSocket(open: false)
        for name in ["a", "b", "c"] { outbox.send(name, .required) { socket.send($0) } }
        // Room for two messages, then full again.
        var accepted: [String] = []
        outbox.flush { message in
            guard accepted.count < 2 else { return false }
            accepted.append(message)
            return true
        }
        XCTAssertEqual(accepted, ["a", "b"])
        XCTAssertEqual(outbox.count, 1)
        outbox.flush { accepted.append($0); return true }
        XCTAssertEqual(accepted, ["a", "b", "c"])
        XCTAssertTrue(outbox.isEmpty)
    }

    func testHeartbeatsAreDroppedAndOptionalFramesAreBounded() {
        var outbox = Outbox<String>(optionalLimit: 2)
        var socket = FakeSocket(open: false)
        outbox.send("heartbeat", .droppable) { socket.send($0) }
        for index in 0..<5 { outbox.send("degraded \(index)", .optional) { socket.send($0) } }
        for index in 0..<50 { outbox.send("terminal \(index)", .required) { socket.send($0) } }
        XCTAssertEqual(outbox.count, 52, "every terminal frame and two optional ones")
        XCTAssertEqual(outbox.dropped, 4)
        socket.open = true
        outbox.flush { socket.send($0) }
        XCTAssertEqual(socket.taken.prefix(3), ["degraded 0", "degraded 1", "terminal 0"])
        XCTAssertEqual(socket.taken.filter { $0.hasPrefix("terminal") }.count, 50)
        // Once flushed, optional frames may queue again.
        socket.open = false
        outbox.send("degraded 9", .optional) { socket.send($0) }
        XCTAssertEqual(outbox.count, 1)
    }

    func testClearForgetsEverything() {
        var outbox = Outbox<String>(optionalLimit: 1)
        var socket = FakeSocket(open: false)
        outbox.send("a", .required) { socket.send($0) }
        outbox.send("b", .optional) { socket.send($0) }
        outbox.clear()
        XCTAssertTrue(outbox.isEmpty)
        outbox.send("c", .optional) { socket.send($0) }
        XCTAssertEqual(outbox.count, 1, "the optional allowance is back")
    }

    func testImportanceOfEachWorkerMessage() {
        var result = Enlarger_V1_JobResult()
        XCTAssertEqual(Outbox<Int>.Importance(of: WorkerToBrokerMessage<[UInt8]>.jobResult(result, image: [])), .optional)
        result.stage = .degraded
        XCTAssertEqual(Outbox<Int>.Importance(of: WorkerToBrokerMessage<[UInt8]>.jobResult(result, image: [])), .optional)
        result.stage = .final  // a variant's final, not the last: required all the same
        XCTAssertEqual(Outbox<Int>.Importance(of: WorkerToBrokerMessage<[UInt8]>.jobResult(result, image: [])), .required)
        result.terminal = true
        XCTAssertEqual(Outbox<Int>.Importance(of: WorkerToBrokerMessage<[UInt8]>.jobResult(result, image: [])), .required)
        let cases: [(WorkerToBrokerMessage<[UInt8]>, Outbox<Int>.Importance)] = [
            (.heartbeat, .droppable), (.jobStarted(.init()), .optional), (.jobFailed(.init()), .required),
            (.jobCancelled(.init()), .required), (.ready(.init()), .required), (.disconnect, .required),
        ]
        for (message, importance) in cases {
            XCTAssertEqual(Outbox<Int>.Importance(of: message), importance, "\(message)")
        }
    }
}
