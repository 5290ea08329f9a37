import EnlargerProtocol
import Foundation
import Logging
import XCTest
import ZeroMQ

@testable import EnlargerBroker

/// The I/O loop over real `ipc://` sockets, with raw DEALER sockets playing client and worker.
final class BrokerServiceTests: XCTestCase {
    private var directory: URL!
    private var context: Context!

    override func setUpWithError() throws {
        context = try Context()
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("broker-tests-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private func startBroker(
        _ adjust: (inout BrokerService.Configuration) -> Void = { _ in }
    ) throws -> (BrokerService, BrokerThread) {
        var configuration = BrokerService.Configuration(
            clientsEndpoint: "ipc://\(directory.path)/clients.sock",
            workersEndpoint: "ipc://\(directory.path)/workers.sock")
        configuration.broker.heartbeatInterval = .milliseconds(100)
        configuration.shutdownGrace = .milliseconds(50)
        adjust(&configuration)
        var logger = Logger(label: "broker-test")
        logger.logLevel = .critical
        let service = try BrokerService(configuration: configuration, logger: logger)
        return (service, service.startInBackground())
    }

    private func dealer(_ endpoint: String, routingID: [UInt8]? = nil) throws -> Socket {
        let socket = try Socket(context, .dealer)
        if let routingID { try socket.set(.routingID(routingID)) }
        try socket.connect(endpoint)
        return socket
    }

    private func send(_ frames: OutgoingMessage<[UInt8]>, on socket: Socket) throws {
        try socket.send(multipart: frames.frames.map { Message($0) })
    }

    /// The next message on `socket`, failing the test after five seconds.
    private func receive(_ socket: Socket, file: StaticString = #filePath, line: UInt = #line) throws -> [Message] {
        var poller = Poller()
        poller.register(socket)
        guard try poller.poll(timeout: .seconds(5)) > 0 else {
            XCTFail("nothing received", file: file, line: line)
            throw ZMQError(code: EAGAIN, operation: "test receive")
        }
        return try socket.receiveMultipart()
    }

    private func clientEvent(_ socket: Socket) throws -> BrokerToClientMessage<Message> {
        try BrokerToClientMessage(frames: receive(socket))
    }

    /// The next worker command other than a heartbeat.
    private func workerCommand(_ socket: Socket) throws -> BrokerToWorkerMessage<Message> {
        while true {
            let command = try BrokerToWorkerMessage(frames: receive(socket))
            if case .heartbeat = command { continue }
            return command
        }
    }

    /// The terminal final result of `job`, `width` x `height`.
    private func finalResult(of job: Enlarger_V1_Job, width: UInt32, height: UInt32) -> Enlarger_V1_JobResult {
        .with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = .final
            $0.terminal = true
            $0.width = width
            $0.height = height
        }
    }

    /// Asks for status until `condition` holds (messages on different connections are not
    /// ordered with each other), failing after five seconds.
    @discardableResult
    private func waitUntil(
        _ client: Socket, file: StaticString = #filePath, line: UInt = #line,
        _ condition: (Enlarger_V1_StatusReply) -> Bool
    ) throws -> Enlarger_V1_StatusReply {
        let deadline = ContinuousClock.now + .seconds(5)
        while true {
            try send(ClientToBrokerMessage<[UInt8]>.statusRequest.encoded(), on: client)
            guard case .statusReply(let status) = try clientEvent(client) else {
                XCTFail("expected a status reply", file: file, line: line)
                return Enlarger_V1_StatusReply()
            }
            if condition(status) { return status }
            if ContinuousClock.now > deadline {
                XCTFail("condition not reached: \(status)", file: file, line: line)
                return status
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    func testRequestTravelsFromClientToWorkerAndBack() throws {
        let (service, thread) = try startBroker()
        let worker = try dealer(service.workersEndpoint)
        let client = try dealer(service.clientsEndpoint)
        let source = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }

        try send(WorkerToBrokerMessage<[UInt8]>.ready(.with { $0.capacity = 1; $0.workerName = "raw" }).encoded(), on: worker)
        try waitUntil(client) { $0.workers.count == 1 }

        let submit = Enlarger_V1_Submit.with {
            $0.requestID = "photo-1"
            $0.spec.width = 64
        }
        try send(ClientToBrokerMessage.submit(submit, image: source).encoded(), on: client)
        guard case .accepted(let accepted) = try clientEvent(client) else { return XCTFail("not accepted") }
        XCTAssertEqual(accepted.requestID, "photo-1")

        guard case .job(let job, let image) = try workerCommand(worker) else { return XCTFail("no job") }
        XCTAssertEqual(job.requestID, "photo-1")
        XCTAssertEqual(image.bytes, source, "the image crosses the broker intact")

        for (stage, terminal) in [(Enlarger_V1_Stage.degraded, false), (.final, true)] {
            let result = Enlarger_V1_JobResult.with {
                $0.jobID = job.jobID
                $0.attempt = job.attempt
                $0.stage = stage
                $0.width = 64
                $0.height = 48
                $0.terminal = terminal
            }
            try send(WorkerToBrokerMessage.jobResult(result, image: [UInt8](repeating: terminal ? 2 : 1, count: 5000)).encoded(), on: worker)
        }
        guard case .result(let degraded, let preview) = try clientEvent(client),
              case .result(let final, let output) = try clientEvent(client)
        else { return XCTFail("results missing") }
        XCTAssertEqual([degraded.stage, final.stage], [.degraded, .final])
        XCTAssertEqual([degraded.terminal, final.terminal], [false, true])
        XCTAssertEqual(preview.bytes, [UInt8](repeating: 1, count: 5000))
        XCTAssertEqual(output.bytes, [UInt8](repeating: 2, count: 5000))

        // Garbage gets an error, and the broker carries on.
        try client.send(multipart: [Message("not a tag"), Message([1, 2, 3])])
        guard case .error(let error) = try clientEvent(client) else { return XCTFail("no error reply") }
        XCTAssertEqual(error.code, .malformed)

        try send(ClientToBrokerMessage<[UInt8]>.statusRequest.encoded(), on: client)
        guard case .statusReply(let status) = try clientEvent(client) else { return XCTFail("no status") }
        XCTAssertEqual(status.workers.map(\.name), ["raw"])
        XCTAssertEqual(status.totals.finished, 1)
        XCTAssertEqual(status.totals.malformedDropped, 1)

        // On stop, live requests fail and workers are told to leave.
        try send(ClientToBrokerMessage.submit(submit, image: source).encoded(), on: client)
        guard case .accepted = try clientEvent(client), case .job = try workerCommand(worker) else {
            return XCTFail("second request not dispatched")
        }
        try thread.stopAndWait()
        guard case .failed(let failed) = try clientEvent(client) else { return XCTFail("no shutdown failure") }
        XCTAssertEqual(failed.code, .brokerShutdown)
        guard case .disconnect = try workerCommand(worker) else { return XCTFail("no disconnect") }
    }

    /// Large results for a client that does not read. libzmq bounds its pipe toward a client
    /// by a count of messages only (64 here): without more, it would take all 40 results
    /// out of the broker's sight. It takes no more than the pipe budget (one result of a
    /// megabyte); the next waits at the broker, counted, and the client's work is held back.
    /// Once the client reads, everything arrives, with the fillers (Pongs it did not ask
    /// for) between.
    func testLargeResultsPastThePipeBudgetWaitCountedAtTheBroker() throws {
        let megabyte = 1 << 20
        let (service, thread) = try startBroker { $0.clientPipeBytes = 2 * megabyte }
        defer { XCTAssertNoThrow(try thread.stopAndWait()) }
        let worker = try dealer(service.workersEndpoint)
        try send(WorkerToBrokerMessage<[UInt8]>.ready(.with { $0.capacity = 1 }).encoded(), on: worker)
        let observer = try dealer(service.clientsEndpoint)
        try waitUntil(observer) { $0.workers.count == 1 }
        let slow = try Socket(context, .dealer)
        try slow.set(.receiveHighWaterMark(1))
        try slow.connect(service.clientsEndpoint)
        defer { slow.close() }
        let count = 40
        for index in 0..<count {
            try send(ClientToBrokerMessage.submit(.with {
                $0.requestID = "big-\(index)"
                $0.spec.width = 64
                $0.delivery = .final
            }, image: [0xFF, 0xD8]).encoded(), on: slow)
        }
        let output = [UInt8](repeating: 0xAB, count: megabyte)
        var answered = 0
        /// Answers the jobs that came, each with a result of a megabyte (and says it is alive).
        func work(waiting: Duration = .milliseconds(20)) throws {
            try send(WorkerToBrokerMessage<[UInt8]>.heartbeat.encoded(), on: worker)
            var poller = Poller()
            poller.register(worker)
            while try poller.poll(timeout: waiting) > 0 {
                guard case .job(let job, _) = try BrokerToWorkerMessage(frames: worker.receiveMultipart()) else { continue }
                try send(WorkerToBrokerMessage.jobResult(finalResult(of: job, width: 64, height: 64), image: output).encoded(),
                         on: worker)
                answered += 1
            }
        }
        // The client stays alive (a status request is a sign of life) and reads nothing.
        var status = Enlarger_V1_StatusReply()
        let deadline = ContinuousClock.now + .seconds(10)
        repeat {
            try send(ClientToBrokerMessage<[UInt8]>.statusRequest.encoded(), on: slow)
            try work()
            status = try waitUntil(observer) { _ in true }
        } while !(status.clientBytesWaiting > 0 && status.workers.first?.inFlight == 0) && ContinuousClock.now < deadline
        XCTAssertGreaterThan(status.clientBytesWaiting, 0, "nothing waits at the broker: libzmq took it all")
        XCTAssertEqual(status.workers.first?.inFlight, 0, "its work is held back")
        // libzmq took the first result (the budget's worth); the second waited and held the
        // client's work back; the third had been given to the worker as the second's
        // request ended, before the broker knew.
        XCTAssertLessThanOrEqual(answered, 3, "libzmq took more than the budget before anything waited")

        // It reads again: every result arrives, and the fillers are Pongs.
        var finals = Set<String>(), pongs = 0
        let readDeadline = ContinuousClock.now + .seconds(20)
        var lastSign = ContinuousClock.now
        var frames: [Message] = []
        while finals.count < count, ContinuousClock.now < readDeadline {
            if try slow.receive(multipart: &frames, wait: false) {
                switch try BrokerToClientMessage(frames: frames) {
                case .result(let result, let image):
                    XCTAssertEqual(image.count, megabyte)
                    if result.terminal { finals.insert(result.requestID) }
                case .pong: pongs += 1
                case .accepted, .statusReply: break
                case let other: XCTFail("unexpected \(other)")
                }
            } else {
                try work(waiting: .milliseconds(1))
            }
            if ContinuousClock.now - lastSign > .milliseconds(50) {
                try send(ClientToBrokerMessage<[UInt8]>.statusRequest.encoded(), on: slow)
                lastSign = ContinuousClock.now
            }
        }

        XCTAssertEqual(finals.count, count)
        XCTAssertEqual(answered, count)
        XCTAssertGreaterThan(pongs, 0, "fillers moved the window")
    }

    /// A worker of capacity 1 registers, and a client (with `clientID`, or none of its own)
    /// submits one request, which the worker is given. Nil (after a failure) if it is not.
    private func submitOneWithOneWorker(_ service: BrokerService, clientID: [UInt8]? = nil) throws
        -> (worker: Socket, client: Socket, job: Enlarger_V1_Job)? {
        let worker = try dealer(service.workersEndpoint)
        try send(WorkerToBrokerMessage<[UInt8]>.ready(.with { $0.capacity = 1 }).encoded(), on: worker)
        try waitUntil(try dealer(service.clientsEndpoint)) { $0.workers.count == 1 }
        let client = try dealer(service.clientsEndpoint, routingID: clientID)
        let submit = Enlarger_V1_Submit.with {
            $0.requestID = "orphan"
            $0.spec.height = 10
            $0.delivery = .final
        }
        try send(ClientToBrokerMessage.submit(submit, image: [0xFF, 0xD8]).encoded(), on: client)
        guard case .accepted = try clientEvent(client), case .job(let job, _) = try workerCommand(worker) else {
            XCTFail("not dispatched")
            return nil
        }
        return (worker, client, job)
    }

    /// A client that names no routing id of its own gets one libzmq makes up for the
    /// connection, which no later connection can have: once the connection ends, its work is
    /// stopped at once and nothing is kept for it.
    func testAClientWithoutAnIDOfItsOwnIsGoneWithItsConnection() throws {
        let (service, thread) = try startBroker { $0.clientBacklogPatience = .seconds(30) }
        defer { XCTAssertNoThrow(try thread.stopAndWait()) }
        guard case let (worker, leaver, job)? = try submitOneWithOneWorker(service) else { return }
        let leftAt = ContinuousClock.now
        leaver.close()
        guard case .cancelJob(let cancel) = try workerCommand(worker) else { return XCTFail("the job was not cancelled") }
        XCTAssertEqual(cancel.jobID, job.jobID)
        XCTAssertLessThan(ContinuousClock.now - leftAt, .seconds(1), "well before the silence limit")
        // A result that crossed the cancel is dropped, not kept for nobody.
        try send(WorkerToBrokerMessage.jobResult(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = .final
            $0.terminal = true
        }, image: [1]).encoded(), on: worker)
        try send(WorkerToBrokerMessage<[UInt8]>.jobCancelled(.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
        }).encoded(), on: worker)
        let status = try waitUntil(try dealer(service.clientsEndpoint)) { $0.inFlight == 0 && $0.workers.first?.inFlight == 0 }
        XCTAssertEqual(status.totals.clientsVanished, 1)
        XCTAssertEqual(status.totals.finished, 0)
        XCTAssertEqual(status.clientBytesWaiting, 0)
        XCTAssertEqual(status.totals.clientSendsDeferred, 0)
    }

    /// A client with a routing id of its own may come back under it (a reset connection
    /// reconnects so): what comes for it waits, within the patience.
    func testDepartedClientIsCountedAndTheBrokerCarriesOn() throws {
        let (service, thread) = try startBroker { $0.clientBacklogPatience = .milliseconds(600) }
        defer { XCTAssertNoThrow(try thread.stopAndWait()) }
        guard case let (worker, leaver, job)? = try submitOneWithOneWorker(service, clientID: Array("leaver".utf8)) else { return }
        leaver.close()
        Thread.sleep(forTimeInterval: 0.2)  // let libzmq notice the closed connection

        let result = Enlarger_V1_JobResult.with {
            $0.jobID = job.jobID
            $0.attempt = job.attempt
            $0.stage = .final
            $0.terminal = true
        }
        try send(WorkerToBrokerMessage.jobResult(result, image: [1]).encoded(), on: worker)

        // The result waits for the client to come back (a reset connection reconnects under
        // the same routing id), then, past the broker's patience, is given up and counted.
        let waiting = try waitUntil(try dealer(service.clientsEndpoint)) { $0.clientBytesWaiting > 0 }
        XCTAssertEqual(waiting.totals.unroutable, 0)
        XCTAssertEqual(waiting.totals.clientSendsDeferred, 1)
        let status = try waitUntil(try dealer(service.clientsEndpoint)) { $0.totals.unroutable > 0 }
        XCTAssertEqual(status.totals.unroutable, 1)
        XCTAssertEqual(status.totals.finished, 1)
        XCTAssertEqual(status.clientBytesWaiting, 0)
    }

    /// A connection of another principal that takes a client's routing id (after the client's
    /// connection dropped) gets nothing of what waited for that client, over tcp with CURVE:
    /// its own replies only. The client's request ends; the broker carries on.
    func testARoutingIDTakenByAnotherPrincipalReceivesNothingOfTheOld() throws {
        let server = try CurveKeyPair.generate(), alice = try CurveKeyPair.generate(), mallory = try CurveKeyPair.generate()
        let (service, thread) = try startBroker {
            $0.clientsEndpoint = "tcp://127.0.0.1:*"
            $0.security = .init(serverKey: server, clientKeys: .fixed([alice.publicKey, mallory.publicKey]),
                                workerKeys: .none)
        }
        defer { XCTAssertNoThrow(try thread.stopAndWait()) }
        let worker = try dealer(service.workersEndpoint)
        try send(WorkerToBrokerMessage<[UInt8]>.ready(.with { $0.capacity = 1 }).encoded(), on: worker)
        let routingID = Array("the-same-routing-id".utf8)
        func client(_ keys: CurveKeyPair) throws -> Socket {
            let socket = try Socket(context, .dealer)
            try socket.setCurveClient(keys, serverKey: server.publicKey)
            try socket.set(.routingID(routingID))
            try socket.connect(service.clientsEndpoint)
            return socket
        }
        let first = try client(alice)
        try send(ClientToBrokerMessage.submit(.with {
            $0.requestID = "alices-photo"
            $0.spec.height = 10
            $0.delivery = .final
        }, image: [0xFF, 0xD8]).encoded(), on: first)
        guard case .accepted = try clientEvent(first), case .job(let job, _) = try workerCommand(worker) else {
            return XCTFail("not dispatched")
        }
        first.close()
        Thread.sleep(forTimeInterval: 0.3)  // the connection is gone at the broker
        let secret = [UInt8](repeating: 0x5A, count: 4096)
        var result = finalResult(of: job, width: 1, height: 1)
        result.contentType = "image/jpeg"
        try send(WorkerToBrokerMessage.jobResult(result, image: secret).encoded(), on: worker)
        Thread.sleep(forTimeInterval: 0.2)  // the result waits for Alice's routing id

        let thief = try client(mallory)
        for _ in 0..<3 {
            try send(ClientToBrokerMessage<[UInt8]>.ping.encoded(), on: thief)
            Thread.sleep(forTimeInterval: 0.1)
        }
        try send(ClientToBrokerMessage<[UInt8]>.statusRequest.encoded(), on: thief)
        // Everything the thief gets: pongs and its own status, nothing of Alice's.
        var received: [String] = []
        var poller = Poller()
        poller.register(thief)
        while try poller.poll(timeout: .milliseconds(500)) > 0 {
            let frames = try receive(thief)
            XCTAssertFalse(frames.contains { $0.bytes.count >= secret.count && Array($0.bytes.suffix(secret.count)) == secret },
                           "Alice's result reached another principal")
            let event = try BrokerToClientMessage(frames: frames)
            switch event {
            case .pong: received.append("pong")
            case .statusReply(let status):
                received.append("status")
                XCTAssertEqual(status.totals.submitted, 0, "Alice's counts are not the thief's")
            default: received.append("\(event)")
            }
        }
        XCTAssertEqual(received.filter { $0 != "pong" }, ["status"], "\(received)")
        thief.close()
    }

    /// The tenants file's limits apply from the start, and a change is taken within about a
    /// second, without a restart; an unusable file stops the broker from starting.
    func testTheTenantsFileIsReadAtStartAndReloadedWhenItChanges() throws {
        let tenants = directory.appendingPathComponent("tenants")
        try "local queued=1\n".write(to: tenants, atomically: true, encoding: .utf8)
        try "local weight=0\n".write(to: directory.appendingPathComponent("bad"), atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try startBroker { $0.tenantsFile = self.directory.appendingPathComponent("bad").path }) { error in
            XCTAssert("\(error)".contains("line 1: weight must be 1 to 1000"), "\(error)")
        }
        let (service, thread) = try startBroker { $0.tenantsFile = tenants.path }
        defer { try? thread.stopAndWait() }
        let client = try dealer(service.clientsEndpoint)
        defer { client.close() }
        func submit(_ id: String) throws -> BrokerToClientMessage<Message> {
            try send(ClientToBrokerMessage.submit(.with {
                $0.requestID = id
                $0.spec.width = 16
            }, image: [0xFF, 0xD8, 0xFF]).encoded(), on: client)
            return try clientEvent(client)
        }
        // No worker: the first waits, the second is over the limit.
        guard case .accepted = try submit("one") else { return XCTFail("the first request should be accepted") }
        guard case .rejected(let rejected) = try submit("two") else { return XCTFail("the second should be refused") }
        XCTAssertEqual(rejected.code, .overloaded)
        XCTAssertGreaterThan(rejected.retryAfterMs, 0)
        try "local queued=5\n".write(to: tenants, atomically: true, encoding: .utf8)
        let deadline = ContinuousClock.now + .seconds(3)
        var attempt = 0
        while true {
            attempt += 1
            let event = try submit("again-\(attempt)")
            if case .accepted = event { break }
            guard ContinuousClock.now < deadline else { return XCTFail("the raised limit was not taken: \(event)") }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    func testStopReturnsPromptlyWhenIdle() throws {
        let (_, thread) = try startBroker()
        let started = ContinuousClock.now
        try thread.stopAndWait()
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(1))
        try thread.stopAndWait()
    }
}
