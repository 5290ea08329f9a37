import EnlargerProtocol
import Foundation
import XCTest

@testable import EnlargerBroker

/// `Sharing` on its own: which key finds which job, when a job stops being found, and what
/// the cache answers and keeps. The core's use of it is BrokerCoreSharingTests' and
/// BrokerCoreSourceTests'.
final class SharingTests: XCTestCase {
    let alice = Principal("curve:alice"), bob = Principal("curve:bob")

    private func key(_ kind: ShareKey.Kind, _ source: String, scope: String? = "curve:alice") -> ShareKey {
        ShareKey(scope: scope, kind: kind, source: Data(source.utf8), spec: [1, 2, 3], delivery: .final)
    }

    private func result(_ width: UInt32) -> Enlarger_V1_Result {
        var result = Enlarger_V1_Result()
        result.requestID = "r-\(width)"
        result.width = width
        result.terminal = true
        return result
    }

    func testTheFirstJobHoldsAKeyAndOnlyItsHolderLetsItGo() {
        var sharing = Sharing<[UInt8]>(joinsJobs: true, cacheBytes: 0)
        let digest = key(.digest, "d")
        XCTAssertNil(sharing.joinable(digest))
        sharing.claim(digest, by: 1)
        sharing.claim(digest, by: 2)
        XCTAssertEqual(sharing.joinable(digest), 1, "a later identical job does not take the key")
        sharing.release(digest, heldBy: 2)
        XCTAssertEqual(sharing.joinable(digest), 1, "a job that does not hold the key cannot free it")
        sharing.release(digest, heldBy: 1)
        XCTAssertNil(sharing.joinable(digest))
        XCTAssertTrue(sharing.isIdle)
        sharing.takeOver(digest, by: 3)
        XCTAssertEqual(sharing.joinable(digest), 3)
        XCTAssertNil(sharing.joinable(nil), "a request without a key joins nothing")
    }

    func testWithoutJobSharingNothingIsJoinable() {
        var sharing = Sharing<[UInt8]>(joinsJobs: false, cacheBytes: 1 << 20)
        let digest = key(.digest, "d")
        sharing.claim(digest, by: 1)
        sharing.takeOver(digest, by: 1)
        XCTAssertNil(sharing.joinable(digest))
        XCTAssertTrue(sharing.isIdle)
    }

    /// Dispatch: a location stops finding the job and stays its key (the version is still to
    /// come); a version stops finding it and is dropped (the next attempt names its own); a
    /// digest stays with the job to the end.
    func testADispatchedJobIsFoundByItsDigestOnly() {
        var sharing = Sharing<[UInt8]>(joinsJobs: true, cacheBytes: 0)
        let digest = key(.digest, "d"), location = key(.location, "/photos/a.jpg"), version = key(.version, "v1")
        sharing.claim(digest, by: 1)
        sharing.claim(location, by: 2)
        sharing.takeOver(version, by: 3)
        XCTAssertEqual(sharing.dispatched(1, key: digest), digest)
        XCTAssertEqual(sharing.dispatched(2, key: location), location)
        XCTAssertNil(sharing.dispatched(3, key: version))
        XCTAssertEqual(sharing.joinable(digest), 1)
        XCTAssertNil(sharing.joinable(location))
        XCTAssertNil(sharing.joinable(version))
        XCTAssertNil(sharing.dispatched(4, key: nil))
    }

    /// The cache: filled only under a key that names a version and only with a checked
    /// result, read only under such a key; a digest entry is its principal's even where
    /// results are shared across principals, a version entry is shared as the scope says.
    func testTheCacheAnswersOnlyVersionsAndKeepsDigestsPerPrincipal() {
        var sharing = Sharing<[UInt8]>(joinsJobs: true, cacheBytes: 1 << 20)
        let everyone: String? = nil
        let location = key(.location, "/photos/a.jpg", scope: everyone)
        sharing.store(result(1), payload: [1], key: location, for: alice, verified: true)
        XCTAssertEqual(sharing.cachedCount, 0, "a location names no version")
        XCTAssertNil(sharing.cached(location, for: alice))

        let digest = key(.digest, "d", scope: everyone)
        sharing.store(result(2), payload: [2], key: digest, for: alice, verified: false)
        XCTAssertEqual(sharing.cachedCount, 0, "bytes nobody checked are not kept")
        sharing.store(result(2), payload: [2], key: digest, for: alice, verified: true)
        XCTAssertEqual(sharing.cached(digest, for: alice)?.result.width, 2)
        XCTAssertEqual(sharing.cached(digest, for: alice)?.result.requestID, "", "no request's id is kept")
        XCTAssertNil(sharing.cached(digest, for: bob), "a digest alone never gets another principal's result")

        let version = key(.version, "v1", scope: everyone)
        sharing.store(result(3), payload: [3], key: version, for: alice, verified: true)
        XCTAssertEqual(sharing.cached(version, for: bob)?.payload, [3], "a version the worker named is shared")
        XCTAssertNil(sharing.cached(nil, for: alice))
        XCTAssertEqual(sharing.cachedCount, 2)
        XCTAssertEqual(sharing.cacheStatus.entries, 2)
        XCTAssertLessThanOrEqual(sharing.cacheBytes, sharing.cacheLimit)
    }
}
