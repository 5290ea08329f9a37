import Foundation
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
        let context = try Context()
        let first = try Socket(context, .pair)
        let second = try Socket(context, .pair)
        try first.bind(endpoints.ipc("pair"))
        try second.connect(endpoints.ipc("pair"))
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
