import Foundation
import XCTest

@testable import ZeroMQ
import TestSupport

/// The ZAP decisions and allow-list reloading without sockets, on an injected clock.
final class AccessControlTests: XCTestCase {
    private let start = ContinuousClock.now

    private func request(_ id: String, domain: String, mechanism: String, credentials: [[UInt8]] = []) -> [[UInt8]] {
        [Array("1.0".utf8), Array(id.utf8), Array(domain.utf8), Array("192.0.2.7".utf8), [], Array(mechanism.utf8)] + credentials
    }

    private func curve(_ id: String, _ domain: String, _ key: CurvePublicKey) -> [[UInt8]] {
        request(id, domain: domain, mechanism: "CURVE", credentials: [key.bytes])
    }

    private func isAllowed(_ control: AccessControl, _ frames: [[UInt8]]) -> Bool {
        let (reply, event) = control.answer(frames)
        if case .allowed = event { XCTAssertEqual(reply[2], Array("200".utf8)); return true }
        XCTAssertEqual(reply[2], Array("400".utf8))
        return false
    }

    func testDecisions() throws {
        let user = try CurveKeyPair.generate().publicKey
        let admin = try CurveKeyPair.generate().publicKey
        let control = AccessControl(
            policy: AccessPolicy(
                domains: [
                    "clients": .init(curveKeys: .fixed([user]), admitsAdmins: true),
                    "workers": .init(curveKeys: .fixed([]), nullUserID: "local"),
                ],
                admins: .fixed([admin])),
            reloadInterval: .seconds(1))

        let (reply, event) = control.answer(curve("r1", "clients", user))
        XCTAssertEqual(reply, [Array("1.0".utf8), Array("r1".utf8), Array("200".utf8), Array("OK".utf8),
                               Array(("curve:" + user.z85).utf8), []])
        XCTAssertEqual(event, .allowed(ZAPPeer(domain: "clients", address: "192.0.2.7", mechanism: "CURVE", publicKey: user),
                                       userID: "curve:" + user.z85))

        let cases: [([[UInt8]], ZAPRefusal?)] = [
            (curve("a", "clients", admin), nil),
            (curve("b", "workers", admin), .keyNotAllowed),
            (curve("c", "workers", user), .keyNotAllowed),
            (curve("d", "admins", admin), .unknownDomain),
            (curve("e", "", user), .unknownDomain),
            (request("f", domain: "workers", mechanism: "NULL"), nil),
            (request("g", domain: "clients", mechanism: "NULL"), .mechanismNotAllowed),
            (request("h", domain: "workers", mechanism: "PLAIN", credentials: [Array("u".utf8), Array("p".utf8)]), .mechanismNotAllowed),
            (request("i", domain: "clients", mechanism: "GSSAPI"), .mechanismNotAllowed),
            (request("j", domain: "clients", mechanism: "CURVE", credentials: [[1, 2, 3]]), .malformedRequest),
            (request("k", domain: "clients", mechanism: "CURVE"), .malformedRequest),
            (Array(request("l", domain: "workers", mechanism: "NULL").prefix(5)), .malformedRequest),
            ([Array("2.0".utf8)] + request("m", domain: "workers", mechanism: "NULL").dropFirst(), .malformedRequest),
            ([], .malformedRequest),
        ]
        for (frames, expected) in cases {
            let (reply, event) = control.answer(frames)
            XCTAssertEqual(reply.count, 6)
            XCTAssertEqual(reply[1], frames.count > 1 ? frames[1] : [], "the request id is echoed")
            switch (event, expected) {
            case (.allowed, nil): XCTAssertEqual(reply[2], Array("200".utf8))
            case (.refused(_, let refusal), let expected?):
                XCTAssertEqual(refusal, expected, "\(frames)")
                XCTAssertEqual(reply[2], Array("400".utf8))
                XCTAssertEqual(reply[4], [], "no user id on a refusal")
            default: XCTFail("\(event), expected \(String(describing: expected)) for \(frames)")
            }
        }
        XCTAssertTrue(control.isAdmin(userID: "curve:" + admin.z85))
        XCTAssertFalse(control.isAdmin(userID: "curve:" + user.z85))
    }

    func testDirectoryChangesAreNoticedAtMostOncePerInterval() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        let first = try CurveKeyPair.generate().publicKey
        let second = try CurveKeyPair.generate().publicKey
        var control = AccessControl(
            policy: AccessPolicy(domains: ["clients": .init(curveKeys: .directory(directory))]), reloadInterval: .seconds(1))

        XCTAssertEqual(control.refreshIfDue(now: start), [.allowListLoaded(directory: directory, keyCount: 0)], "first check reads")
        try first.writePublicKeyFile(to: directory + "/first.pub")
        XCTAssertEqual(control.refreshIfDue(now: start + .milliseconds(999)), [], "too soon to look")
        XCTAssertFalse(isAllowed(control, curve("1", "clients", first)))

        XCTAssertEqual(control.refreshIfDue(now: start + .seconds(1)), [.allowListLoaded(directory: directory, keyCount: 1)])
        XCTAssertTrue(isAllowed(control, curve("2", "clients", first)))
        XCTAssertEqual(control.refreshIfDue(now: start + .seconds(3)), [], "unchanged: not re-read")

        // Replaced in place under the same name, as an editor or `--force` would.
        try second.writePublicKeyFile(to: directory + "/first.pub", replacing: true)
        XCTAssertEqual(control.refreshIfDue(now: start + .seconds(5)), [.allowListLoaded(directory: directory, keyCount: 1)])
        XCTAssertFalse(isAllowed(control, curve("3", "clients", first)))
        XCTAssertTrue(isAllowed(control, curve("4", "clients", second)))

        // An explicit reload reads now and restarts the interval.
        XCTAssertEqual(unlink(directory + "/first.pub"), 0)
        XCTAssertEqual(control.reload(now: start + .seconds(5.5)), [.allowListLoaded(directory: directory, keyCount: 0)])
        XCTAssertFalse(isAllowed(control, curve("5", "clients", second)))
        try first.writePublicKeyFile(to: directory + "/again.pub")
        XCTAssertEqual(control.refreshIfDue(now: start + .seconds(6)), [])
        XCTAssertEqual(control.refreshIfDue(now: start + .seconds(6.5)).first, .allowListLoaded(directory: directory, keyCount: 1))
    }

    func testMissingDirectoryAllowsNothingAndIsReportedOncePerChange() throws {
        let parent = try TemporaryEndpoints(self).directory.path
        let directory = parent + "/keys"
        let key = try CurveKeyPair.generate().publicKey
        var control = AccessControl(
            policy: AccessPolicy(domains: [:], admins: .directory(directory)), reloadInterval: .zero)

        XCTAssertEqual(control.refreshIfDue(now: start), [
            .allowListLoaded(directory: directory, keyCount: 0),
            .allowListProblem(KeyFileError(path: directory, reason: .missing)),
        ])
        XCTAssertEqual(control.refreshIfDue(now: start + .seconds(1)), [], "the same problem is not repeated")
        XCTAssertFalse(control.isAdmin(userID: AccessPolicy.userID(for: key)))

        XCTAssertEqual(mkdir(directory, 0o700), 0)
        try key.writePublicKeyFile(to: directory + "/ops.pub")
        XCTAssertEqual(control.refreshIfDue(now: start + .seconds(2)), [.allowListLoaded(directory: directory, keyCount: 1)])
        XCTAssertTrue(control.isAdmin(userID: AccessPolicy.userID(for: key)))
    }

    func testOneDirectoryMayServeSeveralDomains() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        let key = try CurveKeyPair.generate().publicKey
        try key.writePublicKeyFile(to: directory + "/k.pub")
        var control = AccessControl(
            policy: AccessPolicy(domains: [
                "a": .init(curveKeys: .directory(directory)), "b": .init(curveKeys: .directory(directory)),
            ]),
            reloadInterval: .seconds(1))
        XCTAssertEqual(control.reload(now: start), [.allowListLoaded(directory: directory, keyCount: 1)], "read once")
        XCTAssertTrue(isAllowed(control, curve("1", "a", key)))
        XCTAssertTrue(isAllowed(control, curve("2", "b", key)))
    }
}
