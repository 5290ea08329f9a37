import XCTest

@testable import ZeroMQ
import TestSupport

final class SocketAuthOptionsTests: XCTestCase {
    func testRouterHandoverGivesARoutingIDToItsNewestConnection() throws {
        let endpoints = try TemporaryEndpoints(self)
        let context = try Context()
        let router = try Socket(context, .router)
        try router.set(.routerHandover(true))
        try router.set(.routerMandatory(true))
        try router.bind(endpoints.ipc("handover"))
        var poller = Poller()
        poller.register(router)

        let old = try Socket(context, .dealer)
        try old.set(.routingID(Array("client-1".utf8)))
        try old.connect(endpoints.ipc("handover"))
        try old.send(Array("from old".utf8))
        XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 1)
        XCTAssertEqual(try router.receiveMultipart().map(\.bytes), [Array("client-1".utf8), Array("from old".utf8)])

        let new = try Socket(context, .dealer)
        try new.set(.routingID(Array("client-1".utf8)))
        try new.connect(endpoints.ipc("handover"))
        try new.send(Array("from new".utf8))
        XCTAssertEqual(try poller.poll(timeout: .seconds(5)), 1)
        XCTAssertEqual(try router.receiveMultipart().map(\.bytes), [Array("client-1".utf8), Array("from new".utf8)],
                       "without handover the second connection would be refused")

        try router.send(Array("client-1".utf8), .more)
        try router.send(Array("reply".utf8))
        var newPoller = Poller()
        newPoller.register(new)
        XCTAssertEqual(try newPoller.poll(timeout: .seconds(5)), 1)
        XCTAssertEqual(try new.receive()?.bytes, Array("reply".utf8))
        XCTAssertNil(try old.receive(wait: false))
    }

    func testClientRefusesAServerWithTheWrongKey() throws {
        let context = try Context()
        let realServer = try CurveKeyPair.generate()
        let impostor = try CurveKeyPair.generate()
        let clientKeys = try CurveKeyPair.generate()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: [
            "clients": .init(curveKeys: .fixed([clientKeys.publicKey])),
        ]))
        let server = try Socket(context, .router)
        try server.setCurveServer(impostor, zapDomain: "clients")
        try server.bind("tcp://127.0.0.1:*")
        let client = try Socket(context, .dealer)
        try client.setCurveClient(clientKeys, serverKey: realServer.publicKey)
        try client.connect(try server.lastEndpoint())
        try client.send(Array("secret".utf8))

        var poller = Poller()
        let serverIndex = poller.register(server)
        let zapIndex = poller.register(handler)
        let deadline = ContinuousClock.now + .milliseconds(300)
        var events: [ZAPEvent] = []
        while case let remaining = deadline - .now, remaining > .zero {
            _ = try poller.poll(timeout: remaining)
            if poller.events(at: zapIndex).contains(.readable) { events += try handler.serviceRequests() }
            XCTAssertFalse(poller.events(at: serverIndex).contains(.readable), "the message reached the wrong server")
            if poller.events(at: serverIndex).contains(.readable) { break }
        }
        // The client's first handshake message is sealed for the real server, so the impostor
        // cannot even read the client's key: ZAP is never asked.
        XCTAssertEqual(events, [])
    }
}
