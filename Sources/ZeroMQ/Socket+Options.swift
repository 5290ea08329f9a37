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
        /// ROUTER: a new connection that presents a routing id already in use takes it over
        /// (the old connection is disconnected) instead of being refused.
        case routerHandover(Bool)
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
