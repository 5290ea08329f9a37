import EnlargerProtocol
import TestSupport
import XCTest

@testable import EnlargerBroker

/// `ClientOutbox` on its own: a fake socket plays the pipes (room, full, not connected) and
/// records what it was given, for which routing id and as whose.
final class ClientOutboxTests: XCTestCase {
    typealias Outbox = ClientOutbox<Bytes>

    /// A fake client socket: per routing id, the principal whose connection holds it (nil:
    /// not connected) and the room left in its pipe.
    struct FakeSocket {
        var connected: [PeerID: Principal] = [:]
        var room: [PeerID: Int] = [:]
        /// What each principal's connection received, in order.
        var received: [Principal: [ClientEvent]] = [:]
        /// The same, per routing id (order is promised per id and principal).
        var receivedOn: [PeerID: [(Principal, ClientEvent)]] = [:]

        mutating func transmit(_ message: OutgoingMessage<Bytes>, to peer: PeerID) -> Outbox.SendOutcome {
            guard let holder = connected[peer] else { return .unreachable }
            guard room[peer, default: .max] > 0 else { return .full }
            room[peer] = room[peer, default: .max] - 1
            let event = try! ClientEvent(frames: message.frames)
            received[holder, default: []].append(event)
            receivedOn[peer, default: []].append((holder, event))
            return .sent
        }
    }

    let alice = Principal("alice"), mallory = Principal("mallory")
    let peer = PeerID([1, 2, 3])
    var now = MonotonicInstant(nanoseconds: 1_000_000_000)

    func limits(maxBytes: Int = 10_000, holdBack: Int = 1_000, notices: Int = 4_000) -> Outbox.Limits {
        Outbox.Limits(maxBytes: maxBytes, patience: .seconds(30), holdBackBytes: holdBack, maxNoticeBytes: notices)
    }

    func result(_ id: String, bytes: Int, terminal: Bool = true) -> (OutgoingMessage<Bytes>, ClientShedding) {
        var result = Enlarger_V1_Result()
        result.requestID = id
        result.terminal = terminal
        result.stage = terminal ? .final : .degraded
        let message = ClientEvent.result(result, image: Bytes(repeating: 7, count: bytes))
        return (message.encoded(), BrokerCore<Bytes>.shedding(of: message))
    }

    func accepted(_ id: String) -> (OutgoingMessage<Bytes>, ClientShedding) {
        var accepted = Enlarger_V1_Accepted()
        accepted.requestID = id
        let message = ClientEvent.accepted(accepted)
        return (message.encoded(), BrokerCore<Bytes>.shedding(of: message))
    }

    @discardableResult
    func send(_ item: (OutgoingMessage<Bytes>, ClientShedding), for principal: Principal? = nil,
              _ outbox: inout Outbox, _ socket: inout FakeSocket) -> [Outbox.Effect] {
        let peer = peer
        return outbox.send(item.0, to: peer, for: principal ?? alice, shed: item.1, now: now) { message in
            socket.transmit(message, to: peer)
        }
    }

    @discardableResult
    func flush(_ outbox: inout Outbox, _ socket: inout FakeSocket) -> [Outbox.Effect] {
        let peer = peer
        return outbox.flush(peer, now: now) { message in socket.transmit(message, to: peer) }
    }

    func ids(_ events: [ClientEvent]?) -> [String] {
        (events ?? []).map { event in
            switch event {
            case .result(let result, _): "result \(result.requestID)"
            case .accepted(let accepted): "accepted \(accepted.requestID)"
            case .failed(let failed): "failed \(failed.requestID) \(failed.code.contractName)"
            default: "\(event)"
            }
        }
    }

    func testAConnectedReaderGetsMessagesAtOnceAndNothingIsKept() {
        var outbox = Outbox(limits: limits())
        var socket = FakeSocket(connected: [peer: alice])
        _ = outbox.heard(from: peer, as: alice, on: 9)
        XCTAssertEqual(send(accepted("a"), &outbox, &socket), [])
        XCTAssertEqual(send(result("a", bytes: 100), &outbox, &socket), [])
        XCTAssertEqual(ids(socket.received[alice]), ["accepted a", "result a"])
        XCTAssertEqual(outbox.bytesWaiting(for: peer), 0)
        XCTAssertFalse(outbox.awaitsRoom)
    }

    func testAFullPipeKeepsOrderAndTheCoreHearsOnlyPastTheHoldBackMark() {
        var outbox = Outbox(limits: limits(holdBack: 1_000))
        var socket = FakeSocket(connected: [peer: alice], room: [peer: 1])
        _ = outbox.heard(from: peer, as: alice, on: 9)
        XCTAssertEqual(send(result("1", bytes: 400), &outbox, &socket), [])
        // The pipe is full: the next ones wait, and the core hears nothing while little waits.
        XCTAssertEqual(send(result("2", bytes: 400), &outbox, &socket), [])
        XCTAssertTrue(outbox.awaitsRoom)
        let effects = send(result("3", bytes: 800), &outbox, &socket)
        XCTAssertEqual(effects, [.waiting(peer, bytes: outbox.bytesWaiting(for: peer))])
        XCTAssertGreaterThan(outbox.bytesWaiting(for: peer), 1_000)
        // A later message joins the queue even when the pipe has room again: order is kept.
        // The core hears of the bytes again only once they have moved by the mark.
        socket.room[peer] = 1
        XCTAssertEqual(send(accepted("4"), &outbox, &socket), [])
        XCTAssertEqual(send(result("5", bytes: 1_200), &outbox, &socket), [.waiting(peer, bytes: outbox.bytesWaiting(for: peer))])
        XCTAssertEqual(ids(socket.received[alice]), ["result 1"])
        socket.room[peer] = 10
        now = now + .milliseconds(2)
        XCTAssertEqual(flush(&outbox, &socket), [.waiting(peer, bytes: 0)])
        XCTAssertEqual(ids(socket.received[alice]), ["result 1", "result 2", "result 3", "accepted 4", "result 5"])
        XCTAssertEqual(outbox.bytesWaiting(for: peer), 0)
    }

    func testATakeoverByAnotherPrincipalGetsNothingOfWhatWaited() {
        var outbox = Outbox(limits: limits())
        var socket = FakeSocket(connected: [peer: alice], room: [peer: 0])
        _ = outbox.heard(from: peer, as: alice, on: 9)
        send(result("secret", bytes: 2_000), &outbox, &socket)
        XCTAssertEqual(outbox.messagesWaiting(for: peer), 1)
        // Alice's connection ends (the ids that were on it are named, for their pipes' windows
        // to go); Mallory connects under the same routing id and speaks.
        XCTAssertEqual(outbox.connectionEnded(9), [peer])
        XCTAssertEqual(outbox.connectionEnded(9), [], "told once")
        socket.connected[peer] = mallory
        socket.room[peer] = 10
        XCTAssertEqual(flush(&outbox, &socket), [], "an id whose connection ended is not tried before it speaks")
        let effects = outbox.heard(from: peer, as: mallory, on: 10)
        XCTAssertEqual(effects, [.waiting(peer, bytes: 0)])
        XCTAssertEqual(outbox.messagesWaiting(for: peer), 0)
        flush(&outbox, &socket)
        XCTAssertNil(socket.received[mallory])
        // A message still meant for Alice is not given to Mallory's connection either.
        send(result("later", bytes: 10), for: alice, &outbox, &socket)
        XCTAssertNil(socket.received[mallory])
        XCTAssertEqual(outbox.messagesWaiting(for: peer), 1)
    }

    /// An id libzmq made up names one connection: when it ends, what waited is dropped at
    /// once, what comes for the id afterwards is discarded, and the core hears of it once (an
    /// id the client chose waits for it instead, as above).
    func testAnIDLibzmqMadeUpIsForgottenWithItsConnection() {
        var outbox = Outbox(limits: limits())
        let generated = PeerID([0, 0x6b, 0x8b, 0x45, 0x67])
        XCTAssertTrue(generated.isGenerated)
        XCTAssertFalse(peer.isGenerated)
        var socket = FakeSocket(connected: [generated: alice], room: [generated: 0])
        func send(_ item: (OutgoingMessage<Bytes>, ClientShedding)) -> [Outbox.Effect] {
            outbox.send(item.0, to: generated, for: alice, shed: item.1, now: now) { message in
                socket.transmit(message, to: generated)
            }
        }
        _ = outbox.heard(from: generated, as: alice, on: 9)
        _ = send(result("1", bytes: 10))
        XCTAssertGreaterThan(outbox.bytesWaiting(for: generated), 0, "its pipe is full: the result waits")
        outbox.connectionEnded(9)
        socket.connected[generated] = nil
        XCTAssertEqual(outbox.bytesWaiting(for: generated), 0, "what waited is dropped with the connection")
        XCTAssertEqual(send(result("2", bytes: 10)), [])
        XCTAssertEqual(outbox.bytesWaiting(for: generated), 0, "what comes for it afterwards is discarded")
        XCTAssertEqual(outbox.takeDeparted(), [.departed(generated)])
        XCTAssertEqual(outbox.takeDeparted(), [], "told once")
        outbox.finishDiscarding(generated)
        outbox.forgetIfIdle(generated)
        XCTAssertTrue(outbox.isEmpty, "nothing is kept for it")
        XCTAssertNil(socket.received[alice], "nothing was sent")
    }

    func testTheSamePrincipalBackOnANewConnectionGetsWhatWaited() {
        var outbox = Outbox(limits: limits())
        var socket = FakeSocket(connected: [peer: alice], room: [peer: 0])
        _ = outbox.heard(from: peer, as: alice, on: 9)
        send(result("1", bytes: 10), &outbox, &socket)
        outbox.connectionEnded(9)
        socket.connected[peer] = nil
        send(result("2", bytes: 10), &outbox, &socket)
        socket.connected[peer] = alice
        socket.room[peer] = 10
        XCTAssertEqual(outbox.heard(from: peer, as: alice, on: 11), [])
        flush(&outbox, &socket)
        XCTAssertEqual(ids(socket.received[alice]), ["result 1", "result 2"])
    }

    func testAClientOverTheCapIsShedToOneNoticePerRequest() {
        var outbox = Outbox(limits: limits(maxBytes: 10_000, holdBack: 1_000))
        var socket = FakeSocket(connected: [peer: alice], room: [peer: 0])
        _ = outbox.heard(from: peer, as: alice, on: 9)
        send(accepted("a"), &outbox, &socket)
        send(result("a", bytes: 3_000, terminal: false), &outbox, &socket)
        send(result("a", bytes: 4_000), &outbox, &socket)
        send(accepted("b"), &outbox, &socket)
        let effects = send(result("b", bytes: 4_000), &outbox, &socket)
        XCTAssertEqual(effects.first, .notReading(peer))
        XCTAssertLessThan(outbox.bytesWaiting(for: peer), 1_000, "only notices are left")
        // The core's own notices for the client's other requests join them and wait too.
        var failed = Enlarger_V1_Failed()
        failed.requestID = "c"
        failed.code = .clientNotReading
        send((ClientEvent.failed(failed).encoded(), .keep), &outbox, &socket)
        socket.room[peer] = 100
        flush(&outbox, &socket)
        XCTAssertEqual(ids(socket.received[alice]), [
            "accepted a", "failed a CLIENT_NOT_READING", "accepted b", "failed b CLIENT_NOT_READING",
            "failed c CLIENT_NOT_READING",
        ])
    }

    func testAClientThatTakesNothingForItsPatienceIsShedThenLost() {
        var outbox = Outbox(limits: limits(maxBytes: 1 << 30, holdBack: 1_000))
        var socket = FakeSocket(connected: [peer: alice], room: [peer: 0])
        _ = outbox.heard(from: peer, as: alice, on: 9)
        send(result("a", bytes: 50), &outbox, &socket)
        XCTAssertEqual(outbox.nextDue.map { $0 <= now + .milliseconds(1) }, true)
        now = now + .seconds(31)
        let shed = outbox.due(now: now, roomMade: false) { peer, message in socket.transmit(message, to: peer) }
        XCTAssertEqual(shed.first, .notReading(peer))
        XCTAssertEqual(outbox.messagesWaiting(for: peer), 1)
        // Another patience without a read: the notices go too, and what the core sends
        // about the client meanwhile is dropped rather than starting a new box.
        now = now + .seconds(31)
        let lost = outbox.due(now: now, roomMade: false) { peer, message in socket.transmit(message, to: peer) }
        XCTAssertEqual(lost, [.lost(peer)])
        socket.room[peer] = 10
        send(accepted("z"), &outbox, &socket)
        XCTAssertNil(socket.received[alice])
        outbox.finishDiscarding(peer)
        send(accepted("z"), &outbox, &socket)
        XCTAssertEqual(ids(socket.received[alice]), ["accepted z"])
    }

    func testNoticesAreBoundedToo() {
        var outbox = Outbox(limits: limits(maxBytes: 5_000, holdBack: 1_000, notices: 2_000))
        var socket = FakeSocket(connected: [peer: alice], room: [peer: 0])
        _ = outbox.heard(from: peer, as: alice, on: 9)
        var effects: [Outbox.Effect] = []
        for index in 0..<200 where !effects.contains(.lost(peer)) {
            effects += send(accepted("r\(index)"), &outbox, &socket)
            effects += send(result("r\(index)", bytes: 3_000), &outbox, &socket)
        }
        XCTAssertTrue(effects.contains(.notReading(peer)))
        XCTAssertTrue(effects.contains(.lost(peer)))
        XCTAssertEqual(outbox.bytesWaiting(for: peer), 0)
    }

    func testAMessageNoPrincipalIsKnownForIsDropped() {
        var outbox = Outbox(limits: limits())
        var socket = FakeSocket(connected: [peer: alice])
        let peer = peer
        let effects = outbox.send(accepted("x").0, to: peer, for: nil, shed: .keep, now: now) { message in
            socket.transmit(message, to: peer)
        }
        XCTAssertEqual(effects, [])
        XCTAssertNil(socket.received[alice])
        XCTAssertTrue(outbox.isEmpty)
    }

    /// Random interleavings of sends, reads, connection ends and takeovers by several
    /// principals under a few routing ids: nothing for one principal ever reaches another's
    /// connection, each principal's messages arrive in the order sent with none twice, and
    /// the bytes counted waiting are those of the messages held.
    func testRandomInterleavingsNeverCrossPrincipals() {
        let principals = [Principal("p0"), Principal("p1"), Principal("p2")]
        let peers = [PeerID([1]), PeerID([2])]
        var totalSent = 0, totalDelivered = 0
        for seed in UInt64(1)...300 {
            var random = SeededGenerator(seed: seed)
            var outbox = Outbox(limits: limits(maxBytes: 6_000, holdBack: 500, notices: 3_000))
            var socket = FakeSocket()
            var descriptor: Int32 = 100
            var connectionOf: [PeerID: Int32] = [:]
            var sent = 0
            var clock = now
            for _ in 0..<200 {
                let peer = peers[Int(random.next() % 2)]
                switch random.next() % 7 {
                case 0:  // a connection (re)appears under the id and speaks
                    if let old = connectionOf[peer] { outbox.connectionEnded(old) }
                    descriptor += 1
                    let principal = principals[Int(random.next() % 3)]
                    socket.connected[peer] = principal
                    connectionOf[peer] = descriptor
                    _ = outbox.heard(from: peer, as: principal, on: descriptor)
                case 1:  // the connection ends
                    if let old = connectionOf.removeValue(forKey: peer) { outbox.connectionEnded(old) }
                    socket.connected[peer] = nil
                case 2:  // the client reads some
                    socket.room[peer] = Int(random.next() % 4)
                    _ = outbox.flush(peer, now: clock) { message in socket.transmit(message, to: peer) }
                case 3:  // time passes
                    clock = clock + .seconds(Int64(random.next() % 20))
                    _ = outbox.due(now: clock, roomMade: random.next() % 2 == 0) { peer, message in
                        socket.transmit(message, to: peer)
                    }
                default:  // a message for one principal under the id
                    let principal = principals[Int(random.next() % 3)]
                    sent += 1
                    var failed = Enlarger_V1_Failed()
                    // The principal and a sequence number ride in the id, to check on arrival.
                    failed.requestID = "\(principal.name)#\(sent)"
                    failed.message = String(repeating: "x", count: Int(random.next() % 900))
                    _ = outbox.send(ClientEvent.failed(failed).encoded(), to: peer, for: principal, shed: .keep,
                                    now: clock) { message in socket.transmit(message, to: peer) }
                }
            }
            var delivered = 0
            for events in socket.receivedOn.values {
                var last: [Principal: Int] = [:]
                for (principal, event) in events {
                    guard case .failed(let failed) = event else { return XCTFail("seed \(seed): \(event)") }
                    let parts = failed.requestID.split(separator: "#")
                    XCTAssertEqual(String(parts[0]), principal.name, "seed \(seed): another principal's message")
                    let sequence = Int(parts[1])!
                    XCTAssertGreaterThan(sequence, last[principal, default: 0], "seed \(seed): out of order or twice")
                    last[principal] = sequence
                    delivered += 1
                }
            }
            totalDelivered += delivered
            totalSent += sent
        }
        // The check above is not vacuous: most messages do get through.
        XCTAssertGreaterThan(totalDelivered, totalSent / 20, "\(totalDelivered) of \(totalSent) delivered")
    }
}
