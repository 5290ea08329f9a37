import Foundation
import XCTest

@testable import ZeroMQ
import TestSupport

final class SocketTests: XCTestCase {
    private func routerAndDealer(_ endpoints: TemporaryEndpoints) throws -> (Context, Socket, Socket) {
        let context = try Context()
        let router = try Socket(context, .router)
        try router.set(.routerMandatory(true))
        let endpoint = endpoints.ipc("router")
        try router.bind(endpoint)
        let dealer = try Socket(context, .dealer)
        try dealer.connect(endpoint)
        return (context, router, dealer)
    }

    func testMultipartRoundTripOverIPC() throws {
        let (_, router, dealer) = try routerAndDealer(TemporaryEndpoints(self))

        try dealer.send(multipart: [Message("TAG"), Message([1, 2, 3]), Message([])])
        let received = try router.receiveMultipart()
        XCTAssertEqual(received.count, 4, "routing id plus three frames")
        XCTAssertEqual(received[1].bytes, Array("TAG".utf8))
        XCTAssertEqual(received[2].bytes, [1, 2, 3])
        XCTAssertEqual(received[3].count, 0)
        XCTAssertFalse(received[3].hasMore)

        let peer = received[0].bytes
        try router.send(peer, .more)
        try router.send(Array("reply".utf8))
        let reply = try dealer.receiveMultipart()
        XCTAssertEqual(reply.map(\.bytes), [Array("reply".utf8)])
    }

    func testSendingAMessageDoesNotConsumeIt() throws {
        let (_, router, dealer) = try routerAndDealer(TemporaryEndpoints(self))
        let payload = Message([UInt8](repeating: 7, count: 100_000))

        try dealer.send(payload)
        try dealer.send(payload)
        XCTAssertEqual(payload.count, 100_000, "the caller's message is intact after two sends")
        for _ in 0..<2 {
            let frames = try router.receiveMultipart()
            XCTAssertEqual(frames.count, 2)
            XCTAssertEqual(frames[1].count, 100_000)
            XCTAssertEqual(frames[1].withUnsafeBytes { $0.allSatisfy { $0 == 7 } }, true)
        }
    }

    /// A frame made with `Message.sharing(_:)` sends the array's own bytes: they outlive the
    /// array the caller had, are not changed by the caller's later writes, and the frame can
    /// be sent more than once (libzmq keeps the buffer until the last copy is sent).
    func testASharedFrameSendsTheArrayItKeeps() throws {
        let (_, router, dealer) = try routerAndDealer(TemporaryEndpoints(self))
        let pattern = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        func frame() -> Message {
            var bytes = pattern
            let message = Message.sharing(bytes)
            bytes[0] ^= 0xFF  // the caller's copy, not the frame's
            bytes.removeAll()
            return message
        }
        let payload = frame()
        XCTAssertEqual(payload.count, pattern.count)
        try dealer.send(payload)
        try dealer.send(payload)
        for _ in 0..<2 {
            let frames = try router.receiveMultipart()
            XCTAssertEqual(frames.count, 2)
            XCTAssertEqual(frames[1].bytes, pattern)
        }
        // Below the threshold it is a copy, the same on the wire.
        for small in [[], [1, 2, 3], Array(pattern.prefix(Message.sharingThreshold - 1))] {
            try dealer.send(Message.sharing(small))
            XCTAssertEqual(try router.receiveMultipart()[1].bytes, small)
        }
    }

    func testRouterMandatorySendToUnknownPeerFailsWithHostUnreachable() throws {
        let (_, router, _) = try routerAndDealer(TemporaryEndpoints(self))

        XCTAssertThrowsError(try router.send([0, 1, 2, 3, 4], .more)) { error in
            let error = error as? ZMQError
            XCTAssertEqual(error?.code, EHOSTUNREACH)
            XCTAssertEqual(error?.isHostUnreachable, true)
            XCTAssertFalse(error?.message.isEmpty ?? true)
        }
    }

    func testNonBlockingReceiveWithNothingQueuedReturnsNil() throws {
        let (_, router, _) = try routerAndDealer(TemporaryEndpoints(self))
        XCTAssertNil(try router.receive(wait: false))
        var frames: [Message] = []
        XCTAssertFalse(try router.receive(multipart: &frames, wait: false))
    }

    func testErrorsKeepErrnoAndText() throws {
        let socket = try Socket(Context(), .dealer)
        XCTAssertThrowsError(try socket.bind("nonsense://nowhere")) { error in
            let error = error as? ZMQError
            XCTAssertEqual(error?.code, EPROTONOSUPPORT)
            XCTAssertEqual(error?.operation, "zmq_bind(nonsense://nowhere)")
            XCTAssertEqual(error?.message, String(cString: strerror(EPROTONOSUPPORT)))
        }
    }

    func testOversizeFrameIsDroppedAndOthersStillServed() throws {
        let endpoints = try TemporaryEndpoints(self)
        let context = try Context()
        let router = try Socket(context, .router)
        try router.set(.maxMessageSize(1000))
        try router.bind(endpoints.ipc("limited"))
        let greedy = try Socket(context, .dealer)
        try greedy.connect(endpoints.ipc("limited"))
        let polite = try Socket(context, .dealer)
        try polite.connect(endpoints.ipc("limited"))

        try greedy.send([UInt8](repeating: 1, count: 5000))
        try polite.send([UInt8](repeating: 2, count: 10))

        var poller = Poller()
        poller.register(router)
        XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 1)
        let frames = try router.receiveMultipart()
        XCTAssertEqual(frames.last?.bytes, [UInt8](repeating: 2, count: 10))
        XCTAssertEqual(try poller.poll(timeout: .milliseconds(100)), 0, "the oversize frame never arrives")
    }

    func testRouterSeesTheRoutingIDThePeerChose() throws {
        let endpoints = try TemporaryEndpoints(self)
        let context = try Context()
        let router = try Socket(context, .router)
        try router.set(.routerMandatory(true))
        try router.set(.receiveHighWaterMark(10))
        try router.bind(endpoints.ipc("named"))
        let dealer = try Socket(context, .dealer)
        try dealer.set(.routingID(Array("worker-7".utf8)))
        try dealer.set(.immediate(true))
        try dealer.set(.sendHighWaterMark(10))
        try dealer.connect(endpoints.ipc("named"))

        try dealer.send(Array("hello".utf8))
        let frames = try router.receiveMultipart()
        XCTAssertEqual(frames.first?.bytes, Array("worker-7".utf8))
        try router.send(Array("worker-7".utf8), .more)
        try router.send(Array("back".utf8))
        XCTAssertEqual(try dealer.receive()?.bytes, Array("back".utf8))
    }

    func testLastEndpointResolvesTCPWildcard() throws {
        let socket = try Socket(Context(), .router)
        try socket.bind("tcp://127.0.0.1:*")
        let endpoint = try socket.lastEndpoint()
        XCTAssertTrue(endpoint.hasPrefix("tcp://127.0.0.1:"), endpoint)
        XCTAssertNotEqual(endpoint, "tcp://127.0.0.1:*")
    }

    func testClosingWithUnsentMessagesDoesNotHang() throws {
        let endpoints = try TemporaryEndpoints(self)
        let started = ContinuousClock.now
        do {
            let context = try Context()
            let dealer = try Socket(context, .dealer)
            // Nobody is bound there, so the messages stay queued in the socket.
            try dealer.connect(endpoints.ipc("nobody"))
            for _ in 0..<10 { try dealer.send([UInt8](repeating: 0, count: 1000)) }
            dealer.close()
        }  // the context is terminated here
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(1))
    }
}

final class MessageAllocationTests: XCTestCase {
    func testAFrameThatCannotBeAllocatedIsAnErrorNotACrash() throws {
        XCTAssertThrowsError(try Message(allocating: 1 << 60)) { error in
            XCTAssertEqual((error as? ZMQError)?.code, ENOMEM, "\(error)")
        }
        let bytes: [UInt8] = [1, 2, 3]
        let copy = try bytes.withUnsafeBytes { buffer throws(ZMQError) in try Message.copy(of: buffer) }
        XCTAssertEqual(copy.bytes, bytes)
    }
}
