@testable import Fetching
import Dispatch
import Foundation
import Locking
import TestSupport
import XCTest

/// A name lookup cannot be interrupted: the fetch gives up on it at its connect timeout or
/// on cancel, and the number of lookups left running is bounded.
final class NameLookupBoundTests: XCTestCase {
    /// A resolver that never answers until released.
    final class Hang: Sendable {
        let release = DispatchSemaphore(value: 0)
        let entered = Lock(0)

        var lookup: NameLookup {
            NameLookup { [self] name throws(FetchError) in
                entered.withLock { $0 += 1 }
                release.wait()
                release.signal()  // let every other hung lookup go too
                throw .unavailable("cannot resolve \(name): released")
            }
        }
    }

    func fetcher(_ lookup: NameLookup, connectTimeout: Duration = .milliseconds(300)) -> URLFetcher {
        var policy = URLSourcePolicy()
        policy.connectTimeout = connectTimeout
        policy.totalTimeout = .seconds(30)
        let fetcher = URLFetcher(policy: policy, lookup: lookup)
        addTeardownBlock { fetcher.shutdown() }
        return fetcher
    }

    func error(_ body: () throws(FetchError) -> FetchedBody) -> FetchError? {
        do {
            _ = try body()
            return nil
        } catch {
            return error
        }
    }

    func testALookupThatNeverAnswersTimesOutAtTheConnectTimeout() {
        let hang = Hang()
        defer { hang.release.signal() }
        let fetcher = fetcher(hang.lookup)
        let start = ContinuousClock.now
        let failure = error { () throws(FetchError) in
            try fetcher.fetch("http://silent.example/a.jpg", cancellation: .init(), events: { _ in })
        }
        let took = ContinuousClock.now - start
        guard case .timedOut(let reason)? = failure else { return XCTFail("\(String(describing: failure))") }
        XCTAssertTrue(reason.contains("resolving silent.example"), reason)
        XCTAssertGreaterThanOrEqual(took, .milliseconds(300))
        XCTAssertLessThan(took, .milliseconds(1500), "bounded by the 300 ms connect timeout, not by the resolver")
    }

    func testCancelAbandonsALookupAtOnce() {
        let hang = Hang()
        defer { hang.release.signal() }
        let fetcher = fetcher(hang.lookup, connectTimeout: .seconds(20))
        let cancellation = FetchCancellation()
        let cancelledAt = Lock<ContinuousClock.Instant?>(nil)
        Thread.detachNewThread {
            while hang.entered.withLock({ $0 }) == 0 { usleep(1000) }
            cancelledAt.withLock { $0 = .now }
            cancellation.cancel()
        }
        let failure = error { () throws(FetchError) in
            try fetcher.fetch("http://silent.example/a.jpg", cancellation: cancellation, events: { _ in })
        }
        let returned = ContinuousClock.now
        XCTAssertEqual(failure, .cancelled)
        guard let cancelled = cancelledAt.withLock({ $0 }) else { return XCTFail("never cancelled") }
        XCTAssertLessThan(returned - cancelled, .milliseconds(1000), "not the 20 s connect timeout")
    }

    func testAbandonedLookupsAreBoundedAndTheirThreadsEnd() {
        let hang = Hang()
        let bounded = BoundedLookup(hang.lookup, maxOutstanding: 3, maxPerPrincipal: 3)
        for _ in 0..<3 {
            let failure: FetchError?
            do {
                _ = try bounded.resolve("silent.example", deadline: .now + .milliseconds(20), timeoutName: "test",
                                        cancellation: .init())
                failure = nil
            } catch {
                failure = error
            }
            guard case .timedOut? = failure else { return XCTFail("\(String(describing: failure))") }
        }
        XCTAssertEqual(bounded.running, 3)
        do {
            _ = try bounded.resolve("silent.example", deadline: .now + .seconds(5), timeoutName: "test", cancellation: .init())
            XCTFail("a fourth lookup must not start")
        } catch {
            guard case .unavailable(let reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("3 name lookups are already outstanding"), reason)
        }
        XCTAssertEqual(hang.entered.withLock { $0 }, 3, "the fourth never reached the resolver")
        hang.release.signal()
        let deadline = ContinuousClock.now + .seconds(5)
        while bounded.running > 0, ContinuousClock.now < deadline { usleep(1000) }
        XCTAssertEqual(bounded.running, 0, "abandoned lookups end when the resolver answers")
    }

    /// A principal whose names never answer takes three quarters of the lookups at most: the
    /// last quarter stays for the others (who may each take a quarter of their own), and its
    /// lookups beyond that fail at once, saying why. Alone, a principal still has three quarters.
    func testAQuarterOfTheLookupsStaysForOtherPrincipals() {
        let hang = Hang()
        let bounded = BoundedLookup(hang.lookup, maxOutstanding: 8)
        XCTAssertEqual(bounded.maxPerPrincipal, 2)
        func lookUp(_ principal: String) -> FetchError? {
            do {
                _ = try bounded.resolve("silent.example", for: principal, deadline: .now + .milliseconds(20),
                                        timeoutName: "test", cancellation: .init())
                return nil
            } catch {
                return error
            }
        }
        for _ in 0..<6 {
            guard case .timedOut? = lookUp("hostile") else { return XCTFail("three quarters start for one principal") }
        }
        guard case .unavailable(let reason)? = lookUp("hostile") else { return XCTFail("a seventh must not start") }
        XCTAssertTrue(reason.contains("are kept for other principals"), reason)
        XCTAssertEqual(bounded.running(for: "hostile"), 6)
        // Another principal finds the last quarter free.
        for _ in 0..<2 {
            guard case .timedOut? = lookUp("honest") else { return XCTFail("the others' quarter must be free") }
        }
        XCTAssertEqual(bounded.running, 8)
        guard case .unavailable(let full)? = lookUp("third") else { return XCTFail("the pool is full") }
        XCTAssertTrue(full.contains("8 name lookups are already outstanding"), full)
        // Every started lookup reaches the resolver (its thread may start late on a busy
        // machine); the refused ones never do.
        let started = ContinuousClock.now + .seconds(5)
        while hang.entered.withLock({ $0 }) < 8, ContinuousClock.now < started { usleep(1000) }
        usleep(20_000)
        XCTAssertEqual(hang.entered.withLock { $0 }, 8)
        // Once the resolver answers, every count comes back to nothing.
        hang.release.signal()
        let deadline = ContinuousClock.now + .seconds(5)
        while bounded.running > 0, ContinuousClock.now < deadline { usleep(1000) }
        XCTAssertEqual(bounded.running, 0)
        XCTAssertEqual(bounded.running(for: "hostile"), 0)
        guard case .unavailable(let answered)? = lookUp("hostile"), answered.contains("released") else {
            return XCTFail("its lookups reach the resolver again")
        }
    }
}
