import TestSupport
import XCTest

@testable import EnlargerBroker

/// `ClientPipes` against a model of libzmq's pipe toward one client: a queue bounded by a
/// count of messages (the high-water mark) and an I/O thread that takes one message at a
/// time out of it to write, at whatever pace the client reads.
final class ClientPipesTests: XCTestCase {
    private enum Outcome: Equatable { case sent, full }

    private struct Pipe {
        let highWaterMark: Int
        var queued: [Int] = []
        /// The message the I/O thread is writing out.
        var writing: Int?

        var held: [Int] { queued + (writing.map { [$0] } ?? []) }

        mutating func offer(_ bytes: Int) -> Outcome {
            guard queued.count < highWaterMark else { return .full }
            queued.append(bytes)
            return .sent
        }

        /// The client reads one message.
        mutating func read() -> Int? {
            if writing == nil, !queued.isEmpty { writing = queued.removeFirst() }
            defer { writing = queued.isEmpty ? nil : queued.removeFirst() }
            return writing
        }
    }

    private let peer = PeerID([7])
    private let filler = 20

    func testLargeMessagesNeverHoldMoreThanTheBudgetOrOneMessage() {
        for seed in UInt64(1)...200 {
            var random = SeededGenerator(seed: seed)
            let highWaterMark = Int.random(in: 1...64, using: &random)
            let budget = Int.random(in: 1...8, using: &random) << 20
            var pipes = ClientPipes(highWaterMark: highWaterMark, budget: budget)
            var pipe = Pipe(highWaterMark: highWaterMark)
            var waiting: [Int] = []  // the outbox, in order
            var sent: [Int] = [], received: [Int] = []
            for _ in 0..<400 {
                if Bool.random(using: &random) || waiting.isEmpty {
                    waiting.append(Bool.random(using: &random)
                        ? Int.random(in: 1...pipes.smallBytes, using: &random)
                        : Int.random(in: pipes.smallBytes + 1...(3 * budget / 2), using: &random))
                }
                // The broker tries what waits, in order, until the pipe refuses.
                while let next = waiting.first {
                    let outcome = pipes.hand(next, to: peer, fillerBytes: filler, sent: .sent) { isFiller in
                        pipe.offer(isFiller ? filler : next)
                    }
                    guard outcome == .sent else { break }
                    sent.append(waiting.removeFirst())
                }
                let large = pipe.held.filter { $0 > pipes.smallBytes }
                XCTAssertTrue(large.count <= 1 || large.reduce(0, +) <= budget,
                              "seed \(seed): libzmq holds \(large) against a budget of \(budget)")
                // The client reads a few, sometimes none.
                for _ in 0..<Int.random(in: 0...3, using: &random) {
                    if let bytes = pipe.read(), bytes != filler { received.append(bytes) }
                }
            }
            // The client reads everything: what waited goes, in order, without any held back.
            while !waiting.isEmpty || !pipe.held.isEmpty {
                while let next = waiting.first,
                      pipes.hand(next, to: peer, fillerBytes: filler, sent: .sent, transmit: { isFiller in
                          pipe.offer(isFiller ? filler : next)
                      }) == .sent {
                    sent.append(waiting.removeFirst())
                }
                if let bytes = pipe.read(), bytes != filler { received.append(bytes) }
            }
            XCTAssertEqual(received, sent, "seed \(seed)")
        }
    }

    func testSmallMessagesAreBoundByTheCountAloneAndKeepNothing() {
        var pipes = ClientPipes(highWaterMark: 4, budget: 1 << 20)
        for _ in 0..<100 {
            XCTAssertTrue(pipes.admits(pipes.smallBytes, to: peer))
            pipes.handed(pipes.smallBytes, to: peer)
        }
        XCTAssertEqual(pipes.count, 0, "nothing is kept for a client of small messages")
    }

    func testALargeMessageWaitsUntilOlderOnesHaveLeftTheWindow() {
        var pipes = ClientPipes(highWaterMark: 3, budget: 1 << 20)  // a window of 4 messages
        let large = 700 << 10
        XCTAssertTrue(pipes.admits(large, to: peer))
        pipes.handed(large, to: peer)
        XCTAssertFalse(pipes.admits(large, to: peer), "two would pass the budget")
        XCTAssertTrue(pipes.admits(200 << 10, to: peer), "a smaller large one fits beside it")
        XCTAssertTrue(pipes.admits(1000, to: peer), "small ones always go")
        for _ in 0..<2 { pipes.handed(filler, to: peer) }
        XCTAssertFalse(pipes.admits(large, to: peer), "still among the last three")
        pipes.handed(filler, to: peer)
        XCTAssertTrue(pipes.admits(large, to: peer), "the new one pushes it out")
        pipes.handed(filler, to: peer)
        XCTAssertEqual(pipes.largeBytes(for: peer), 0)
        XCTAssertFalse(pipes.tracks(peer), "the window is dropped once no large message is in it")

        XCTAssertTrue(pipes.admits(3 << 20, to: peer), "a message over the budget goes alone")
        pipes.handed(3 << 20, to: peer)
        XCTAssertFalse(pipes.admits(pipes.smallBytes + 1, to: peer))
        XCTAssertTrue(pipes.tracks(peer))
        pipes.forget(peer)
        XCTAssertTrue(pipes.admits(3 << 20, to: peer), "a connection's end drops its pipe")
        XCTAssertEqual(pipes.count, 0)
    }

    func testAFillerThePipeRefusesIsTheOutcome() {
        var pipes = ClientPipes(highWaterMark: 2, budget: 1 << 20)
        var pipe = Pipe(highWaterMark: 2)
        let large = 900 << 10
        XCTAssertEqual(pipes.hand(large, to: peer, fillerBytes: filler, sent: .sent) { pipe.offer($0 ? filler : large) }, .sent)
        // The client reads nothing: one filler fits, the next is refused, the message waits.
        XCTAssertEqual(pipes.hand(large, to: peer, fillerBytes: filler, sent: .sent) { pipe.offer($0 ? filler : large) }, .full)
        XCTAssertEqual(pipe.queued, [large, filler])
        _ = pipe.read()
        _ = pipe.read()
        XCTAssertEqual(pipes.hand(large, to: peer, fillerBytes: filler, sent: .sent) { pipe.offer($0 ? filler : large) }, .sent)
        XCTAssertEqual(pipe.held.filter { $0 > pipes.smallBytes }, [large])
    }
}
