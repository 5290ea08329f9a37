import Foundation
import XCTest

@testable import ZeroMQ
import TestSupport

/// End-to-end authentication over real sockets. One test thread owns every socket: it
/// polls the ZAP handler and the server, as a service's I/O thread would.
final class ZAPHandlerTests: XCTestCase {
    /// A server socket guarded by `handler`, and where clients reach it.
    private struct Server {
        var socket: Socket
        var endpoint: String
    }

    private func curveServer(_ context: Context, keyPair: CurveKeyPair, domain: String) throws -> Server {
        let socket = try Socket(context, .router)
        try socket.setCurveServer(keyPair, zapDomain: domain)
        try socket.bind("tcp://127.0.0.1:*")
        return Server(socket: socket, endpoint: try socket.lastEndpoint())
    }

    private func curveClient(_ context: Context, keyPair: CurveKeyPair, server: CurveKeyPair, endpoint: String) throws -> Socket {
        let socket = try Socket(context, .dealer)
        try socket.setCurveClient(keyPair, serverKey: server.publicKey)
        try socket.connect(endpoint)
        return socket
    }

    /// Sends "hello" from `client`, then services `handler` until `server` receives a
    /// message or `timeout` passes.
    private func attempt(
        from client: Socket, to server: Socket, handler: ZAPHandler?, timeout: Duration = .seconds(5)
    ) throws -> (frames: [Message]?, events: [ZAPEvent]) {
        try client.send(Array("hello".utf8))
        var poller = Poller()
        let serverIndex = poller.register(server)
        let zapIndex = handler.map { poller.register($0) }
        let deadline = ContinuousClock.now + timeout
        var events: [ZAPEvent] = []
        while case let remaining = deadline - .now, remaining > .zero {
            _ = try poller.poll(timeout: remaining)
            if let handler, let zapIndex, poller.events(at: zapIndex).contains(.readable) {
                events += try handler.serviceRequests()
            }
            if poller.events(at: serverIndex).contains(.readable) {
                return (try server.receiveMultipart(), events)
            }
        }
        return (nil, events)
    }

    private func refusals(_ events: [ZAPEvent]) -> [ZAPRefusal] {
        events.compactMap { if case .refused(_, let why) = $0 { why } else { nil } }
    }

    private func allowed(_ events: [ZAPEvent]) -> [String] {
        events.compactMap { if case .allowed(_, let userID) = $0 { userID } else { nil } }
    }

    func testAllowedCurveClientGetsThroughWithItsUserID() throws {
        let context = try Context()
        let serverKeys = try CurveKeyPair.generate()
        let clientKeys = try CurveKeyPair.generate()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: [
            "clients": .init(curveKeys: .fixed([clientKeys.publicKey])),
        ]))
        let server = try curveServer(context, keyPair: serverKeys, domain: "clients")
        let client = try curveClient(context, keyPair: clientKeys, server: serverKeys, endpoint: server.endpoint)

        let (frames, events) = try attempt(from: client, to: server.socket, handler: handler)
        let received = try XCTUnwrap(frames, "the allowed client's message arrives")
        let expected = "curve:" + clientKeys.publicKey.z85
        XCTAssertEqual(received.last?.bytes, Array("hello".utf8))
        XCTAssertEqual(received.userID, expected)
        XCTAssertEqual(received.last?.userID, expected, "every frame from the wire carries it")
        XCTAssertEqual(received.last?.metadata("Peer-Address"), "127.0.0.1")
        XCTAssertEqual(AccessPolicy.userID(for: clientKeys.publicKey), expected)
        XCTAssertEqual(AccessPolicy.publicKey(inUserID: expected), clientKeys.publicKey)
        XCTAssertEqual(events, [
            .allowed(ZAPPeer(domain: "clients", address: "127.0.0.1", mechanism: "CURVE", publicKey: clientKeys.publicKey),
                     userID: expected),
        ])

        // And the reply goes back over the encrypted connection.
        try server.socket.send(received[0], .more)
        try server.socket.send(Array("back".utf8))
        var poller = Poller()
        poller.register(client)
        XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 1)
        XCTAssertEqual(try client.receive()?.bytes, Array("back".utf8))
    }

    func testUnknownKeyNeverGetsAMessageThrough() throws {
        let context = try Context()
        let serverKeys = try CurveKeyPair.generate()
        let known = try CurveKeyPair.generate()
        let stranger = try CurveKeyPair.generate()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: [
            "clients": .init(curveKeys: .fixed([known.publicKey]), nullUserID: "local"),
        ]))
        let server = try curveServer(context, keyPair: serverKeys, domain: "clients")
        let client = try curveClient(context, keyPair: stranger, server: serverKeys, endpoint: server.endpoint)

        let (frames, events) = try attempt(from: client, to: server.socket, handler: handler, timeout: .milliseconds(400))
        XCTAssertNil(frames, "nothing from an unknown key arrives")
        XCTAssertFalse(refusals(events).isEmpty, "the handler was asked and said no: \(events)")
        XCTAssertEqual(Set(refusals(events)), [.keyNotAllowed])
        XCTAssertEqual(allowed(events), [])
    }

    func testWorkerKeyCannotConnectToClientsDomain() throws {
        let context = try Context()
        let serverKeys = try CurveKeyPair.generate()
        let workerKeys = try CurveKeyPair.generate()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: [
            "clients": .init(curveKeys: .none),
            "workers": .init(curveKeys: .fixed([workerKeys.publicKey])),
        ]))
        let clients = try curveServer(context, keyPair: serverKeys, domain: "clients")
        let workers = try curveServer(context, keyPair: serverKeys, domain: "workers")

        let intruder = try curveClient(context, keyPair: workerKeys, server: serverKeys, endpoint: clients.endpoint)
        let refused = try attempt(from: intruder, to: clients.socket, handler: handler, timeout: .milliseconds(400))
        XCTAssertNil(refused.frames)
        XCTAssertEqual(Set(refusals(refused.events)), [.keyNotAllowed])
        intruder.close()

        // The same key is fine where it belongs.
        let worker = try curveClient(context, keyPair: workerKeys, server: serverKeys, endpoint: workers.endpoint)
        let admitted = try attempt(from: worker, to: workers.socket, handler: handler)
        XCTAssertEqual(admitted.frames?.userID, AccessPolicy.userID(for: workerKeys.publicKey))
    }

    func testAddingAndRemovingAPubFileTakesEffectWithoutANewHandler() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        let context = try Context()
        let serverKeys = try CurveKeyPair.generate()
        let clientKeys = try CurveKeyPair.generate()
        // Interval zero: every request checks the directory, so no test time is spent waiting.
        let handler = try ZAPHandler(
            context: context, policy: AccessPolicy(domains: ["clients": .init(curveKeys: .directory(directory))]),
            reloadInterval: .zero)
        XCTAssertEqual(handler.reload(), [.allowListLoaded(directory: directory, keyCount: 0)])
        let server = try curveServer(context, keyPair: serverKeys, domain: "clients")

        let early = try curveClient(context, keyPair: clientKeys, server: serverKeys, endpoint: server.endpoint)
        let before = try attempt(from: early, to: server.socket, handler: handler, timeout: .milliseconds(300))
        XCTAssertNil(before.frames, "not yet in the allow-list")
        XCTAssertEqual(Set(refusals(before.events)), [.keyNotAllowed])
        early.close()

        try clientKeys.publicKey.writePublicKeyFile(to: directory + "/alice.pub")
        let admitted = try curveClient(context, keyPair: clientKeys, server: serverKeys, endpoint: server.endpoint)
        let during = try attempt(from: admitted, to: server.socket, handler: handler)
        XCTAssertEqual(during.frames?.userID, AccessPolicy.userID(for: clientKeys.publicKey))
        XCTAssertEqual(during.events.first, .allowListLoaded(directory: directory, keyCount: 1))

        XCTAssertEqual(unlink(directory + "/alice.pub"), 0)
        let late = try curveClient(context, keyPair: clientKeys, server: serverKeys, endpoint: server.endpoint)
        let after = try attempt(from: late, to: server.socket, handler: handler, timeout: .milliseconds(300))
        XCTAssertNil(after.frames, "removed from the allow-list")
        XCTAssertEqual(after.events.first, .allowListLoaded(directory: directory, keyCount: 0))
        XCTAssertEqual(Set(refusals(after.events)), [.keyNotAllowed])
    }

    func testBadFilesAreReportedAndSkipped() throws {
        let directory = try TemporaryEndpoints(self).directory.path
        let good = try CurveKeyPair.generate()
        try good.publicKey.writePublicKeyFile(to: directory + "/good.pub")
        XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/bad.pub", contents: Data("not a key\n".utf8)))
        XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/notes.txt", contents: Data("ignored\n".utf8)))
        XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/.half.pub", contents: Data("ignor".utf8)))
        let context = try Context()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: ["clients": .init(curveKeys: .directory(directory))]))

        XCTAssertEqual(handler.reload(), [
            .allowListLoaded(directory: directory, keyCount: 1),
            .allowListProblem(KeyFileError(path: directory + "/bad.pub", reason: .badKey(.wrongTextLength(9), line: 1))),
        ])
        let serverKeys = try CurveKeyPair.generate()
        let server = try curveServer(context, keyPair: serverKeys, domain: "clients")
        let client = try curveClient(context, keyPair: good, server: serverKeys, endpoint: server.endpoint)
        XCTAssertNotNil(try attempt(from: client, to: server.socket, handler: handler).frames)
    }

    func testNullMechanismIsAllowedOrRefusedPerDomain() throws {
        let endpoints = try TemporaryEndpoints(self)
        let context = try Context()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: [
            "local": .init(nullUserID: "local"),
            "clients": .init(curveKeys: .fixed([try CurveKeyPair.generate().publicKey])),
        ]))
        let open = try Socket(context, .router)
        try open.setZAPDomain("local")
        try open.bind(endpoints.ipc("open"))
        let closed = try Socket(context, .router)
        try closed.setZAPDomain("clients")
        try closed.bind(endpoints.ipc("closed"))

        let welcome = try Socket(context, .dealer)
        try welcome.connect(endpoints.ipc("open"))
        let admitted = try attempt(from: welcome, to: open, handler: handler)
        XCTAssertEqual(admitted.frames?.userID, "local")
        XCTAssertEqual(allowed(admitted.events), ["local"])

        let unwelcome = try Socket(context, .dealer)
        try unwelcome.connect(endpoints.ipc("closed"))
        let refused = try attempt(from: unwelcome, to: closed, handler: handler, timeout: .milliseconds(300))
        XCTAssertNil(refused.frames)
        XCTAssertEqual(Set(refusals(refused.events)), [.mechanismNotAllowed])
    }

    func testGuardedServerWithoutAHandlerFailsClosed() throws {
        let context = try Context()
        let serverKeys = try CurveKeyPair.generate()
        let server = try curveServer(context, keyPair: serverKeys, domain: "clients")
        let client = try curveClient(context, keyPair: try CurveKeyPair.generate(), server: serverKeys, endpoint: server.endpoint)
        XCTAssertNil(try attempt(from: client, to: server.socket, handler: nil, timeout: .milliseconds(300)).frames)
    }

    func testAdminsGetInOnlyWhereTheDomainAdmitsThem() throws {
        let context = try Context()
        let serverKeys = try CurveKeyPair.generate()
        let admin = try CurveKeyPair.generate()
        let user = try CurveKeyPair.generate()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(
            domains: [
                "clients": .init(curveKeys: .fixed([user.publicKey]), admitsAdmins: true),
                "workers": .init(curveKeys: .none),
            ],
            admins: .fixed([admin.publicKey])))
        let clients = try curveServer(context, keyPair: serverKeys, domain: "clients")
        let workers = try curveServer(context, keyPair: serverKeys, domain: "workers")

        let asClient = try curveClient(context, keyPair: admin, server: serverKeys, endpoint: clients.endpoint)
        let adminID = try XCTUnwrap(try attempt(from: asClient, to: clients.socket, handler: handler).frames?.userID)
        XCTAssertTrue(handler.isAdmin(userID: adminID))
        XCTAssertFalse(handler.isAdmin(userID: AccessPolicy.userID(for: user.publicKey)))
        XCTAssertFalse(handler.isAdmin(userID: "local"))
        XCTAssertFalse(handler.isAdmin(userID: "curve:" + admin.publicKey.z85.dropLast()))

        let asWorker = try curveClient(context, keyPair: admin, server: serverKeys, endpoint: workers.endpoint)
        XCTAssertNil(try attempt(from: asWorker, to: workers.socket, handler: handler, timeout: .milliseconds(300)).frames)
    }

    func testPlainAndMalformedRequestsGetA400() throws {
        let context = try Context()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: ["local": .init(nullUserID: "local")]))
        // Speak ZAP directly, as libzmq would: an empty delimiter, then the request.
        let asker = try Socket(context, .dealer)
        try asker.connect(ZAPHandler.endpoint)
        var poller = Poller()
        poller.register(asker)

        var ready = Poller()
        ready.register(handler)

        func ask(_ frames: [String]) throws -> [String] {
            try asker.send(multipart: [Message()] + frames.map { Message($0) })
            XCTAssertEqual(try ready.poll(timeout: .seconds(5)), 1)
            XCTAssertEqual(try handler.serviceRequests().count, 1)
            XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 1)
            let reply = try asker.receiveMultipart()
            XCTAssertEqual(reply.first?.count, 0, "delimiter")
            return reply.dropFirst().map { String(decoding: $0.bytes, as: UTF8.self) }
        }

        XCTAssertEqual(try ask(["1.0", "1", "local", "", "", "NULL"]), ["1.0", "1", "200", "OK", "local", ""])
        XCTAssertEqual(try ask(["1.0", "2", "local", "10.0.0.1", "", "PLAIN", "admin", "secret"]).prefix(3), ["1.0", "2", "400"])
        XCTAssertEqual(try ask(["0.9", "3", "local", "", "", "NULL"]).prefix(3), ["1.0", "3", "400"])
        XCTAssertEqual(try ask(["1.0", "4", "local"]).prefix(3), ["1.0", "4", "400"])
        XCTAssertEqual(try ask(["1.0", "5", "local", "", "", "CURVE", "short"]).prefix(3), ["1.0", "5", "400"])
        XCTAssertEqual(try ask(["1.0", "6", "elsewhere", "", "", "NULL"]).prefix(3), ["1.0", "6", "400"])
    }

    func testOneHandlerPerContext() throws {
        let context = try Context()
        let first = try ZAPHandler(context: context, policy: AccessPolicy(domains: [:]))
        XCTAssertThrowsError(try ZAPHandler(context: context, policy: AccessPolicy(domains: [:]))) {
            XCTAssertEqual(($0 as? ZMQError)?.code, EADDRINUSE)
        }
        first.close()
        XCTAssertNoThrow(try ZAPHandler(context: context, policy: AccessPolicy(domains: [:])))
        XCTAssertNoThrow(try ZAPHandler(context: Context(), policy: AccessPolicy(domains: [:])), "another context has its own")
    }
}
