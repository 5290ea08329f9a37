import Enlarger
import EnlargerBroker
import EnlargerProtocol
import Foundation
import ImageModel
import Imaging
import TestSupport
import XCTest
import ZeroMQ

/// Every accepted request ends, and the client always knows why, over real sockets: a
/// broker with a short heartbeat, connection resets, a paused broker, oversize input,
/// deadlines and a client that stops reading.
final class NetworkPromisesTests: XCTestCase {
    private let box = ResizeOptions(width: 320)

    /// Waits for the request's last event or error; fails the test if it takes too long.
    private static func outcome(of events: RequestEvents, within limit: Duration = .seconds(30)) async throws -> String {
        try await withThrowingTaskGroup(of: String.self) { group in
            group.addTask {
                do {
                    var last = "ended silently"
                    for try await event in events {
                        if case .final = event { last = "final" }
                    }
                    return last
                } catch {
                    return "\(error)"
                }
            }
            group.addTask {
                try await Task.sleep(for: limit)
                throw ClusterError("request \(events.id) did not end within \(limit)")
            }
            let first = try await group.next()!
            group.cancelAll()
            return first
        }
    }

    /// The broker beats every 50 ms, so it judges a client silent after 150 ms; the client's
    /// own interval is 1 s. The client adopts the broker's interval from Accepted, so a
    /// request that lives much longer than 150 ms (here it waits 600 ms for a worker to
    /// register) still completes.
    func testAClientAdoptsABrokersShorterHeartbeat() async throws {
        let cluster = try Cluster(self, heartbeat: .milliseconds(50))
        let client = try cluster.client(configuration: .init(heartbeatInterval: .seconds(1), missedHeartbeats: 3))
        let photo = try Corpus.good("exifsamples_DSCN0010.jpg")
        let events = client.submit(ResizeRequest(image: photo, options: ResizeOptions(width: 200), delivery: .final))
        try await Task.sleep(for: .milliseconds(600))
        try cluster.startThreadWorkers(1, concurrency: 1)
        let result = try await Self.outcome(of: events)
        XCTAssertEqual(result, "final")
        let status = try await client.status()
        XCTAssertEqual(status.totals.clientsVanished, 0)
        await client.close()
    }

    /// Connections between the client and the broker are reset (RST) while requests are in
    /// flight. libzmq reconnects under the client's stable routing id; whatever the broker
    /// kept for the client is delivered, and a request whose end was lost in the reset fails
    /// with `requestLost`: every request ends, none hangs.
    func testConnectionResetsMidRequestLoseNothingSilently() async throws {
        // The broker's silence limit (1.5 s) is longer than a reconnection takes (libzmq
        // retries every 100 ms), as in any sane deployment.
        // Over CURVE, as tcp always is: every reconnection goes through the handshake again.
        let serverKey = try CurveKeyPair.generate(), clientKey = try CurveKeyPair.generate()
        let cluster = try Cluster(self, heartbeat: .milliseconds(500), tcp: true) {
            // An admin key, so that it sees the workers register.
            $0.security = .init(serverKey: serverKey, clientKeys: .fixed([clientKey.publicKey]), workerKeys: .none,
                                adminKeys: .fixed([clientKey.publicKey]))
        }
        try cluster.startThreadWorkers(2, concurrency: 2)
        let brokerPort = UInt16(cluster.clientsEndpoint.split(separator: ":").last!)!
        let proxy = try ResettingProxy(targetPort: brokerPort)
        defer { proxy.stop() }
        var configuration = EnlargerClient.Configuration(
            heartbeatInterval: .milliseconds(100), missedHeartbeats: 30, syncInterval: .milliseconds(200))
        configuration.curve = CurveClientCredentials(keyPair: clientKey, serverKey: serverKey.publicKey)
        let client = try cluster.client(endpoint: "tcp://127.0.0.1:\(proxy.port)", configuration: configuration)
        try await cluster.waitForWorkers(2, client: client)
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let outcomes = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<24 {
                let events = client.submit(ResizeRequest(id: "reset-\(index)", image: photo, options: box))
                group.addTask { try await Self.outcome(of: events) }
            }
            group.addTask {
                var resets = 0
                for _ in 0..<4 {
                    try await Task.sleep(for: .milliseconds(150))
                    resets += proxy.resetAll()
                }
                return "resets \(resets)"
            }
            var all: [String] = []
            for try await outcome in group { all.append(outcome) }
            return all
        }
        let resets = outcomes.first { $0.hasPrefix("resets") }!
        let requests = outcomes.filter { !$0.hasPrefix("resets") }
        XCTAssertNotEqual(resets, "resets 0", "the proxy reset live connections")
        XCTAssertEqual(requests.count, 24)
        for outcome in requests {
            XCTAssertTrue(outcome == "final" || outcome.contains("requestLost"), "unexpected end: \(outcome)")
        }
        XCTAssertGreaterThan(requests.filter { $0 == "final" }.count, 0)
        // The client keeps working after the resets. The last reset may still be taking its
        // toll when the group returns (under load a reset is noticed late, and a Submit sent
        // into the dying connection is lost like any other): such a request fails
        // requestLost, and the next one must get through.
        var again: [String] = []
        while again.last != "final" && again.count < 3 {
            again.append(try await Self.outcome(of: client.submit(ResizeRequest(image: photo, options: box))))
        }
        XCTAssertEqual(again.last, "final", "\(again)")
        for outcome in again.dropLast() { XCTAssert(outcome.contains("requestLost"), "unexpected end: \(outcome)") }
        await client.close()
    }

    /// The broker process is stopped (SIGSTOP) for 2 s, more than ten of its heartbeat
    /// intervals, while a client's requests are queued and running. When it resumes it
    /// reads what waited before it judges anyone, and every request still ends with its
    /// result.
    func testAPausedBrokerStillEndsEveryRequest() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-pause-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let clients = "ipc://\(directory.path)/clients.sock", workers = "ipc://\(directory.path)/workers.sock"
        let broker = Process()
        broker.executableURL = Cluster.enlargerBinary
        broker.arguments = ["broker", "--clients", clients, "--workers", workers, "--heartbeat-ms", "150"]
        broker.standardError = FileHandle.nullDevice
        try broker.run()
        defer {
            kill(broker.processIdentifier, SIGCONT)
            broker.terminate()
            broker.waitUntilExit()
        }
        let worker = Process()
        worker.executableURL = Cluster.enlargerBinary
        worker.arguments = ["worker", "--broker", workers, "--concurrency", "2", "--heartbeat-ms", "150"]
        worker.standardError = FileHandle.nullDevice
        try worker.run()
        defer {
            worker.terminate()
            worker.waitUntilExit()
        }
        let client = try EnlargerClient(
            brokerEndpoint: clients, configuration: .init(heartbeatInterval: .milliseconds(150), missedHeartbeats: 40))
        var registered = try await client.status()
        while registered.workers.isEmpty {
            try await Task.sleep(for: .milliseconds(20))
            registered = try await client.status()
        }
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let outcomes = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<20 {
                let events = client.submit(ResizeRequest(id: "paused-\(index)", image: photo, options: box))
                group.addTask { try await Self.outcome(of: events, within: .seconds(60)) }
            }
            try await Task.sleep(for: .milliseconds(100))
            kill(broker.processIdentifier, SIGSTOP)
            try await Task.sleep(for: .seconds(2))
            kill(broker.processIdentifier, SIGCONT)
            var all: [String] = []
            for try await outcome in group { all.append(outcome) }
            return all
        }
        XCTAssertEqual(outcomes, Array(repeating: "final", count: 20))
        let status = try await client.status()
        XCTAssertEqual(status.totals.clientsVanished, 0, "the pause was not blamed on the client")
        XCTAssertEqual(status.totals.finished, 20)
        await client.close()
    }

    /// Input over the broker's limit is refused before it is sent by the client library,
    /// answered `Rejected{TOO_LARGE}` by the broker when sent anyway, and a frame beyond
    /// the socket's hard ceiling costs the connection but not the client's other request.
    func testOversizeInputIsRefusedAndNeverCostsOtherRequests() async throws {
        let cluster = try Cluster(self, heartbeat: .milliseconds(100)) {
            $0.broker.maxInputBytes = 1 << 20
            $0.maxClientFrameBytes = 2 << 20
        }
        try cluster.startThreadWorkers(1, concurrency: 1)
        let big = [UInt8](repeating: 0xFF, count: (1 << 20) + 10)

        // The library refuses it locally.
        let careful = try cluster.client(configuration: .init(heartbeatInterval: .milliseconds(100), maxInputBytes: 1 << 20))
        try await cluster.waitForWorkers(1, client: careful)
        let refused = try await Self.outcome(of: careful.submit(ResizeRequest(image: big, options: box)))
        XCTAssertTrue(refused.contains("rejected(Enlarger.EnlargerClientError.Code.tooLarge"), refused)
        let afterRefusal = try await careful.status()
        XCTAssertEqual(afterRefusal.totals.submitted, 0, "nothing was sent")

        // A raw client over the limit but under the ceiling gets Rejected{TOO_LARGE}.
        let context = try Context()
        let raw = try Socket(context, .dealer)
        try raw.set(.routingID(Array("raw-client-1".utf8)))
        try raw.connect(cluster.clientsEndpoint)
        defer { raw.close() }
        func submit(_ id: String, _ image: [UInt8], delivery: Enlarger_V1_Delivery = .final) throws {
            let message = ClientToBrokerMessage.submit(.with {
                $0.requestID = id
                $0.spec.width = 64
                $0.delivery = delivery
            }, image: Message(image))
            XCTAssertTrue(try raw.send(message.encoded()))
        }
        func next() throws -> BrokerToClientMessage<Message> {
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline {
                if let frames = try raw.receiveFrames() { return try BrokerToClientMessage(frames: frames) }
                usleep(2000)
            }
            throw ClusterError("nothing from the broker")
        }
        try submit("over-limit", big)
        guard case .rejected(let rejected) = try next() else { return XCTFail("not rejected") }
        XCTAssertEqual(rejected.code, .tooLarge)

        // Beyond the ceiling: libzmq drops the connection, the DEALER reconnects under the same
        // routing id, and the live request submitted before still gets its result.
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        try submit("survivor", photo)
        guard case .accepted = try next() else { return XCTFail("survivor not accepted") }
        try submit("huge", [UInt8](repeating: 0xD8, count: 3 << 20))
        // Keep talking, so the broker knows the client is alive (a dropped Ping is harmless).
        let deadline = ContinuousClock.now + .seconds(20)
        var events: [String] = []
        while !(events.contains("result survivor") && events.contains("huge unknown")), ContinuousClock.now < deadline {
            _ = try raw.send(ClientToBrokerMessage<Message>.sync(.with { $0.requestIds = ["survivor", "huge"]; $0.nonce = 1 }).encoded())
            let message = try next()
            switch message {
            case .result(let result, _) where result.terminal:
                events.append("result \(result.requestID)")
            case .syncReply(let reply) where reply.unknownRequestIds.contains("huge"):
                if !events.contains("huge unknown") { events.append("huge unknown") }
            default:
                break
            }
            usleep(50_000)
        }
        XCTAssertTrue(events.contains("result survivor"), "\(events)")
        XCTAssertTrue(events.contains("huge unknown"), "the dropped Submit shows up as unknown: \(events)")
        await careful.close()
    }

    /// A request with a timeout ends by its deadline with a clear code, even with no worker.
    func testARequestEndsAtItsDeadline() async throws {
        let cluster = try Cluster(self, heartbeat: .milliseconds(100))
        let client = try cluster.client()
        let start = ContinuousClock.now
        let request = ResizeRequest(image: try Corpus.good("ljt_testorig.jpg"), options: box, timeout: .milliseconds(400))
        let end = try await Self.outcome(of: client.submit(request))
        XCTAssertTrue(end.contains("deadlineExceeded"), end)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2))
        let status = try await client.status()
        XCTAssertEqual(status.totals.deadlinesExceeded, 1)
        await client.close()
    }

    /// A client that submits and then stops reading: what it has not taken waits at the
    /// broker, counted, and its remaining work is held back instead of filling memory; when
    /// it reads again, everything arrives.
    func testAClientThatStopsReadingGetsBackpressure() async throws {
        let cluster = try Cluster(self, heartbeat: .milliseconds(100)) { $0.clientSendHighWaterMark = 2 }
        try cluster.startThreadWorkers(1, concurrency: 2)
        let observer = try cluster.client()
        try await cluster.waitForWorkers(1, client: observer)
        let context = try Context()
        let slow = try Socket(context, .dealer)
        try slow.set(.receiveHighWaterMark(1))
        try slow.set(.routingID(Array("slow-reader".utf8)))
        try slow.connect(cluster.clientsEndpoint)
        defer { slow.close() }
        let photo = try Corpus.good("sharp_2569067123_aca715a2ee_o.jpg")
        let count = 30
        for index in 0..<count {
            // PNM output at full size: 17 MB per result, too much to sit in socket buffers.
            let message = ClientToBrokerMessage.submit(.with {
                $0.requestID = "slow-\(index)"
                $0.spec.width = 2725
                $0.spec.format = .pnm
                $0.delivery = .final
            }, image: Message(photo))
            XCTAssertTrue(try slow.send(message.encoded()))
        }
        // Stay alive without reading anything.
        var status = try await observer.status()
        let deadline = ContinuousClock.now + .seconds(30)
        while status.clientBytesWaiting == 0 || status.workers.first?.inFlight != 0, ContinuousClock.now < deadline {
            _ = try slow.send(ClientToBrokerMessage<Message>.ping.encoded())
            try await Task.sleep(for: .milliseconds(50))
            status = try await observer.status()
        }
        XCTAssertGreaterThan(status.clientBytesWaiting, 0)
        XCTAssertEqual(status.workers.first?.inFlight, 0, "its work is held back, not run")
        XCTAssertLessThan(status.totals.finished, UInt64(count), "not everything was computed ahead of the reader")
        XCTAssertGreaterThan(status.queueDepth, 0)
        XCTAssertLessThan(status.clientBytesWaiting, 64 << 20, "what waits stays bounded")

        // It reads again: every request arrives.
        var finals = 0
        let readDeadline = ContinuousClock.now + .seconds(60)
        while finals < count, ContinuousClock.now < readDeadline {
            if let frames = try slow.receiveFrames() {
                if case .result(let result, _) = try BrokerToClientMessage(frames: frames), result.terminal { finals += 1 }
            } else {
                _ = try slow.send(ClientToBrokerMessage<Message>.ping.encoded())
                usleep(5000)
            }
        }
        XCTAssertEqual(finals, count)
        await observer.close()
    }
}
