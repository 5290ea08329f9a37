import Enlarger
import EnlargerBroker
import EnlargerWorker
import Foundation
import ImageModel
import Imaging
import Logging
import TestSupport
import XCTest
import ZeroMQ

/// Only allowed peers get in, each in its own role, and a principal sees only its own
/// requests: CURVE over tcp with allow-list directories, end to end.
final class AuthenticationTests: XCTestCase {
    private var directory: URL!
    private var keys: [String: CurveKeyPair] = [:]

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-auth-\(UUID().uuidString.prefix(8))")
        for sub in ["clients", "workers", "admins", "private"] {
            try FileManager.default.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        for name in ["broker", "alice", "bob", "admin", "worker", "carol"] {
            keys[name] = try CurveKeyPair.generate()
        }
        try allow("alice", in: "clients")
        try allow("bob", in: "clients")
        try allow("admin", in: "clients")
        try allow("admin", in: "admins")
        try allow("worker", in: "workers")
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private func allow(_ name: String, in list: String) throws {
        try keys[name]!.publicKey.writePublicKeyFile(to: directory.appendingPathComponent("\(list)/\(name).pub").path,
                                                     replacing: true)
    }

    private func revoke(_ name: String, in list: String) throws {
        try FileManager.default.removeItem(at: directory.appendingPathComponent("\(list)/\(name).pub"))
    }

    private func startBroker() throws -> (BrokerService, BrokerThread) {
        var configuration = BrokerService.Configuration(clientsEndpoint: "tcp://127.0.0.1:*", workersEndpoint: "tcp://127.0.0.1:*")
        configuration.broker.heartbeatInterval = .milliseconds(100)
        configuration.security = .init(
            serverKey: keys["broker"]!,
            clientKeys: .directory(directory.appendingPathComponent("clients").path),
            workerKeys: .directory(directory.appendingPathComponent("workers").path),
            adminKeys: .directory(directory.appendingPathComponent("admins").path))
        var logger = Logger(label: "test.broker")
        logger.logLevel = .error
        let service = try BrokerService(configuration: configuration, logger: logger)
        let thread = service.startInBackground()
        addTeardownBlock { try? thread.stopAndWait() }
        return (service, thread)
    }

    private func client(_ name: String?, _ broker: BrokerService) throws -> EnlargerClient {
        var configuration = EnlargerClient.Configuration(heartbeatInterval: .milliseconds(100), missedHeartbeats: 10)
        configuration.curve = name.map { CurveClientCredentials(keyPair: keys[$0]!, serverKey: keys["broker"]!.publicKey) }
        // A client without keys must say so outright (the library fails closed); the broker
        // must refuse it anyway.
        configuration.allowInsecureTCP = name == nil
        return try EnlargerClient(brokerEndpoint: broker.clientsEndpoint, configuration: configuration)
    }

    private func startWorker(_ name: String, _ broker: BrokerService) throws -> WorkerService.Handle {
        var logger = Logger(label: "test.worker")
        logger.logLevel = .error
        var configuration = WorkerConfiguration(brokerEndpoint: broker.workersEndpoint, concurrency: 1,
                                                heartbeatInterval: .milliseconds(100), name: "worker-\(name)", logger: logger)
        configuration.curve = CurveClientCredentials(keyPair: keys[name]!, serverKey: keys["broker"]!.publicKey)
        let handle = try WorkerService(configuration: configuration).start()
        addTeardownBlock { try? handle.stop() }
        return handle
    }

    private func workers(seenBy client: EnlargerClient, count: Int, within limit: Duration = .seconds(5)) async throws -> BrokerStatus {
        let deadline = ContinuousClock.now + limit
        var status = try await client.status()
        while status.workers.count != count, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            status = try await client.status()
        }
        return status
    }

    func testTCPWithoutKeysIsRefusedUnlessAskedFor() throws {
        var configuration = BrokerService.Configuration(clientsEndpoint: "tcp://127.0.0.1:*", workersEndpoint: "tcp://127.0.0.1:*")
        XCTAssertThrowsError(try BrokerService(configuration: configuration, logger: Logger(label: "test"))) { error in
            XCTAssertTrue("\(error)".contains("without authentication"), "\(error)")
        }
        configuration.allowInsecureTCP = true
        let service = try BrokerService(configuration: configuration, logger: Logger(label: "test"))
        try service.startInBackground().stopAndWait()
    }

    func testOnlyAllowedPeersGetInEachInItsRole() async throws {
        let (broker, _) = try startBroker()
        let alice = try client("alice", broker)
        let admin = try client("admin", broker)  // workers are shown to admins only
        _ = try startWorker("worker", broker)
        var status = try await workers(seenBy: admin, count: 1)
        XCTAssertEqual(status.workers.count, 1)

        // A client key cannot register as a worker.
        _ = try startWorker("alice", broker)
        try await Task.sleep(for: .milliseconds(500))
        status = try await admin.status()
        XCTAssertEqual(status.workers.count, 1, "a client key registered as a worker")
        await admin.close()

        // The real work goes through.
        let photo = try Corpus.good("ljt_testorig.jpg")
        let image = try await alice.resize(photo, options: ResizeOptions(width: 64))
        XCTAssertEqual(image.width, 64)

        // Neither a client without keys nor one with an unknown key nor a worker key gets a
        // single message through.
        for stranger in [nil, "carol", "worker"] as [String?] {
            let client = try client(stranger, broker)
            do {
                _ = try await client.status()
                XCTFail("\(stranger ?? "no key") got a status reply")
            } catch {
                XCTAssertEqual(error, .brokerUnreachable, "\(stranger ?? "no key")")
            }
            await client.close()
        }
        await alice.close()
    }

    func testPrincipalsSeeOnlyTheirOwnRequestsAndAdminsSeeAll() async throws {
        let (broker, _) = try startBroker()
        let alice = try client("alice", broker), bob = try client("bob", broker), admin = try client("admin", broker)
        // No worker yet: requests stay live at the broker.
        let photo = try Corpus.good("ljt_testorig.jpg")
        var alices = alice.submit(ResizeRequest(id: "shared-id", image: photo, options: ResizeOptions(width: 32))).makeAsyncIterator()
        let first = try await alices.next()
        XCTAssertEqual(first, .accepted)
        // Bob's cancel cannot reach Alice's request, nor tell it exists.
        let outcome = try await bob.cancel("shared-id")
        XCTAssertEqual(outcome, .unknown)
        // Bob may use the same id: ids belong to their principal.
        var bobs = bob.submit(ResizeRequest(id: "shared-id", image: photo, options: ResizeOptions(width: 32))).makeAsyncIterator()
        let bobsFirst = try await bobs.next()
        XCTAssertEqual(bobsFirst, .accepted)
        // Worker details are for admins.
        _ = try startWorker("worker", broker)
        _ = try await workers(seenBy: admin, count: 1)
        let plain = try await bob.status()
        XCTAssertEqual(plain.workers, [], "workers are shown to admins only")
        let full = try await admin.status()
        XCTAssertEqual(full.workers.map(\.name), ["worker-worker"])
        await bob.close()
        await alice.close()
        await admin.close()
    }

    func testAnAdminCancelsAnyonesRequest() async throws {
        let (broker, _) = try startBroker()
        let alice = try client("alice", broker), admin = try client("admin", broker)
        let photo = try Corpus.good("ljt_testorig.jpg")
        var events = alice.submit(ResizeRequest(id: "hers", image: photo, options: ResizeOptions(width: 32))).makeAsyncIterator()
        let first = try await events.next()
        XCTAssertEqual(first, .accepted)
        let outcome = try await admin.cancel("hers")
        XCTAssertEqual(outcome, .cancelled)
        do {
            _ = try await events.next()
            XCTFail("the request was not ended")
        } catch {
            XCTAssertEqual(error, .cancelled)
        }
        await alice.close()
        await admin.close()
    }

    func testKeysAreAddedAndRevokedWithoutARestart() async throws {
        let (broker, _) = try startBroker()
        let refused = try client("carol", broker)
        do {
            _ = try await refused.status()
            XCTFail("carol is not allowed yet")
        } catch {
            XCTAssertEqual(error, .brokerUnreachable)
        }
        await refused.close()

        try allow("carol", in: "clients")
        let deadline = ContinuousClock.now + .seconds(10)
        var admitted = false
        while !admitted, ContinuousClock.now < deadline {
            let carol = try client("carol", broker)
            admitted = (try? await carol.status()) != nil
            await carol.close()
        }
        XCTAssertTrue(admitted, "a key added to the directory is let in")

        try revoke("carol", in: "clients")
        var revoked = false
        let revokeDeadline = ContinuousClock.now + .seconds(10)
        while !revoked, ContinuousClock.now < revokeDeadline {
            let carol = try client("carol", broker)
            revoked = (try? await carol.status()) == nil
            await carol.close()
        }
        XCTAssertTrue(revoked, "a key removed from the directory is refused on its next connection")
    }

    /// A key removed from its list loses its open connections within about a second, without
    /// the connection sending anything: the client's live requests end with UNAUTHORIZED and
    /// it gets nothing more; an admin removed from the admin list loses its rights at once.
    func testRevocationReachesOpenConnectionsWithinASecond() async throws {
        let (broker, _) = try startBroker()
        let alice = try client("alice", broker)
        let admin = try client("admin", broker)
        // No worker: the request waits in the queue, live, until its key goes.
        let photo = try Corpus.good("ljt_testorig.jpg")
        let events = alice.submit(ResizeRequest(id: "waiting", image: photo, options: ResizeOptions(width: 64),
                                                delivery: .final))
        var iterator = events.makeAsyncIterator()
        let accepted = try await iterator.next()
        XCTAssertEqual(accepted, .accepted)
        let before = try await admin.status()
        XCTAssertEqual(before.totals.submitted, 1, "an admin sees every principal's counts")
        let revokedAt = ContinuousClock.now
        try revoke("alice", in: "clients")
        try revoke("admin", in: "admins")
        do {
            while let event = try await iterator.next() {
                if case .final = event { XCTFail("the request finished after its key was revoked") }
            }
            XCTFail("the request ended without an error")
        } catch {
            XCTAssertEqual(error, .failed(.unauthorized, "the key of this connection was revoked"))
        }
        let took = ContinuousClock.now - revokedAt
        XCTAssertLessThan(took, .seconds(3), "revocation took \(took)")
        do {
            _ = try await alice.status()
            XCTFail("a revoked key still gets answers")
        } catch {}
        let deadline = ContinuousClock.now + .seconds(3)
        var status = try await admin.status()
        while status.totals.submitted != 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            status = try await admin.status()
        }
        XCTAssertEqual(status.totals.submitted, 0, "admin rights end with the admin list: only its own counts now")
        await alice.close()
        await admin.close()
    }
}
