import CZeroMQ

extension Socket {
    /// The socket options this project sets. `ZMQ_LINGER` is not among them: it is always 0.
    public enum Option: Sendable, Equatable {
        /// ROUTER: a send to a peer that is not connected fails with `EHOSTUNREACH` instead
        /// of being dropped silently.
        case routerMandatory(Bool)
        /// Largest inbound frame in bytes (-1: no limit). libzmq drops the connection of a
        /// peer that sends a larger one.
        case maxMessageSize(Int64)
        /// Outbound messages queued per peer before sends block or fail (0: no limit).
        case sendHighWaterMark(Int32)
        /// Inbound messages queued per peer before libzmq stops reading from it (0: no limit).
        case receiveHighWaterMark(Int32)
        /// Queue messages only to completed connections (DEALER/PUSH: no silent buffering
        /// toward a peer that is not there yet).
        case immediate(Bool)
        /// The identity a ROUTER peer sees for this socket (1 to 255 bytes, not starting with 0).
        case routingID([UInt8])
        /// ROUTER: a new connection presenting a routing id already in use takes it over
        /// (instead of being refused), so a client that reconnects keeps its identity. Any
        /// peer may present any routing id: pair it with the connection's authenticated
        /// User-Id before trusting it.
        case routerHandover(Bool)
        /// ZMTP heartbeats: a PING every `interval` milliseconds, and a connection that answers
        /// nothing for `timeout` milliseconds is closed (so a peer gone without a word frees
        /// its routing id).
        case heartbeat(intervalMilliseconds: Int32, timeoutMilliseconds: Int32)

        // CURVE and ZAP. Set before `bind`/`connect`; `Socket+Curve.swift` has the helpers
        // that set the right combination.

        /// Act as the CURVE server of every connection (needs `curveSecretKey`).
        case curveServer(Bool)
        /// This socket's long-term public key (CURVE client).
        case curvePublicKey(CurvePublicKey)
        /// This socket's long-term secret key (CURVE client and server).
        case curveSecretKey(CurveSecretKey)
        /// The public key of the server this client socket connects to.
        case curveServerKey(CurvePublicKey)
        /// The ZAP domain named in this socket's authentication requests (up to 254 bytes).
        /// For the NULL mechanism, ZAP is consulted only when a domain is set.
        case zapDomain(String)
        /// Fail a handshake when no ZAP handler is bound in the context, instead of letting
        /// every peer in (libzmq's default, kept for old "encryption without
        /// authentication" setups). Needs libzmq 4.3.
        case zapEnforceDomain(Bool)
    }

    public func set(_ option: Option) throws(ZMQError) {
        switch option {
        case .routerMandatory(let on): try setInt32(ZMQ_ROUTER_MANDATORY, on ? 1 : 0, "ZMQ_ROUTER_MANDATORY")
        case .maxMessageSize(let bytes): try setInt64(ZMQ_MAXMSGSIZE, bytes, "ZMQ_MAXMSGSIZE")
        case .sendHighWaterMark(let count): try setInt32(ZMQ_SNDHWM, count, "ZMQ_SNDHWM")
        case .receiveHighWaterMark(let count): try setInt32(ZMQ_RCVHWM, count, "ZMQ_RCVHWM")
        case .immediate(let on): try setInt32(ZMQ_IMMEDIATE, on ? 1 : 0, "ZMQ_IMMEDIATE")
        case .routingID(let bytes): try setBytes(ZMQ_ROUTING_ID, bytes, "ZMQ_ROUTING_ID")
        case .routerHandover(let on): try setInt32(ZMQ_ROUTER_HANDOVER, on ? 1 : 0, "ZMQ_ROUTER_HANDOVER")
        case .heartbeat(let interval, let timeout):
            try setInt32(ZMQ_HEARTBEAT_IVL, interval, "ZMQ_HEARTBEAT_IVL")
            try setInt32(ZMQ_HEARTBEAT_TIMEOUT, timeout, "ZMQ_HEARTBEAT_TIMEOUT")
        case .curveServer(let on): try setInt32(ZMQ_CURVE_SERVER, on ? 1 : 0, "ZMQ_CURVE_SERVER")
        case .curvePublicKey(let key): try setBytes(ZMQ_CURVE_PUBLICKEY, key.bytes, "ZMQ_CURVE_PUBLICKEY")
        case .curveSecretKey(let key): try setBytes(ZMQ_CURVE_SECRETKEY, key.bytes, "ZMQ_CURVE_SECRETKEY")
        case .curveServerKey(let key): try setBytes(ZMQ_CURVE_SERVERKEY, key.bytes, "ZMQ_CURVE_SERVERKEY")
        case .zapDomain(let domain): try setBytes(ZMQ_ZAP_DOMAIN, Array(domain.utf8), "ZMQ_ZAP_DOMAIN")
        case .zapEnforceDomain(let on): try setInt32(zmqZAPEnforceDomain, on ? 1 : 0, "ZMQ_ZAP_ENFORCE_DOMAIN")
        }
    }

    /// The endpoint the socket last bound or connected to, with wildcards resolved
    /// (`tcp://127.0.0.1:*` becomes the port the system chose).
    public func lastEndpoint() throws(ZMQError) -> String {
        let handle = liveHandle
        var buffer = [CChar](repeating: 0, count: 1024)
        var size = buffer.count
        _ = try zmqCall("zmq_getsockopt(ZMQ_LAST_ENDPOINT)") {
            zmq_getsockopt(handle, ZMQ_LAST_ENDPOINT, &buffer, &size)
        }
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The descriptor libzmq signals when commands reach the socket (`ZMQ_FD`): readable
    /// whenever something about the socket may have changed, a pipe that was full becoming
    /// writable among them. Edge-like: once the socket has processed its commands (any
    /// `zmq_poll` of it does) the descriptor is quiet again. Only for polling alongside the
    /// socket; never read it.
    public func signalDescriptor() throws(ZMQError) -> Int32 {
        let handle = liveHandle
        var descriptor: Int32 = -1
        var size = MemoryLayout<Int32>.size
        _ = try zmqCall("zmq_getsockopt(ZMQ_FD)") {
            zmq_getsockopt(handle, ZMQ_FD, &descriptor, &size)
        }
        return descriptor
    }

    /// What the socket can do now without blocking (`ZMQ_EVENTS`): `.readable` when a
    /// message waits, `.writable` when one can be sent. Asking processes the commands that
    /// reached the socket, which quiets its `signalDescriptor()`.
    public func pendingEvents() throws(ZMQError) -> Poller.Events {
        let handle = liveHandle
        var events: Int32 = 0
        var size = MemoryLayout<Int32>.size
        _ = try zmqCall("zmq_getsockopt(ZMQ_EVENTS)") {
            zmq_getsockopt(handle, ZMQ_EVENTS, &events, &size)
        }
        return Poller.Events(rawValue: Int16(truncatingIfNeeded: events))
    }

    func setInt32(_ option: Int32, _ value: Int32, _ name: String) throws(ZMQError) {
        let handle = liveHandle
        var value = value
        _ = try zmqCall("zmq_setsockopt(\(name))") {
            zmq_setsockopt(handle, option, &value, MemoryLayout<Int32>.size)
        }
    }

    private func setInt64(_ option: Int32, _ value: Int64, _ name: String) throws(ZMQError) {
        let handle = liveHandle
        var value = value
        _ = try zmqCall("zmq_setsockopt(\(name))") {
            zmq_setsockopt(handle, option, &value, MemoryLayout<Int64>.size)
        }
    }

    private func setBytes(_ option: Int32, _ value: [UInt8], _ name: String) throws(ZMQError) {
        let handle = liveHandle
        _ = try zmqCall("zmq_setsockopt(\(name))") {
            value.withUnsafeBytes { zmq_setsockopt(handle, option, $0.baseAddress, $0.count) }
        }
    }
}

// zmq.h declares ZMQ_ZAP_ENFORCE_DOMAIN only for draft builds, yet libzmq 4.3 accepts it in
// release builds too, and authentication cannot fail closed without it.
private let zmqZAPEnforceDomain: Int32 = 93
