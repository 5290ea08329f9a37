import Foundation
import Glibc
import Synchronization
import XCTest

@testable import ZeroMQ
import TestSupport

final class PollerTests: XCTestCase {
    func testPollTimesOutWhenNothingIsReady() throws {
        let endpoints = try TemporaryEndpoints(self)
        let router = try Socket(Context(), .router)
        try router.bind(endpoints.ipc("quiet"))
        var poller = Poller()
        poller.register(router)

        let started = ContinuousClock.now
        XCTAssertEqual(try poller.poll(timeout: .milliseconds(50)), 0)
        let elapsed = ContinuousClock.now - started
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(45))
        XCTAssertLessThan(elapsed, .seconds(2))
        XCTAssertEqual(poller.events(at: 0), [])
    }

    func testReportsWhichSocketIsReadable() throws {
        let endpoints = try TemporaryEndpoints(self)
        let (first, second) = try connectedPair(Context(), at: endpoints.ipc("pair"))
        let wakeup = try Wakeup()
        var poller = Poller()
        let firstIndex = poller.register(first)
        let wakeupIndex = poller.register(fileDescriptor: wakeup.fileDescriptor)

        try second.send([42])
        XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 1)
        XCTAssertEqual(poller.events(at: firstIndex), .readable)
        XCTAssertEqual(poller.events(at: wakeupIndex), [])
        XCTAssertEqual(try first.receive()?.bytes, [42])
    }

    func testWakeupFromAnotherThreadInterruptsAnIndefinitePoll() throws {
        let endpoints = try TemporaryEndpoints(self)
        let router = try Socket(Context(), .router)
        try router.bind(endpoints.ipc("idle"))
        let wakeup = try Wakeup()
        var poller = Poller()
        poller.register(router)
        let wakeupIndex = poller.register(fileDescriptor: wakeup.fileDescriptor)

        let signaller = Thread {
            Thread.sleep(forTimeInterval: 0.05)
            wakeup.signal()
            wakeup.signal()
        }
        signaller.start()
        XCTAssertEqual(try poller.poll(timeout: nil), 1)
        XCTAssertEqual(poller.events(at: wakeupIndex), .readable)

        wakeup.drain()
        XCTAssertEqual(try poller.poll(timeout: .zero), 0, "signals coalesce and drain clears them")
    }

    func testMailboxDeliversEveryPostFromManyThreads() throws {
        let mailbox = try Mailbox<Int>()
        var poller = Poller()
        poller.register(fileDescriptor: mailbox.fileDescriptor)
        let threads = 4
        let postsPerThread = 1000
        for thread in 0..<threads {
            Thread {
                for index in 0..<postsPerThread { mailbox.post(thread * postsPerThread + index) }
            }.start()
        }

        var received: [Int] = []
        while received.count < threads * postsPerThread {
            XCTAssertGreaterThan(try poller.poll(timeout: .seconds(5)), 0, "a post always wakes the poller")
            received += mailbox.takeAll()
        }
        XCTAssertEqual(Set(received), Set(0..<threads * postsPerThread))
        XCTAssertEqual(received.count, threads * postsPerThread)
    }

    /// A file registered beside sockets is reported when a socket is ready too: asking a
    /// socket quiets its signal descriptor, and the broker registers that descriptor as a
    /// file of its own to hear of a full pipe's room.
    func testFilesAreReportedWhenASocketIsReadyToo() throws {
        let endpoints = try TemporaryEndpoints(self)
        let (first, second) = try connectedPair(Context(), at: endpoints.ipc("pair"))
        let wakeup = try Wakeup()
        var poller = Poller()
        let socketIndex = poller.register(first)
        let wakeupIndex = poller.register(fileDescriptor: wakeup.fileDescriptor)
        let signalIndex = poller.register(fileDescriptor: try first.signalDescriptor())

        // Connected, and drained: the next message is announced on `first`'s descriptor.
        // That descriptor may be reported beside the socket, or not yet: it is the moment
        // libzmq's I/O thread signals, which a slow run (ThreadSanitizer) shifts.
        try second.send([0])
        var polls = 0
        repeat {
            XCTAssertGreaterThan(try poller.poll(timeout: .seconds(5)), 0)
            polls += 1
        } while poller.events(at: socketIndex) != .readable && polls < 10
        XCTAssertEqual(poller.events(at: socketIndex), .readable)
        XCTAssertEqual(poller.events(at: wakeupIndex), [], "nothing signalled the wakeup yet")
        XCTAssertEqual(try first.receive()?.bytes, [0])
        XCTAssertNil(try first.receive(wait: false))

        wakeup.signal()
        try second.send([1])
        // The message's arrival signals `first`'s descriptor; wait until it has.
        var signalled = pollfd(fd: try first.signalDescriptor(), events: Int16(POLLIN), revents: 0)
        XCTAssertEqual(Glibc.poll(&signalled, 1, 5_000), 1)
        XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 3)
        XCTAssertEqual(poller.events(at: socketIndex), .readable)
        XCTAssertEqual(poller.events(at: wakeupIndex), .readable)
        XCTAssertEqual(poller.events(at: signalIndex), .readable, "the signal was seen before the socket was asked")
        XCTAssertEqual(try poller.poll(timeout: .zero), 2, "the message and the wakeup are still there")
        XCTAssertEqual(poller.events(at: signalIndex), [], "asking quieted the signal")
    }

    /// A message that arrives while the poller sleeps wakes it, however long the timeout.
    func testAMessageArrivingDuringTheWaitWakesIt() throws {
        let endpoints = try TemporaryEndpoints(self)
        let context = try Context()
        let router = try Socket(context, .router)
        let dealer = try Socket(context, .dealer)
        try router.bind(endpoints.ipc("wait"))
        try dealer.connect(endpoints.ipc("wait"))
        var poller = Poller()
        let routerIndex = poller.register(router)
        // The sending thread is the socket's only user from here on.
        nonisolated(unsafe) let sending = dealer
        let sender = Thread {
            Thread.sleep(forTimeInterval: 0.05)
            _ = try? sending.send([7])
        }
        sender.start()
        let started = ContinuousClock.now
        XCTAssertEqual(try poller.poll(timeout: .seconds(30)), 1)
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(10))
        XCTAssertEqual(poller.events(at: routerIndex), .readable)
    }

    /// A socket registered quiet-until-signalled is asked only when its descriptor fires,
    /// yet is seen while another socket is ready on every poll.
    func testAQuietSocketIsSeenWhileAnotherStaysBusy() throws {
        let endpoints = try TemporaryEndpoints(self)
        let context = try Context()
        let (busy, busyPeer) = try connectedPair(context, at: endpoints.ipc("busy"))
        let (quiet, quietPeer) = try connectedPair(context, at: endpoints.ipc("quiet"))
        var poller = Poller()
        let busyIndex = poller.register(busy)
        let quietIndex = poller.register(quietUntilSignalled: quiet)

        // A backlog on `busy` that is never drained: every poll finds it ready.
        for value in 0..<8 { try busyPeer.send([UInt8(value)]) }
        XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 1)
        XCTAssertEqual(poller.events(at: quietIndex), [])
        try quietPeer.send([9])
        let deadline = ContinuousClock.now + .seconds(5)
        var seen = false
        while !seen && ContinuousClock.now < deadline {
            XCTAssertGreaterThan(try poller.poll(timeout: .seconds(5)), 0)
            XCTAssertEqual(poller.events(at: busyIndex), .readable)
            seen = poller.events(at: quietIndex) == .readable
        }
        XCTAssert(seen, "the quiet socket's message was never reported")
        XCTAssertEqual(try quiet.receive(wait: false)?.bytes, [9])
        XCTAssertNil(try quiet.receive(wait: false), "drained: its descriptor announces the next one")
        // Quiet again, then signalled while the poller sleeps. The eight are read waiting:
        // they may not all have arrived yet.
        for _ in 0..<8 { XCTAssertNotNil(try busy.receive()) }
        nonisolated(unsafe) let sending = quietPeer
        let sender = Thread {
            Thread.sleep(forTimeInterval: 0.05)
            _ = try? sending.send([10])
        }
        sender.start()
        XCTAssertEqual(try poller.poll(timeout: .seconds(30)), 1)
        XCTAssertEqual(poller.events(at: quietIndex), .readable)
    }

    /// Randomised, repeatable: messages from several peers in bursts and pauses, a receiver
    /// that polls, drains what the poll reports and sometimes stops a drain early or sends
    /// back (which may process the socket's commands). No message is ever stranded: each
    /// is received, and no poll sleeps through one that was there.
    func testNoMessageIsStrandedUnderRandomBurstsAndReplies() throws {
        let endpoints = try TemporaryEndpoints(self)
        let context = try Context()
        let router = try Socket(context, .router)
        try router.bind(endpoints.ipc("bursts"))
        let peers = 3
        let messagesPerPeer = 400
        var generator = SeededGenerator(seed: 0x5eed_2026)
        let plans = (0..<peers).map { _ in (0..<messagesPerPeer).map { _ in Int(generator.next() % 5) } }
        // The senders keep their sockets (and what is queued in them) until the test is done.
        let done = DispatchSemaphore(value: 0)
        let closed = DispatchSemaphore(value: 0)
        defer {
            for _ in 0..<peers { done.signal() }
            for _ in 0..<peers { closed.wait() }
        }
        let senders = try (0..<peers).map { peer -> Thread in
            nonisolated(unsafe) let dealer = try Socket(context, .dealer)
            try dealer.connect(endpoints.ipc("bursts"))
            let plan = plans[peer]
            return Thread {
                for (index, pause) in plan.enumerated() {
                    // Pauses of 1 to 3 ms before some messages, bursts between the others.
                    if pause > 1 { Thread.sleep(forTimeInterval: Double(pause - 1) / 1000) }
                    _ = try? dealer.send([UInt8(peer), UInt8(index & 0xff), UInt8(index >> 8)])
                }
                done.wait()
                dealer.close()
                closed.signal()
            }
        }
        for sender in senders { sender.start() }
        var poller = Poller()
        let routerIndex = poller.register(router)
        var received = 0
        var frames: [Message] = []
        let deadline = ContinuousClock.now + .seconds(60)
        while received < peers * messagesPerPeer {
            XCTAssertLessThan(ContinuousClock.now, deadline, "stranded after \(received) messages")
            if ContinuousClock.now >= deadline { break }
            _ = try poller.poll(timeout: .seconds(2))
            guard poller.events(at: routerIndex).contains(.readable) else { continue }
            let budget = Int(generator.next() % 4) + 1
            for _ in 0..<budget {
                guard try router.receive(multipart: &frames, wait: false) else { break }
                received += 1
                if generator.next() % 3 == 0 {
                    // A reply: a send that may process the socket's commands.
                    _ = try router.send(frames[0].bytes, [.more, .dontWait])
                    _ = try router.send([0], .dontWait)
                }
            }
        }
        XCTAssertEqual(received, peers * messagesPerPeer)
    }

    /// Two PAIR sockets, the first bound at `endpoint` and the second connected to it.
    private func connectedPair(_ context: Context, at endpoint: String) throws -> (Socket, Socket) {
        let bound = try Socket(context, .pair)
        let connected = try Socket(context, .pair)
        try bound.bind(endpoint)
        try connected.connect(endpoint)
        return (bound, connected)
    }

    func testTimeoutsRoundUpToWholeMilliseconds() {
        XCTAssertEqual(Poller.milliseconds(roundingUp: .zero), 0)
        XCTAssertEqual(Poller.milliseconds(roundingUp: .microseconds(1)), 1)
        XCTAssertEqual(Poller.milliseconds(roundingUp: .milliseconds(1)), 1)
        XCTAssertEqual(Poller.milliseconds(roundingUp: .microseconds(1500)), 2)
        XCTAssertEqual(Poller.milliseconds(roundingUp: .seconds(3)), 3000)
        XCTAssertEqual(Poller.milliseconds(roundingUp: .seconds(-1)), 0)
        XCTAssertEqual(Poller.milliseconds(roundingUp: .seconds(Int64.max)), Int(Int32.max))
    }
}
