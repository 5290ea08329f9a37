import EnlargerProtocol
import Foundation
import Logging
import Locking
import Synchronization
import EnlargerTransport
import Telemetry
import ZeroMQ

/// The broker process's I/O loop: two ROUTER sockets (clients, workers), one thread, and a
/// `BrokerCore` that makes every decision.
///
/// `run()` makes the calling thread the owner of both sockets and blocks until `stop()`;
/// it polls the sockets and a wakeup descriptor, feeds whatever arrives to the core, and
/// performs the actions it returns. Timers are the core's `tick`: the poll never waits past
/// the core's next deadline. Image frames travel from one socket to the other as the same
/// ZeroMQ messages, never copied.
///
/// Threading: `run()` blocks its thread, so call it on a thread of its own (the main thread
/// of the `broker` command, or `startInBackground()`), never on a Swift concurrency thread.
/// `stop()` is safe from any thread, e.g. one that waits for SIGINT/SIGTERM.
public final class BrokerService: @unchecked Sendable {
    // @unchecked: the sockets and the core are touched only by the thread inside `run()`
    // (or, before it starts, by `init`); `stop()` uses only the atomic flag and the
    // thread-safe wakeup; the endpoint strings are immutable.

    public struct Configuration: Sendable {
        /// Where clients connect, e.g. `ipc:///run/enlarger/clients.sock` or `tcp://*:5570`.
        /// An ipc socket file takes its mode from the umask: put it in a private directory.
        public var clientsEndpoint: String
        /// Where workers connect, e.g. `ipc:///run/enlarger/workers.sock` or `tcp://*:5571`.
        public var workersEndpoint: String
        public var broker = BrokerConfiguration()
        /// Largest frame a worker may send (an encoded result). libzmq drops the connection of
        /// a worker that sends a larger one.
        public var maxWorkerFrameBytes: Int64 = 512 << 20
        /// After `stop()`, how long the loop keeps running so the shutdown notices (Failed to
        /// clients, Disconnect to workers) leave before the sockets close.
        public var shutdownGrace: Duration = .milliseconds(100)
        /// Messages libzmq queues toward one client before the broker keeps the rest itself
        /// (`ZMQ_SNDHWM`, at least 1). Large enough that small results flow without the loop
        /// waiting on libzmq's I/O thread every few messages; what large ones may take of
        /// it is bounded in bytes by `clientPipeBytes` (see `ClientPipes`).
        public var clientSendHighWaterMark: Int32 = 64
        /// Bytes of large messages (over 64 KiB) libzmq may hold toward one client, unseen by
        /// the broker's backlog accounting; past them a large result waits in that backlog,
        /// counted. A single larger result still goes, alone.
        public var clientPipeBytes = 64 << 20
        /// Bytes the broker keeps waiting for one client that is not reading. Past this
        /// what waited is dropped and its requests end with CLIENT_NOT_READING (see
        /// `ClientOutbox`).
        public var maxClientBacklogBytes = 256 << 20
        /// Bytes waiting for one client past which its queued work is held back.
        public var clientHoldBackBytes = 1 << 20
        /// How long messages may wait for a client that is not connected (its connection
        /// reset and it has not come back) or that takes nothing at all, before the broker
        /// drops them and ends its requests with CLIENT_NOT_READING.
        public var clientBacklogPatience: Duration = .seconds(30)
        /// Largest frame a client may send, at least the input limit plus room for the
        /// header. libzmq drops the connection of a client that sends a larger frame (the
        /// client's requests survive it, see the protocol's IDENTITY AND RECONNECTION);
        /// inputs up to it but over `broker.maxInputBytes` are answered `Rejected{TOO_LARGE}`.
        public var maxClientFrameBytes: Int64 = 256 << 20

        /// CURVE authentication for the `tcp://` endpoints (`ipc://` ones stay owner-only
        /// through their private directory, and their peers are the principal `local`);
        /// `nil` leaves tcp unauthenticated, which is refused unless `allowInsecureTCP`.
        public var security: Security?
        /// Accept unauthenticated tcp endpoints (every tcp peer is then the principal
        /// `anonymous`). For closed test networks only.
        public var allowInsecureTCP = false

        /// A tenants file (see `TenantPolicy`): each principal's weight and limits. Read at
        /// start (an unusable file stops the broker from starting) and re-read within a
        /// second of a change (an unusable change is logged and the previous terms kept).
        public var tenantsFile: String?

        /// Writes the per-request line ("request ended", at info) itself, from the request's
        /// fields in order (`RequestEnd.logFields`), instead of through the logger, which
        /// builds and sorts a dictionary of them per request. nil: the logger.
        public var requestLog: (@Sendable (RequestEnd) -> Void)?
        /// Called once per pass of the loop, before it waits: a `requestLog` that keeps its
        /// lines writes them here.
        public var flushRequestLog: (@Sendable () -> Void)?

        /// Where to serve `/metrics`, `/healthz` and `/readyz` over HTTP (`HOST:PORT`, e.g.
        /// `0.0.0.0:9570`; port 0 picks one). `nil`: no HTTP port. Ready means at least one
        /// worker is registered and the broker is not stopping. The port carries no
        /// authentication: keep it on a network only operators reach.
        public var metricsAddress: String?

        /// Keys and allow-lists. Allow-list directories hold `*.pub` files (see
        /// `enlarger keygen`); they are re-read when they change, so keys are added and
        /// revoked without a restart (a revoked key keeps the connections it has open).
        public struct Security: Sendable {
            /// The broker's own key pair; clients and workers need its public half.
            public var serverKey: CurveKeyPair
            /// Keys that may connect as clients.
            public var clientKeys: AccessPolicy.Keys
            /// Keys that may connect as workers. A client key can never register as a worker
            /// unless it is listed here too.
            public var workerKeys: AccessPolicy.Keys
            /// Client keys that may cancel any request and see worker names and pids.
            public var adminKeys: AccessPolicy.Keys

            public init(serverKey: CurveKeyPair, clientKeys: AccessPolicy.Keys, workerKeys: AccessPolicy.Keys,
                        adminKeys: AccessPolicy.Keys = .none) {
                self.serverKey = serverKey
                self.clientKeys = clientKeys
                self.workerKeys = workerKeys
                self.adminKeys = adminKeys
            }
        }

        public init(clientsEndpoint: String, workersEndpoint: String) {
            self.clientsEndpoint = clientsEndpoint
            self.workersEndpoint = workersEndpoint
        }

        /// The inbound frame limit actually set on the client socket.
        var clientFrameLimit: Int64 {
            max(maxClientFrameBytes, Int64(broker.maxInputBytes) + Int64(WireLimits.maxHeaderBytes))
        }
    }

    public let configuration: Configuration
    /// The bound endpoints, with wildcards resolved (`tcp://127.0.0.1:*` → the chosen port).
    public let clientsEndpoint: String
    public let workersEndpoint: String

    private let logger: Logger
    private let clients: Socket
    /// The client socket's disconnections (a monitor PAIR socket).
    private let clientConnections: Socket
    private let workers: Socket
    /// Decides who may connect (ZAP); owned by the loop's thread like the sockets.
    private let gatekeeper: ZAPHandler
    private let wakeup: Wakeup
    private let stopRequested = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private var core: BrokerCore<Message>
    private let metrics: BrokerMetrics?
    private let telemetry: TelemetryServer?
    private let probe: LoopProbe?
    /// Why the broker is not ready (published by the loop on each probe); nil when ready.
    private let unreadiness = Lock<String?>("not started")
    /// The metrics address bound, port resolved; nil without `metricsAddress`.
    public var metricsAddress: String? { telemetry?.address }
    /// What waits for clients, and whose each routing id is (see `ClientOutbox`).
    private var outbox: ClientOutbox<Message>
    /// What libzmq may hold for each client, in bytes (see `ClientPipes`).
    private var pipes: ClientPipes
    /// What `sendToClient` hands a client to push older messages out of its window.
    private let filler: OutgoingMessage<Message>
    /// Whether this pass of the loop has read the ended connections yet.
    private var connectionsRead = false
    /// The tenants file as last read, to notice a change.
    private var tenantsVersion: TenantsFileVersion?
    private var tenantsCheckedAt = MonotonicInstant.now()

    /// Creates the sockets and binds them, so connection errors surface here and peers may
    /// connect as soon as this returns (their messages wait until `run()`).
    public init(configuration: Configuration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        if configuration.security == nil && !configuration.allowInsecureTCP {
            for endpoint in [configuration.clientsEndpoint, configuration.workersEndpoint] where endpoint.hasPrefix("tcp://") {
                throw BrokerSetupError(
                    "refusing to bind \(endpoint) without authentication: give the broker a server key and "
                        + "allow-lists (see `enlarger keygen`), or allow insecure tcp explicitly")
            }
        }
        let context = try Context()  // kept alive by the sockets
        // The gatekeeper is bound before the sockets it guards, in their context.
        gatekeeper = try ZAPHandler(context: context, policy: Self.accessPolicy(configuration))
        for event in gatekeeper.reload() { Self.log(event, logger) }
        clients = try Socket(context, .router)
        workers = try Socket(context, .router)
        wakeup = try Wakeup()
        var brokerConfiguration = configuration.broker
        if let path = configuration.tenantsFile {
            do {
                let (policy, version) = try Self.readTenants(path)
                brokerConfiguration.tenants = policy
                tenantsVersion = version
            } catch {
                throw BrokerSetupError("--tenants \(path): \(error)")
            }
        }
        core = BrokerCore(configuration: brokerConfiguration, now: .now())
        outbox = ClientOutbox(limits: .init(
            maxBytes: configuration.maxClientBacklogBytes, patience: configuration.clientBacklogPatience,
            holdBackBytes: configuration.clientHoldBackBytes))
        guard configuration.clientSendHighWaterMark > 0 else {
            throw BrokerSetupError("the clients' send high-water mark must be at least 1 (libzmq's 0 is unbounded)")
        }
        pipes = ClientPipes(highWaterMark: Int(configuration.clientSendHighWaterMark), budget: configuration.clientPipeBytes)
        filler = BrokerToClientMessage<Message>.pong(core.pong).encoded()
        // tcp endpoints use CURVE when the broker has keys; ipc endpoints stay unencrypted
        // (their private directory keeps them owner-only) but every connection still passes
        // the gatekeeper, which names its principal (a NULL peer could otherwise claim any
        // User-Id).
        for (socket, endpoint, domain) in [
            (clients, configuration.clientsEndpoint, Self.clientDomain),
            (workers, configuration.workersEndpoint, Self.workerDomain),
        ] {
            if let security = configuration.security, !endpoint.hasPrefix("ipc://") {
                try socket.setCurveServer(security.serverKey, zapDomain: domain)
            } else {
                try socket.setZAPDomain(Self.nullDomain(domain))
            }
        }
        // Sends never block the loop. ROUTER_MANDATORY turns a departed peer (or, toward a
        // client, a full pipe) into an error we can act on. Toward workers no high-water
        // mark is needed: what waits there is bounded by their credits. Toward a client, the
        // mark and `pipes` bound what libzmq holds, so a slow reader is visible: what it has
        // not taken waits in the broker's backlog for it, and its queued work is held back
        // meanwhile. No HANDOVER:
        // a live connection's routing id cannot be taken by another connection (any peer
        // may present any id); a client that reconnects gets its id once the old connection
        // is gone, which heartbeats make sure of, and what waited for it is delivered once
        // it has spoken as the same principal (see Client backlogs).
        try clients.set(.routerMandatory(true))
        try clients.set(.heartbeat(intervalMilliseconds: 2_000, timeoutMilliseconds: 6_000))
        // When a client connection ends, its routing id may be taken by the next connection
        // that presents it: the monitor says so before that can happen (see Client backlogs).
        let monitorEndpoint = "inproc://enlarger-client-connections-\(UInt64.random(in: 0...UInt64.max))"
        try clients.monitorDisconnections(at: monitorEndpoint)
        clientConnections = try Socket(context, .pair)
        try clientConnections.connect(monitorEndpoint)
        try clients.set(.maxMessageSize(configuration.clientFrameLimit))
        try clients.set(.sendHighWaterMark(configuration.clientSendHighWaterMark))
        try workers.set(.routerMandatory(true))
        try workers.set(.maxMessageSize(configuration.maxWorkerFrameBytes))
        try workers.set(.sendHighWaterMark(0))
        try clients.bind(configuration.clientsEndpoint)
        try workers.bind(configuration.workersEndpoint)
        clientsEndpoint = try clients.lastEndpoint()
        workersEndpoint = try workers.lastEndpoint()
        if let address = configuration.metricsAddress {
            let registry = MetricsRegistry()
            let probe = LoopProbe(wake: { [wakeup] in wakeup.signal() })
            let unreadiness = unreadiness
            metrics = BrokerMetrics(registry: registry)
            self.probe = probe
            do {
                telemetry = try TelemetryServer(address: address, registry: registry, probe: probe,
                                                isReady: { unreadiness.withLock { $0 } })
            } catch {
                throw BrokerSetupError("--metrics: \(error)")
            }
        } else {
            metrics = nil
            probe = nil
            telemetry = nil
        }
    }

    /// Asks `run()` to shut down: live requests fail with `BROKER_SHUTDOWN`, workers are sent
    /// Disconnect, and after `shutdownGrace` the sockets close and `run()` returns.
    /// Idempotent; safe from any thread.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        wakeup.signal()
    }

    /// Serves until `stop()`, then closes the sockets. Call once.
    ///
    /// - Throws: `ZMQError` only for failures of the sockets themselves; peers that
    ///   misbehave or disappear are handled (and counted) without stopping the loop.
    public func run() throws(ZMQError) {
        precondition(!started.exchange(true, ordering: .acquiringAndReleasing), "BrokerService.run() called twice")
        telemetry?.start()
        defer {
            telemetry?.stop()
            clientConnections.close()
            clients.close()
            workers.close()
            gatekeeper.close()
        }
        var poller = Poller()
        let clientsIndex = poller.register(clients)
        let workersIndex = poller.register(workers)
        let wakeupIndex = poller.register(fileDescriptor: wakeup.fileDescriptor)
        let gatekeeperIndex = poller.register(gatekeeper)
        // Polled only while a backlog waits for a full pipe: libzmq signals this descriptor
        // when a client has read enough for its pipe to take more (see Client backlogs).
        let clientsSignalIndex = poller.register(fileDescriptor: try clients.signalDescriptor(), for: [])
        var frames: [Message] = []
        var closeAt: MonotonicInstant?
        logger.info(
            "broker serving",
            metadata: ["clients": "\(clientsEndpoint)", "workers": "\(workersEndpoint)"])

        var lastTick = MonotonicInstant.now()
        var pending = false  // a socket had more to read than one batch
        while true {
            connectionsRead = false
            var now = MonotonicInstant.now()
            if closeAt == nil, stopRequested.load(ordering: .acquiring) {
                logger.info("broker stopping", metadata: ["live_requests": .stringConvertible(core.liveRequestCount)])
                try perform(core.shutdown(now: now), now: now)
                closeAt = now + configuration.shutdownGrace
            }
            if let closeAt, now >= closeAt { break }

            // At least once a second: allow-lists are re-read on that timer.
            var deadline = min(core.nextDeadline, closeAt ?? core.nextDeadline, now + .seconds(1))
            if let due = outbox.nextDue { deadline = min(deadline, due) }
            // Allow-lists are re-read once their interval has passed, not a poll later.
            deadline = min(deadline, now + gatekeeper.timeUntilRefresh)
            if configuration.tenantsFile != nil { deadline = min(deadline, tenantsCheckedAt + .seconds(1)) }
            poller.setEvents(outbox.awaitsRoom ? .readable : [], at: clientsSignalIndex)
            configuration.flushRequestLog?()
            _ = try poller.poll(timeout: pending ? .zero : deadline.duration(since: now))
            if poller.events(at: wakeupIndex).contains(.readable) { wakeup.drain() }
            // A handshake may be what re-reads a changed list: the connections it revokes end
            // either way.
            var reloaded = false
            if poller.events(at: gatekeeperIndex).contains(.readable) {
                for event in try gatekeeper.serviceRequests() {
                    Self.log(event, logger)
                    if case .allowListLoaded = event { reloaded = true }
                }
            }
            for event in gatekeeper.refreshIfDue() {
                Self.log(event, logger)
                reloaded = true
            }
            if reloaded { try revokeWithdrawnKeys(now: MonotonicInstant.now()) }
            try reloadTenantsIfChanged(now: MonotonicInstant.now())

            // Bounded batches per socket, so a flood on one side cannot starve the other side
            // or the timers.
            now = MonotonicInstant.now()
            pending = false
            // What both sockets' batches ask for goes out as one burst (see `serve`).
            var burst = Burst()
            if poller.events(at: clientsIndex).contains(.readable) {
                pending = try serve(clients, role: .client, frames: &frames, into: &burst, now: now) || pending
            }
            if poller.events(at: workersIndex).contains(.readable) {
                pending = try serve(workers, role: .worker, frames: &frames, into: &burst, now: now) || pending
            }
            try send(burst, now: now)
            // Once a pass at least, sends or none: a connection that ended is noticed while idle.
            if !connectionsRead { forgetEndedConnections() }
            try apply(outbox.takeDeparted(), now: now)
            // Every wakeup may have made room: libzmq takes in a client's reads (its pipe's
            // room) while the loop receives or polls, and trying a pipe that is still full
            // costs no system call. The signal descriptor wakes an idle loop for it.
            try apply(outbox.due(now: now, roomMade: true) { (peer, message) throws(ZMQError) in
                try sendToClient(message, to: peer)
            }, now: now)
            // Liveness is judged only once what already waited has been read: a peer whose
            // message sits unread behind a backlog is not silent. Under a flood that never
            // drains, timers still run once per interval (libzmq reads peers fairly).
            if !pending || now.duration(since: lastTick) >= configuration.broker.heartbeatInterval {
                try perform(core.tick(now: now), now: now)
                lastTick = now
            }
            probe?.answer { publish(now: now, stopping: closeAt != nil) }
        }
        configuration.flushRequestLog?()
        logger.info("broker stopped")
    }

    /// Runs `run()` on a new thread, for tests and tools; the returned handle stops it.
    public func startInBackground() -> BrokerThread {
        BrokerThread(self)
    }

    // MARK: - Moving bytes

    private static let batchSize = 256

    /// What a pass's batches asked for, not yet sent.
    private struct Burst {
        var actions: [BrokerAction<Message>] = []
        /// Clients heard, each once: what waited for them is tried after the burst.
        var heard: [PeerID] = []
    }

    /// Reads one batch into `burst`; returns whether more may be waiting.
    ///
    /// What the core asks for is performed once the pass has read its batches, as one burst
    /// of sends: libzmq's I/O thread then wakes once for the burst rather than once per
    /// message, and the ended connections are read once before it. The burst goes out early
    /// only where its order matters to whom a message goes: before the outbox hears an id on
    /// another connection or as another principal (a reply goes to whoever was last heard on
    /// its id), and before a revoked key's requests end.
    private func serve(
        _ socket: Socket, role: BrokerRole, frames: inout [Message], into burst: inout Burst, now: MonotonicInstant
    ) throws(ZMQError) -> Bool {
        for _ in 0..<Self.batchSize {
            guard try socket.receive(multipart: &frames, wait: false) else { return false }
            // A ROUTER always puts the routing id first; anything else is left to the core.
            let peer = PeerID(frames[0].bytes)
            let body = frames[1...]
            let sender = principal(of: frames)
            guard gatekeeper.admits(userID: sender.name, domain: role == .client ? Self.clientDomain : Self.workerDomain)
            else {
                // Its key was revoked since the handshake: nothing of it is taken any more.
                try send(burst, now: now)
                burst = Burst()
                try perform(role == .client ? core.clientPrincipalRevoked(sender, now: now)
                                            : core.workerPrincipalRevoked(sender, now: now), now: now)
                continue
            }
            if role == .client {
                // The connection is told by the frames read from it: the routing-id frame is
                // the ROUTER's own and carries none.
                let descriptor = frames.dropFirst().first?.sourceFileDescriptor
                if !outbox.hasHeard(peer, as: sender, on: descriptor) {
                    try send(burst, now: now)
                    burst = Burst()
                    forgetEndedConnections()
                    let effects = outbox.heard(from: peer, as: sender, on: descriptor)
                    if !effects.isEmpty {
                        logger.notice("routing id taken over by another principal; dropping what waited",
                                      metadata: ["peer": "\(peer)"])
                    }
                    try apply(effects, now: now)
                }
                if burst.heard.last != peer { burst.heard.append(peer) }
            }
            let actions = switch role {
            case .client: core.clientFrames(from: peer, principal: sender, body, now: now)
            case .worker: core.workerFrames(from: peer, principal: sender, body, now: now)
            }
            burst.actions += actions
        }
        return true
    }

    /// Performs `burst`'s actions, then tries what waited for the clients it heard: a client
    /// that sends is reading again, perhaps on a new connection.
    private func send(_ burst: Burst, now: MonotonicInstant) throws(ZMQError) {
        try perform(burst.actions, now: now)  // reads the ended connections first, if it sends
        if burst.actions.isEmpty && !burst.heard.isEmpty { forgetEndedConnections() }
        var tried = Set<PeerID>()
        for peer in burst.heard where tried.insert(peer).inserted {
            try apply(outbox.flush(peer, now: now) { (message) throws(ZMQError) in
                try sendToClient(message, to: peer)
            }, now: now)
            // An id whose pipe may hold a large message stays known by its connection, so
            // that its window goes when the connection does.
            if !core.tracksClient(peer) && !pipes.tracks(peer) { outbox.forgetIfIdle(peer) }
        }
    }

    /// After the allow-lists changed: every live principal whose key is no longer listed
    /// for its role loses its requests (clients) or its jobs (workers), within a second of the
    /// change, whether or not it sends anything.
    private func revokeWithdrawnKeys(now: MonotonicInstant) throws(ZMQError) {
        for principal in core.clientPrincipals.sorted()
        where !gatekeeper.admits(userID: principal.name, domain: Self.clientDomain) {
            logger.notice("client key revoked; ending its requests", metadata: ["principal": "\(principal)"])
            try perform(core.clientPrincipalRevoked(principal, now: now), now: now)
        }
        for principal in core.workerPrincipals.sorted()
        where !gatekeeper.admits(userID: principal.name, domain: Self.workerDomain) {
            logger.notice("worker key revoked; its jobs run elsewhere", metadata: ["principal": "\(principal)"])
            try perform(core.workerPrincipalRevoked(principal, now: now), now: now)
        }
    }

    /// Reads the client connections that ended: their routing ids are no one's until heard
    /// again, so nothing more is sent to them before the next connection under the id has
    /// spoken as its principal. Read before every burst of sends (the last retries of a
    /// pass go out after the pass's bursts, without another read): libzmq reports a
    /// connection's end before it can give its routing id to another connection.
    private func forgetEndedConnections() {
        connectionsRead = true
        while let event = try? clientConnections.receiveMonitorEvent() {
            guard event.isDisconnect else { continue }
            for peer in outbox.connectionEnded(Int32(bitPattern: event.value)) { pipes.forget(peer) }
        }
    }

    // MARK: - Tenants

    /// What identifies a version of the tenants file.
    struct TenantsFileVersion: Equatable {
        let device: UInt64, inode: UInt64, size: Int64, modified: Int64, modifiedNanoseconds: Int64
    }

    static func readTenants(_ path: String) throws -> (TenantPolicy, TenantsFileVersion) {
        let version = try tenantsVersion(of: path)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return (try TenantPolicy(parsing: text), version)
    }

    static func tenantsVersion(of path: String) throws -> TenantsFileVersion {
        var info = stat()
        guard stat(path, &info) == 0 else { throw BrokerSetupError(String(cString: strerror(errno))) }
        return TenantsFileVersion(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
                                  modified: Int64(info.st_mtim.tv_sec), modifiedNanoseconds: Int64(info.st_mtim.tv_nsec))
    }

    /// Once a second: a changed tenants file replaces the core's terms; one that cannot be
    /// read or parsed is logged and the terms in force stay.
    private func reloadTenantsIfChanged(now: MonotonicInstant) throws(ZMQError) {
        guard let path = configuration.tenantsFile, now.duration(since: tenantsCheckedAt) >= .seconds(1) else { return }
        tenantsCheckedAt = now
        guard let version = try? Self.tenantsVersion(of: path), version != tenantsVersion else { return }
        do {
            let (policy, read) = try Self.readTenants(path)
            tenantsVersion = read
            logger.info("tenants file loaded", metadata: ["file": "\(path)", "principals": .stringConvertible(policy.principals.count)])
            try perform(core.setTenants(policy, now: now), now: now)
        } catch let error as ZMQError {
            throw error
        } catch {
            tenantsVersion = version  // not again until it changes
            logger.warning("tenants file not used; the previous terms stay", metadata: ["file": "\(path)", "error": "\(error)"])
        }
    }

    /// Who sent a client message: the user id the gatekeeper gave its connection.
    private func principal(of frames: [Message]) -> Principal {
        guard let userID = frames.userID else { return Principal("anonymous") }
        if userID == Principal.local.name { return .local }
        return Principal(userID, isAdmin: gatekeeper.isAdmin(userID: userID))
    }

    // MARK: - Access

    static let clientDomain = "enlarger-clients"
    static let workerDomain = "enlarger-workers"

    /// With keys: CURVE allow-lists per role, admins among the clients. Without: ipc peers
    /// are the socket owner (`local`); tcp peers, where allowed at all, are `anonymous`.
    static func accessPolicy(_ configuration: Configuration) -> AccessPolicy {
        func nullID(_ endpoint: String) -> String { endpoint.hasPrefix("ipc://") ? Principal.local.name : "anonymous" }
        var domains: [String: AccessPolicy.Domain] = [
            nullDomain(clientDomain): .init(nullUserID: nullID(configuration.clientsEndpoint)),
            nullDomain(workerDomain): .init(nullUserID: nullID(configuration.workersEndpoint)),
        ]
        guard let security = configuration.security else { return AccessPolicy(domains: domains) }
        domains[clientDomain] = .init(curveKeys: security.clientKeys, admitsAdmins: true)
        domains[workerDomain] = .init(curveKeys: security.workerKeys)
        return AccessPolicy(domains: domains, admins: security.adminKeys)
    }

    /// The domain of a socket without CURVE: separate from the CURVE one, so a CURVE
    /// socket's domain never admits a NULL peer.
    static func nullDomain(_ domain: String) -> String { domain + "-unauthenticated" }

    private static func log(_ event: ZAPEvent, _ logger: Logger) {
        switch event {
        case .allowed(let peer, let userID):
            logger.debug("peer authenticated", metadata: ["domain": "\(peer.domain)", "user": "\(userID)"])
        case .refused(let peer, let reason):
            logger.debug("peer refused", metadata: ["domain": "\(peer.domain)", "address": "\(peer.address)",
                                                    "reason": "\(reason)"])
        case .allowListLoaded(let directory, let count):
            logger.info("allow-list loaded", metadata: ["directory": "\(directory)", "keys": .stringConvertible(count)])
        case .allowListProblem(let error):
            logger.warning("allow-list entry skipped", metadata: ["error": "\(error)"])
        }
    }

    /// Performs the core's actions in order. A send to a worker that has gone, or a client
    /// the broker gave up on, is reported back to the core, whose follow-up actions are
    /// performed in turn.
    private func perform(_ actions: [BrokerAction<Message>], now: MonotonicInstant) throws(ZMQError) {
        guard !actions.isEmpty else { return }
        forgetEndedConnections()
        var pending = actions
        var next = 0
        while next < pending.count {
            let action = pending[next]
            next += 1
            switch action {
            case .sendToClient(let peer, let message, let principal, let shed):
                let effects = try outbox.send(message, to: peer, for: principal, shed: shed, now: now) {
                    (message) throws(ZMQError) in try sendToClient(message, to: peer)
                }
                pending += try self.actions(for: effects, now: now)
            case .sendToWorker(let peer, let message):
                if try send(message, to: peer, on: workers) != .sent {
                    logger.debug("worker unreachable", metadata: ["peer": "\(peer)"])
                    pending += core.workerUnreachable(peer, now: now)
                }
            case .report(let report):
                metrics?.record(report)
                log(report)
            }
        }
    }

    // MARK: - Client backlogs
    //
    // What waits for clients, and whose each routing id is, is `ClientOutbox`'s: a pure
    // value, tested on its own. The loop feeds it what the sockets say (a message heard on a
    // connection, a connection ended, a pipe with room again) and does what its effects ask
    // of the core.

    /// The core's follow-up to the outbox's effects, to perform in turn.
    private func actions(for effects: [ClientOutbox<Message>.Effect], now: MonotonicInstant) throws(ZMQError) -> [BrokerAction<Message>] {
        var actions: [BrokerAction<Message>] = []
        for effect in effects {
            switch effect {
            case .waiting(let peer, let bytes):
                actions += core.clientBacklog(peer, waitingBytes: bytes, now: now)
            case .notReading(let peer):
                logger.notice("client not reading its results; dropping them",
                              metadata: ["peer": "\(peer)", "waiting_bytes": .stringConvertible(outbox.bytesWaiting(for: peer))])
                actions += core.clientNotReading(peer, now: now)
            case .lost(let peer):
                logger.notice("client not reading even its notices; dropping them", metadata: ["peer": "\(peer)"])
                actions += try endClient(peer, core.clientUnreachable(peer, now: now), now: now)
            case .departed(let peer):
                logger.debug("client connection ended", metadata: ["peer": "\(peer)"])
                actions += try endClient(peer, core.clientDeparted(peer, now: now), now: now)
            }
        }
        return actions
    }

    /// Performs what the core did on ending a client the outbox dropped (`ending`): what the
    /// core sends about its requests meanwhile goes nowhere (the outbox discards it until
    /// then). Returns the core's follow-up once nothing waits for the client.
    private func endClient(_ peer: PeerID, _ ending: [BrokerAction<Message>], now: MonotonicInstant) throws(ZMQError)
        -> [BrokerAction<Message>] {
        try perform(ending, now: now)
        outbox.finishDiscarding(peer)
        let actions = core.clientBacklog(peer, waitingBytes: 0, now: now)
        if !core.tracksClient(peer) && !pipes.tracks(peer) { outbox.forgetIfIdle(peer) }
        return actions
    }

    private func apply(_ effects: [ClientOutbox<Message>.Effect], now: MonotonicInstant) throws(ZMQError) {
        guard !effects.isEmpty else { return }
        try perform(actions(for: effects, now: now), now: now)
    }

    private typealias SendOutcome = ClientOutbox<Message>.SendOutcome

    /// Hands `message` to `peer`'s pipe once what libzmq holds for it leaves room (see
    /// `ClientPipes`): until then, fillers (a Pong, which a client takes as it takes any
    /// Pong) push older messages out of the window, and a pipe that refuses one is full.
    private func sendToClient(_ message: OutgoingMessage<Message>, to peer: PeerID) throws(ZMQError) -> SendOutcome {
        try pipes.hand(message.byteCount, to: peer, fillerBytes: filler.byteCount, sent: .sent) {
            (isFiller) throws(ZMQError) in try send(isFiller ? filler : message, to: peer, on: clients)
        }
    }

    private func send(_ message: OutgoingMessage<Message>, to peer: PeerID, on socket: Socket) throws(ZMQError) -> SendOutcome {
        do {
            // The routing-id frame is where ROUTER_MANDATORY refuses an unknown peer or a
            // full pipe; once it is accepted the rest of the message is queued as a whole.
            guard try socket.send(peer.bytes, [.more, .dontWait]) else { return .full }
            try socket.send(message.tag.bytes, [.more, .dontWait])
            if let payload = message.payload {
                try socket.send(message.header, [.more, .dontWait])
                try socket.send(payload, .dontWait)
            } else {
                try socket.send(message.header, .dontWait)
            }
            return .sent
        } catch where error.isHostUnreachable {
            return .unreachable
        }
    }

    /// On a probe: the state a scrape or a readiness check reads.
    private func publish(now: MonotonicInstant, stopping: Bool) {
        let status = core.status(now: now)
        metrics?.publish(status)
        let reason: String? =
            if stopping { "the broker is stopping" }
            else if status.workers.isEmpty { "no worker is registered" }
            else { nil }
        unreadiness.withLock { $0 = reason }
    }

    private func log(_ report: BrokerReport) {
        switch report {
        case .requestEnded(let end):
            // Once per request: the fields are built only when the line is logged.
            guard logger.logLevel <= .info else { return }
            if let requestLog = configuration.requestLog { return requestLog(end) }
            logger.info("request ended", metadata: Logger.Metadata(uniqueKeysWithValues: end.logFields))
        case .requestRejected(let requestID, let code):
            logger.info("request rejected", metadata: [
                "request_id": "\(requestID)", "stage": "rejected", "outcome": "rejected", "code": "\(code.contractName)",
            ])
        case .workerRegistered(let peer, let name, let capacity):
            logger.info("worker registered", metadata: ["peer": "\(peer)", "name": "\(name)", "capacity": .stringConvertible(capacity)])
        case .workerLost(let peer, let reason, let requeued, let failed):
            logger.warning(
                "worker lost",
                metadata: ["peer": "\(peer)", "reason": "\(reason)", "requeued": .stringConvertible(requeued), "failed": .stringConvertible(failed)])
        case .workerLeft(let peer, let requeued):
            logger.info("worker left", metadata: ["peer": "\(peer)", "requeued": .stringConvertible(requeued)])
        case .clientVanished(let peer, let cancelled):
            logger.notice("client vanished", metadata: ["peer": "\(peer)", "cancelled": .stringConvertible(cancelled)])
        case .cancelAckTimedOut(let peer, let jobID):
            logger.warning("worker never acknowledged a cancel", metadata: ["peer": "\(peer)", "job": .stringConvertible(jobID)])
        case .malformed(let peer, let role, let reason):
            logger.debug("malformed message", metadata: ["peer": "\(peer)", "role": "\(role)", "reason": "\(reason)"])
        }
    }
}

/// A `BrokerService` running on its own thread (see `BrokerService.startInBackground()`).
public final class BrokerThread: Sendable {
    private final class Completion: Sendable {
        let result = Lock<Result<Void, ZMQError>?>(nil)
        let done = DispatchSemaphore(value: 0)
    }

    private let service: BrokerService
    private let completion = Completion()

    fileprivate init(_ service: BrokerService) {
        self.service = service
        let thread = Thread { [service, completion] in
            let result = Result { () throws(ZMQError) in try service.run() }
            completion.result.withLock { $0 = result }
            completion.done.signal()
        }
        thread.name = "enlarger-broker"
        thread.start()
    }

    /// Stops the broker, waits for its thread to finish and rethrows what `run()` threw.
    /// Idempotent.
    public func stopAndWait() throws(ZMQError) {
        service.stop()
        completion.done.wait()
        completion.done.signal()  // leave it open, so calling again returns at once
        try completion.result.withLock { $0 }?.get()
    }
}

/// A broker configuration that cannot be served (for instance tcp without authentication).
public struct BrokerSetupError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
