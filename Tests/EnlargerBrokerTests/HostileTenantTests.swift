import EnlargerProtocol
import Foundation
import Logging
import TestSupport
import XCTest
import ZeroMQ

@testable import EnlargerBroker

/// Many producers share one broker, over tcp with CURVE, and one of them is hostile with a
/// valid key. Seeded random runs: two honest principals submit (with and without digests),
/// cancel, lose their connections and come back under the same routing id, and read; the
/// hostile one takes their routing ids whenever it can, sends their digests with junk,
/// replays their captured Submits, cancels and syncs their ids, probes Status, and has its
/// key revoked late in the run; a second worker key tries to answer another worker's jobs
/// under its routing id. Results and caching are shared across principals (the operator's
/// most open setting); the fake workers echo each image as its result, so every byte of an
/// honest result is marked with its owner.
///
/// Checked on every frame: the hostile principal never receives another principal's bytes
/// (beyond what it sent itself), ids or counts; no forged result reaches anyone; every honest
/// request gets its own bytes and ends exactly once — by a terminal event, or (after its
/// connection was lost and its id taken) by its id being reported unknown by Sync — and
/// nothing follows its end.
///
/// Replay with `ENLARGER_SEED=<seed>`; `ENLARGER_HOSTILE_SEEDS=N` runs more seeds.
final class HostileTenantTests: XCTestCase {
    private var context: Context!
    private var directory: URL!

    override func setUpWithError() throws {
        context = try Context()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("hostile-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    struct Figures {
        var seeds = 0, honestRequests = 0, hostileActions = 0, takeovers = 0, takeoversRefused = 0, resets = 0
        var digestGuesses = 0, replays = 0, foreignCancels = 0, probes = 0, forgeries = 0, leaks = 0, lostBySync = 0
    }

    func testAHostileTenantLearnsNothingOfOthersAndHonestRequestsEndOnce() throws {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64] = environment["ENLARGER_SEED"].flatMap(UInt64.init).map { [$0] }
            ?? Array(1...UInt64(environment["ENLARGER_HOSTILE_SEEDS"].flatMap(Int.init) ?? 3))
        var figures = Figures()
        for seed in seeds {
            try run(seed: seed, figures: &figures)
            figures.seeds += 1
        }
        print("hostile tenant: \(figures.seeds) seeds, \(figures.honestRequests) honest requests, \(figures.hostileActions) "
              + "hostile actions (\(figures.takeovers) routing-id takeovers, \(figures.takeoversRefused) refused while the "
              + "owner was connected, \(figures.digestGuesses) digest guesses, \(figures.replays) replays, "
              + "\(figures.foreignCancels) foreign cancels and syncs, \(figures.probes) status probes), \(figures.resets) "
              + "honest connection resets, \(figures.forgeries) forged worker results, \(figures.lostBySync) requests ended "
              + "by Sync after a takeover, leaks found: \(figures.leaks)")
        XCTAssertEqual(figures.leaks, 0)
        XCTAssertGreaterThan(figures.takeovers, 0, "the hostile tenant got to take over routing ids")
    }

    // MARK: - The world

    /// An opaque 32-byte digest both the clients and the fake workers compute.
    static func digest(_ bytes: [UInt8]) -> Data {
        var out = Data()
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for round in 0..<4 {
            hash ^= UInt64(round)
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            withUnsafeBytes(of: hash.littleEndian) { out.append(contentsOf: $0) }
        }
        return out
    }

    final class Honest {
        let name: String
        let keys: CurveKeyPair
        let routingID: [UInt8]
        var socket: Socket?
        /// Accepted submissions not yet known to have ended, id → image.
        var live: [String: [UInt8]] = [:]
        var pending: [String: [UInt8]] = [:]  // sent, not yet accepted or rejected
        var ended: Set<String> = []
        var lostBySync: Set<String> = []
        var submitted: [(id: String, header: [UInt8], image: [UInt8], digest: Data?)] = []
        var next = 0

        init(name: String, keys: CurveKeyPair, routingID: [UInt8]) {
            self.name = name
            self.keys = keys
            self.routingID = routingID
        }
    }

    private func run(seed: UInt64, figures: inout Figures) throws {
        var random = SeededGenerator(seed: seed)
        func problem(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
            figures.leaks += 1
            XCTFail("seed \(seed) (replay with ENLARGER_SEED=\(seed)): \(text)", file: file, line: line)
        }
        let server = try CurveKeyPair.generate()
        let honest = [
            Honest(name: "h1", keys: try CurveKeyPair.generate(), routingID: (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }),
            Honest(name: "h2", keys: try CurveKeyPair.generate(), routingID: (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }),
        ]
        let mallory = try CurveKeyPair.generate()
        let workerKeys = [try CurveKeyPair.generate(), try CurveKeyPair.generate()]
        let clientsDirectory = directory.appendingPathComponent("clients-\(seed)")
        try FileManager.default.createDirectory(at: clientsDirectory, withIntermediateDirectories: true)
        for (name, key) in [("h1", honest[0].keys), ("h2", honest[1].keys), ("mallory", mallory)] {
            try key.publicKey.writePublicKeyFile(to: clientsDirectory.appendingPathComponent("\(name).pub").path)
        }
        var configuration = BrokerService.Configuration(clientsEndpoint: "tcp://127.0.0.1:*", workersEndpoint: "tcp://127.0.0.1:*")
        configuration.broker.heartbeatInterval = .milliseconds(500)
        configuration.broker.shareAcrossPrincipals = true
        configuration.shutdownGrace = .milliseconds(20)
        configuration.clientBacklogPatience = .seconds(3)
        configuration.security = .init(serverKey: server, clientKeys: .directory(clientsDirectory.path),
                                       workerKeys: .fixed(Set(workerKeys.map(\.publicKey))))
        var logger = Logger(label: "hostile")
        logger.logLevel = .critical
        let service = try BrokerService(configuration: configuration, logger: logger)
        let thread = service.startInBackground()
        defer { XCTAssertNoThrow(try thread.stopAndWait()) }

        func connect(_ keys: CurveKeyPair, _ endpoint: String, routingID: [UInt8]? = nil) throws -> Socket {
            let socket = try Socket(context, .dealer)
            try socket.setCurveClient(keys, serverKey: server.publicKey)
            if let routingID { try socket.set(.routingID(routingID)) }
            try socket.connect(endpoint)
            return socket
        }
        func send(_ socket: Socket, _ frames: [[UInt8]]) throws {
            _ = try socket.send(multipart: frames.map { Message($0) }, .dontWait)
        }

        // Two workers: each of its own key. The second also plays rogue: now and then it
        // reconnects under the first one's routing id and forges a result for its job.
        let workerIDs = [Array("worker-one".utf8), Array("worker-two".utf8)]
        var workers = try (0..<2).map { try connect(workerKeys[$0], service.workersEndpoint, routingID: workerIDs[$0]) }
        for worker in workers {
            try send(worker, WorkerToBrokerMessage<[UInt8]>.ready(.with { $0.capacity = 4; $0.workerName = "fake" }).encoded().frames)
        }
        var heldJobs: [(worker: Int, job: Enlarger_V1_Job, image: [UInt8])] = []
        var jobsOfWorkerOne: [Enlarger_V1_Job] = []

        for client in honest { client.socket = try connect(client.keys, service.clientsEndpoint, routingID: client.routingID) }
        var hostileSockets: [Socket] = [try connect(mallory, service.clientsEndpoint, routingID: Array("mallory-own".utf8))]
        var hostileIDs: Set<String> = []
        var hostileSubmits = 0
        var hostileBytesSent: [[UInt8]] = []  // what it may see come back: its own and replayed images
        var revokedAt: ContinuousClock.Instant?

        let forged = Array("FORGED-BY-A-ROGUE-WORKER".utf8)
        func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
            guard haystack.count >= needle.count, !needle.isEmpty else { return false }
            let first = needle[0]
            var index = 0
            while index <= haystack.count - needle.count {
                if haystack[index] == first && Array(haystack[index..<index + needle.count]) == needle { return true }
                index += 1
            }
            return false
        }

        // What each side receives, checked as it comes. Honest clients ping as a client
        // library does, so that their requests live through their connections' resets.
        var lastPing = ContinuousClock.now
        func pump(rounds: Int = 1) throws {
            for _ in 0..<rounds {
                if ContinuousClock.now - lastPing > .milliseconds(60) {
                    lastPing = .now
                    for client in honest {
                        if let socket = client.socket { try send(socket, ClientToBrokerMessage<[UInt8]>.ping.encoded().frames) }
                    }
                }
                var poller = Poller()
                for worker in workers { poller.register(worker) }
                for client in honest { if let socket = client.socket { poller.register(socket) } }
                for socket in hostileSockets { poller.register(socket) }
                _ = try poller.poll(timeout: .milliseconds(3))
                var frames: [Message] = []
                for (index, worker) in workers.enumerated() {
                    while try worker.receive(multipart: &frames, wait: false) {
                        guard case .job(let job, let image) = try? BrokerToWorkerMessage(frames: frames) else { continue }
                        heldJobs.append((index, job, image.bytes))
                        if index == 0 { jobsOfWorkerOne.append(job) }
                    }
                }
                for client in honest {
                    guard let socket = client.socket else { continue }
                    while try socket.receive(multipart: &frames, wait: false) {
                        try honestReceived(client, frames)
                    }
                }
                for socket in hostileSockets {
                    while try socket.receive(multipart: &frames, wait: false) {
                        hostileReceived(frames)
                    }
                }
                // The fake workers answer what they hold, a few at a time, in random order.
                for _ in 0..<min(heldJobs.count, Int.random(in: 0...3, using: &random)) {
                    let (index, job, image) = heldJobs.remove(at: Int.random(in: 0..<heldJobs.count, using: &random))
                    let claimed = job.source.inline.sha256
                    if !claimed.isEmpty && claimed != Self.digest(image) {
                        try send(workers[index], WorkerToBrokerMessage<[UInt8]>.jobFailed(.with {
                            $0.jobID = job.jobID
                            $0.attempt = job.attempt
                            $0.code = .digestMismatch
                            $0.message = "digest"
                        }).encoded().frames)
                        continue
                    }
                    try send(workers[index], WorkerToBrokerMessage.jobResult(.with {
                        $0.jobID = job.jobID
                        $0.attempt = job.attempt
                        $0.stage = .final
                        $0.terminal = true
                        $0.width = 1
                        $0.height = 1
                        $0.contentType = "image/jpeg"
                        $0.digestVerified = !claimed.isEmpty
                    }, image: image).encoded().frames)
                }
            }
        }

        func honestReceived(_ client: Honest, _ frames: [Message]) throws {
            let bytes = frames.flatMap(\.bytes)
            if contains(bytes, forged) { problem("\(client.name) received a forged result") }
            guard let event = try? BrokerToClientMessage(frames: frames) else { return problem("\(client.name): undecodable") }
            if let id = event.requestID, client.lostBySync.contains(id) {
                // A Submit that Sync reported unknown can still arrive later from the
                // connection it was sent on; the client library failed it REQUEST_LOST and
                // drops what comes about it. It is still the client's own.
                if case .result(_, let image) = event,
                   !client.submitted.contains(where: { $0.id == id && $0.image == image.bytes }) {
                    problem("\(client.name) got other bytes than its own for \(id)")
                }
                return
            }
            // An Accepted sent to a connection that then dropped is lost with it; the
            // request's later events come on the next connection, so they also end a
            // submission not yet known to be accepted.
            if let id = event.requestID, event.isTerminalForTest, let image = client.pending.removeValue(forKey: id) {
                client.live[id] = image
            }
            switch event {
            case .accepted(let accepted):
                guard let image = client.pending.removeValue(forKey: accepted.requestID) else {
                    return problem("\(client.name) accepted for an id it has not pending: \(accepted.requestID)")
                }
                client.live[accepted.requestID] = image
            case .result(let result, let image):
                guard result.terminal else { return }
                guard let mine = client.live.removeValue(forKey: result.requestID) else {
                    return problem("\(client.name) got a result for \(result.requestID), not live for it")
                }
                if image.bytes != mine { problem("\(client.name) got other bytes than its own for \(result.requestID)") }
                client.ended.insert(result.requestID)
            case .failed(let failed):
                if failed.code == .duplicateID { return }
                guard client.live.removeValue(forKey: failed.requestID) != nil else {
                    return problem("\(client.name) got Failed for \(failed.requestID), not live for it")
                }
                client.ended.insert(failed.requestID)
            case .cancelled(let cancelled):
                guard client.live.removeValue(forKey: cancelled.requestID) != nil else {
                    return problem("\(client.name) got Cancelled for \(cancelled.requestID), not live for it")
                }
                client.ended.insert(cancelled.requestID)
            case .rejected(let rejected):
                if client.pending.removeValue(forKey: rejected.requestID) == nil {
                    problem("\(client.name) got Rejected for \(rejected.requestID), never pending")
                }
            case .syncReply(let reply):
                // Its connection was lost and its id may have been taken: what the broker
                // no longer holds ended there, or never arrived (a Submit sent on a connection
                // that then closed); a client library fails them REQUEST_LOST. A Submit sent
                // on this connection before the Sync has arrived: the order is kept.
                for id in reply.unknownRequestIds
                where client.live.removeValue(forKey: id) != nil || client.pending.removeValue(forKey: id) != nil {
                    client.lostBySync.insert(id)
                    figures.lostBySync += 1
                }
            case .started, .cancelAck, .statusReply, .pong, .error, .batchEnded, .download:
                break
            }
        }

        func hostileReceived(_ frames: [Message]) {
            let bytes = frames.flatMap(\.bytes)
            if contains(bytes, forged) { problem("the hostile tenant received a forged result") }
            for client in honest {
                for submission in client.submitted
                where contains(bytes, submission.image) && !hostileBytesSent.contains(submission.image) {
                    problem("the hostile tenant received \(client.name)'s bytes (\(submission.id))")
                }
            }
            guard let event = try? BrokerToClientMessage(frames: frames) else { return }
            switch event {
            case .statusReply(let status):
                if !status.workers.isEmpty { problem("the hostile tenant sees workers") }
                if status.totals.submitted > UInt64(hostileSubmits) {
                    problem("the hostile tenant's status counts \(status.totals.submitted) submits; it made \(hostileSubmits)")
                }
                if status.cache.entries != 0 { problem("the hostile tenant sees the cache's occupancy") }
            case .syncReply, .pong, .error:
                break
            case .cancelAck(let ack):
                if !hostileIDs.contains(ack.requestID) && ack.outcome != .unknown {
                    problem("the hostile tenant learned of \(ack.requestID): \(ack.outcome)")
                }
            default:
                if let id = event.requestID, !id.isEmpty, !hostileIDs.contains(id) {
                    problem("the hostile tenant received an event about \(id), not one of its ids: \(event)")
                }
            }
        }

        func submitHonest(_ client: Honest) throws {
            guard let socket = client.socket else { return }
            client.next += 1
            let id = "\(client.name)-\(client.next)"
            // Most images are the request's own; some repeat (shared jobs, cache hits). Each
            // is marked with its owner.
            let variant = Bool.random(using: &random) && Bool.random(using: &random)
                ? "image-\(Int.random(in: 0..<3, using: &random))" : id
            let image = Array("SECRET:\(client.name):\(variant):".utf8)
                + (0..<48).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ variant.utf8.count &+ client.name.utf8.count) }
            let digest = Bool.random(using: &random) ? Self.digest(image) : nil
            let submit = Enlarger_V1_Submit.with {
                $0.requestID = id
                $0.spec.width = 16
                $0.delivery = .final
                if let digest { $0.source.inline.sha256 = digest }
            }
            let frames = ClientToBrokerMessage.submit(submit, image: image).encoded().frames
            client.submitted.append((id, frames[1], image, digest))
            client.pending[id] = image
            figures.honestRequests += 1
            try send(socket, frames)
        }

        func hostileSocket() -> Socket { hostileSockets.randomElement(using: &random)! }

        let steps = 220
        let revokeAt = Int.random(in: (steps * 3 / 4)..<steps, using: &random)
        for step in 0..<steps {
            if step == revokeAt {
                try FileManager.default.removeItem(at: clientsDirectory.appendingPathComponent("mallory.pub"))
                revokedAt = .now
            }
            let client = honest.randomElement(using: &random)!
            switch Int.random(in: 0..<20, using: &random) {
            case 0..<6:
                try submitHonest(client)
            case 6:
                if let id = client.live.keys.sorted().randomElement(using: &random), let socket = client.socket {
                    try send(socket, ClientToBrokerMessage<[UInt8]>.cancel(.with { $0.requestID = id }).encoded().frames)
                }
            case 7:
                // A reset: the connection drops; it comes back later under the same id.
                if let socket = client.socket {
                    socket.close()
                    client.socket = nil
                    figures.resets += 1
                } else {
                    client.socket = try connect(client.keys, service.clientsEndpoint, routingID: client.routingID)
                    try pump(rounds: 3)
                    try send(client.socket!, ClientToBrokerMessage<[UInt8]>.sync(.with {
                        $0.requestIds = client.live.keys.sorted() + client.pending.keys.sorted()
                        $0.nonce = UInt64(step)
                    }).encoded().frames)
                }
            case 8..<16:
                figures.hostileActions += 1
                switch Int.random(in: 0..<6, using: &random) {
                case 0:
                    // Takes the routing id: refused by the socket while its owner is connected.
                    let victim = honest.randomElement(using: &random)!
                    if victim.socket == nil { figures.takeovers += 1 } else { figures.takeoversRefused += 1 }
                    let thief = try connect(mallory, service.clientsEndpoint, routingID: victim.routingID)
                    hostileSockets.append(thief)
                    try pump(rounds: 2)
                    try send(thief, ClientToBrokerMessage<[UInt8]>.ping.encoded().frames)
                case 1:
                    // Another's digest, its own junk.
                    guard let target = client.submitted.filter({ $0.digest != nil }).randomElement(using: &random) else { break }
                    figures.digestGuesses += 1
                    hostileSubmits += 1
                    let id = "m-\(step)"
                    hostileIDs.insert(id)
                    let junk = Array("JUNK-\(step)".utf8)
                    hostileBytesSent.append(junk)
                    try send(hostileSocket(), ClientToBrokerMessage.submit(.with {
                        $0.requestID = id
                        $0.spec.width = 16
                        $0.delivery = .final
                        $0.source.inline.sha256 = target.digest!
                    }, image: junk).encoded().frames)
                case 2:
                    // A captured Submit sent again: its own request now, with bytes it holds.
                    guard let captured = client.submitted.randomElement(using: &random) else { break }
                    figures.replays += 1
                    hostileSubmits += 1
                    hostileIDs.insert(captured.id)
                    hostileBytesSent.append(captured.image)
                    try send(hostileSocket(), [ProtocolTag.client.bytes, captured.header, captured.image])
                case 3:
                    guard let id = client.live.keys.sorted().randomElement(using: &random) else { break }
                    figures.foreignCancels += 1
                    if !hostileIDs.contains(id) {
                        try send(hostileSocket(), ClientToBrokerMessage<[UInt8]>.cancel(.with { $0.requestID = id }).encoded().frames)
                    }
                case 4:
                    figures.foreignCancels += 1
                    try send(hostileSocket(), ClientToBrokerMessage<[UInt8]>.sync(.with {
                        $0.requestIds = Array(client.live.keys.sorted().filter { !hostileIDs.contains($0) }.prefix(8))
                        $0.nonce = 7
                    }).encoded().frames)
                default:
                    figures.probes += 1
                    try send(hostileSocket(), ClientToBrokerMessage<[UInt8]>.statusRequest.encoded().frames)
                }
            case 16:
                // The rogue worker reconnects under the first worker's routing id and forges.
                if let job = jobsOfWorkerOne.randomElement(using: &random) {
                    figures.forgeries += 1
                    workers[1].close()
                    workers[1] = try connect(workerKeys[1], service.workersEndpoint, routingID: workerIDs[0])
                    try pump(rounds: 2)
                    try send(workers[1], WorkerToBrokerMessage.jobResult(.with {
                        $0.jobID = job.jobID
                        $0.attempt = job.attempt
                        $0.stage = .final
                        $0.terminal = true
                        $0.width = 1
                        $0.height = 1
                        $0.contentType = "image/jpeg"
                    }, image: forged).encoded().frames)
                    try pump(rounds: 2)
                    // Back under its own id, registered again.
                    workers[1].close()
                    workers[1] = try connect(workerKeys[1], service.workersEndpoint, routingID: workerIDs[1])
                    try send(workers[1], WorkerToBrokerMessage<[UInt8]>.ready(.with { $0.capacity = 4 }).encoded().frames)
                }
            default:
                break
            }
            try pump()
        }

        // Everyone comes back and settles: every honest request ends once. The thieves leave
        // first; each honest client then connects afresh under its own id (as a client library
        // does after a reset) and asks with Sync what the broker still holds.
        for socket in hostileSockets { socket.close() }
        hostileSockets = []
        Thread.sleep(forTimeInterval: 0.3)
        for client in honest {
            try pump()
            client.socket?.close()
            client.socket = try connect(client.keys, service.clientsEndpoint, routingID: client.routingID)
        }
        hostileSockets = [try connect(mallory, service.clientsEndpoint, routingID: Array("mallory-late".utf8))]
        let deadline = ContinuousClock.now + .seconds(20)
        var syncs = 0
        while ContinuousClock.now < deadline, honest.contains(where: { !$0.live.isEmpty || !$0.pending.isEmpty }) {
            try pump(rounds: 20)
            syncs += 1
            if syncs % 5 == 0 {
                for client in honest {
                    try send(client.socket!, ClientToBrokerMessage<[UInt8]>.sync(.with {
                        $0.requestIds = client.live.keys.sorted() + client.pending.keys.sorted()
                        $0.nonce = UInt64(syncs)
                    }).encoded().frames)
                }
            }
        }
        for client in honest {
            if !client.live.isEmpty || !client.pending.isEmpty {
                problem("\(client.name) has requests that never ended: live \(client.live.keys.sorted()), "
                        + "pending \(client.pending.keys.sorted())")
            }
        }
        // The revoked key gets nothing taken any more.
        if let revokedAt, case let remaining = revokedAt + .milliseconds(1500) - .now, remaining > .zero {
            Thread.sleep(forTimeInterval: Double(remaining.components.seconds) + Double(remaining.components.attoseconds) * 1e-18)
        }
        let late = hostileSockets[0]
        hostileIDs.insert("after-revocation")
        try send(late, ClientToBrokerMessage.submit(.with {
            $0.requestID = "after-revocation"
            $0.spec.width = 16
        }, image: Array("late".utf8)).encoded().frames)
        var poller = Poller()
        poller.register(late)
        var frames: [Message] = []
        if try poller.poll(timeout: .milliseconds(500)) > 0, try late.receive(multipart: &frames, wait: false),
           case .accepted = try? BrokerToClientMessage(frames: frames) {
            problem("a revoked key's Submit was accepted")
        }
        for socket in hostileSockets { socket.close() }
        for client in honest { client.socket?.close() }
        for worker in workers { worker.close() }
    }
}

private extension BrokerToClientMessage {
    var isTerminalForTest: Bool {
        switch self {
        case .result(let result, _): result.terminal
        case .failed(let failed): failed.code != .duplicateID
        case .cancelled: true
        default: false
        }
    }
}
