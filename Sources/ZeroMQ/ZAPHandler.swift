import CZeroMQ

/// Decides who may connect to the sockets of one `Context`: the ZAP handler (ZeroMQ RFC 27)
/// that libzmq consults during every handshake on a socket with a ZAP domain.
///
/// **Ordering.** Create the handler before any socket it guards binds, in the same
/// `Context`: libzmq finds it by the fixed endpoint `inproc://zeromq.zap.01`, per context.
/// Keep it open and serviced for as long as those sockets are open. Sockets set up with
/// `Socket.setCurveServer(_:zapDomain:)` or `setZAPDomain(_:)` fail every handshake while
/// no handler is bound; a socket given CURVE options by hand without `.zapEnforceDomain`
/// would instead let every key in.
///
/// **Threading.** Like a `Socket`, the handler belongs to one thread, normally the I/O
/// thread that owns the guarded sockets: register it with `Poller.register(_:)` and call
/// `serviceRequests()` when it is readable. A handshake waits until its request is
/// answered, so a thread that stops polling stalls new connections (open ones carry on).
///
/// **Allow-lists.** `AccessPolicy.Keys.directory` lists are read by `reload()` or, at the
/// latest, by the first request; after that, `serviceRequests()` checks them for changes
/// at most once per `reloadInterval` when requests arrive. Added keys get in and removed
/// keys are refused from the next connection on; connections already open are not cut.
public final class ZAPHandler {
    /// The endpoint libzmq sends ZAP requests to (fixed by RFC 27).
    public static let endpoint = "inproc://zeromq.zap.01"

    let socket: Socket
    private var control: AccessControl
    private var isClosed = false

    /// Binds the handler in `context`. Allow-list directories are not read yet: call
    /// `reload()` next to log what they hold.
    ///
    /// A domain whose `nullUserID` is empty or starts with "curve:" is a programming error
    /// and traps here.
    ///
    /// - Parameter reloadInterval: the least time between two checks of the allow-list
    ///   directories for changes.
    /// - Throws: `ZMQError`; `EADDRINUSE` when the context already has a ZAP handler.
    public init(context: Context, policy: AccessPolicy, reloadInterval: Duration = .seconds(1)) throws(ZMQError) {
        socket = try Socket(context, .rep)
        try socket.bind(Self.endpoint)
        control = AccessControl(policy: policy, reloadInterval: reloadInterval)
    }

    /// The rules in force.
    public var policy: AccessPolicy { control.policy }

    /// Re-reads every allow-list directory now, whether or not it changed. Owner thread
    /// only: other threads (a SIGHUP handler, say) post a command to the owner instead.
    ///
    /// - Returns: one `.allowListLoaded` per directory and one `.allowListProblem` per file
    ///   (or directory) that could not be used; log them. Never fails: a bad file is skipped.
    public func reload() -> [ZAPEvent] {
        control.reload(now: .now)
    }

    /// Answers every ZAP request queued now, without blocking.
    ///
    /// - Returns: one `.allowed` or `.refused` per request, preceded by the events of an
    ///   allow-list re-read if one was due; empty when nothing was queued.
    /// - Throws: `ZMQError` from the handler's own socket only (a libzmq failure).
    public func serviceRequests() throws(ZMQError) -> [ZAPEvent] {
        var events: [ZAPEvent] = []
        var frames: [Message] = []
        var checkedDirectories = false
        while try socket.receive(multipart: &frames, wait: false) {
            if !checkedDirectories {
                events += control.refreshIfDue(now: .now)
                checkedDirectories = true
            }
            // REP strips the envelope; every request must be answered before the next one.
            let (reply, event) = control.answer(frames.map(\.bytes))
            events.append(event)
            try socket.send(multipart: reply.map { Message($0) })
        }
        return events
    }

    /// Re-reads the allow-list directories that changed, if the reload interval has passed
    /// since the last check. Owner thread only. Call it on a timer, so that a key removed
    /// from a list loses its open connections too (see `admits(userID:domain:)`).
    public func refreshIfDue() -> [ZAPEvent] {
        control.refreshIfDue(now: .now)
    }

    /// How long until `refreshIfDue` next re-reads the lists: a loop that polls no longer
    /// than this notices a change within the reload interval. Owner thread only.
    public var timeUntilRefresh: Duration {
        control.timeUntilRefresh(now: .now)
    }

    /// Whether a connection authenticated as `userID` in `domain` is still allowed, as the
    /// lists were last read: the handshake checks a key once, this checks it afterwards.
    public func admits(userID: String, domain: String) -> Bool {
        control.admits(userID: userID, domain: domain)
    }

    /// Whether `userID` (from `[Message].userID`) is a CURVE principal whose key is in the
    /// policy's admin list as last read. Does not re-read the list.
    public func isAdmin(userID: String) -> Bool {
        control.isAdmin(userID: userID)
    }

    /// Unbinds and closes the handler, so that another can be bound in the context at
    /// once. Only once the sockets it guards are closed (they would fail every new
    /// handshake) and no `Poller` polls it any more. Idempotent; dropping the handler does
    /// the same.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        // Closing alone frees the inproc name only when libzmq's reaper thread gets to the
        // socket; unbinding frees it now.
        _ = zmq_unbind(socket.liveHandle, Self.endpoint)
        socket.close()
    }

    deinit {
        close()
    }
}

extension Poller {
    /// Adds `handler`'s socket, polled for readability; call `handler.serviceRequests()`
    /// when `events(at:)` of the returned index is `.readable`. It is asked for its events
    /// only when signalled: `serviceRequests()` is the only use of the socket, and it ends
    /// with a receive that finds nothing.
    @discardableResult
    public mutating func register(_ handler: ZAPHandler) -> Int {
        register(quietUntilSignalled: handler.socket, for: .readable)
    }
}
