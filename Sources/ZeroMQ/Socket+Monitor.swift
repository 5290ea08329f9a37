import CZeroMQ

/// A socket's connections coming and going, as libzmq's socket monitor reports them
/// (`zmq_socket_monitor`): which connection (its file descriptor) an event is about.
public struct MonitorEvent: Sendable, Equatable {
    public let event: UInt16
    /// For connection events, the connection's file descriptor.
    public let value: UInt32

    public var isDisconnect: Bool { Int32(event) == ZMQ_EVENT_DISCONNECTED }
}

extension Socket {
    /// Reports this socket's disconnections on a PAIR socket that listens at `endpoint`
    /// (`inproc://…`, unique in the context); connect a `.pair` socket to it and read with
    /// `receiveMonitorEvent()`. Owner thread only, like every call on a socket.
    public func monitorDisconnections(at endpoint: String) throws(ZMQError) {
        guard zmq_socket_monitor(liveHandle, endpoint, ZMQ_EVENT_DISCONNECTED) == 0 else {
            throw ZMQError(code: zmq_errno(), operation: "zmq_socket_monitor(\(endpoint))")
        }
    }

    /// The next monitor event waiting on this (monitor PAIR) socket, or nil without waiting.
    public func receiveMonitorEvent() throws(ZMQError) -> MonitorEvent? {
        var frames: [Message] = []
        guard try receive(multipart: &frames, wait: false) else { return nil }
        // Two frames: 2 bytes of event and 4 of value (native order), then the endpoint.
        let header = frames[0].bytes
        guard header.count == 6 else { return nil }
        let event = UInt16(header[0]) | UInt16(header[1]) << 8
        let value = UInt32(header[2]) | UInt32(header[3]) << 8 | UInt32(header[4]) << 16 | UInt32(header[5]) << 24
        return MonitorEvent(event: event, value: value)
    }
}

extension Message {
    /// The file descriptor of the connection this received frame came on (libzmq's
    /// ZMQ_SRCFD), or nil where libzmq cannot tell (inproc).
    public var sourceFileDescriptor: Int32? {
        let value = zmq_msg_get(pointer, ZMQ_SRCFD)
        return value >= 0 ? value : nil
    }
}
