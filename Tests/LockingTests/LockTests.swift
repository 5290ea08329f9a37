import Foundation
import Locking
import XCTest

final class LockTests: XCTestCase {
    /// Threads hammer one lock; a plain (non-atomic) counter and an "inside" flag in the
    /// guarded state catch any two bodies overlapping or any lost update.
    func testMutualExclusionUnderContention() {
        struct Counter {
            var value = 0
            var inside = false
            var overlaps = 0
        }
        let lock = Lock(Counter())
        let threads = 8, iterations = 20_000
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<iterations {
                lock.withLock { counter in
                    if counter.inside { counter.overlaps += 1 }
                    counter.inside = true
                    // A read-modify-write spread over several steps, so an overlap would show.
                    let seen = counter.value
                    if seen % 64 == 0 { sched_yield() }
                    counter.value = seen + 1
                    counter.inside = false
                }
            }
        }
        let counter = lock.withLock { $0 }
        XCTAssertEqual(counter.value, threads * iterations)
        XCTAssertEqual(counter.overlaps, 0)
    }

    /// A thread blocked in `withLock` gets in only after the holder's body has returned, and
    /// then sees everything the holder wrote.
    func testWaiterSeesTheHoldersWrites() {
        let lock = Lock([Int]())
        let holding = DispatchSemaphore(value: 0)
        let waiterDone = DispatchSemaphore(value: 0)
        let seenByWaiter = Lock([Int]())
        let waiter = Thread {
            holding.wait()
            let seen = lock.withLock { $0 }
            seenByWaiter.withLock { $0 = seen }
            waiterDone.signal()
        }
        waiter.start()
        lock.withLock { values in
            holding.signal()
            // Give the waiter time to block on the mutex.
            usleep(50_000)
            values = [1, 2, 3]
        }
        waiterDone.wait()
        XCTAssertEqual(seenByWaiter.withLock { $0 }, [1, 2, 3])
    }

    /// The state is a value: mutations made in place persist, what `withLock` returns is a
    /// copy that later mutations do not reach, and the body's result is passed through.
    func testWithLockHasValueSemantics() {
        let lock = Lock([1, 2])
        let appendedCount = lock.withLock { values -> Int in
            values.append(3)
            return values.count
        }
        XCTAssertEqual(appendedCount, 3)
        let snapshot = lock.withLock { $0 }
        lock.withLock { $0.append(4) }
        XCTAssertEqual(snapshot, [1, 2, 3])
        XCTAssertEqual(lock.withLock { $0 }, [1, 2, 3, 4])
        lock.withLock { $0 = [] }
        XCTAssertEqual(lock.withLock { $0.isEmpty }, true)
    }

    /// A throwing body keeps the mutations made before the throw, rethrows the error with its
    /// type, and leaves the lock free.
    func testThrowingBodyReleasesTheLock() {
        struct Refused: Error, Equatable { var code: Int }
        let lock = Lock(0)
        do throws(Refused) {
            try lock.withLock { (value: inout Int) throws(Refused) in
                value = 7
                throw Refused(code: 42)
            }
            XCTFail("no error")
        } catch {
            XCTAssertEqual(error, Refused(code: 42))
        }
        // Taken again from another thread: were it still held, this would never return.
        let done = DispatchSemaphore(value: 0)
        let observed = Lock(0)
        Thread {
            let value = lock.withLock { $0 }
            observed.withLock { $0 = value }
            done.signal()
        }.start()
        XCTAssertEqual(done.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(observed.withLock { $0 }, 7)
    }

    /// Sendable whatever the state: a non-Sendable class goes in `sending` and is only
    /// reached under the lock.
    func testGuardsNonSendableState() {
        final class Box {
            var items: [String] = []
        }
        let lock = Lock(Box())
        DispatchQueue.concurrentPerform(iterations: 4) { index in
            for step in 0..<1000 {
                lock.withLock { $0.items.append("\(index)-\(step)") }
            }
        }
        XCTAssertEqual(lock.withLock { $0.items.count }, 4000)
    }
}
