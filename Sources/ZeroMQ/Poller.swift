import CZeroMQ

/// Waits on several sockets and file descriptors at once (`zmq_poll`).
///
/// Used by the thread that owns the registered sockets. Register once, then call `poll`
/// in a loop and read `events(at:)` for each index that `register` returned. The poller
/// keeps its sockets alive; close them only once it is no longer polled.
public struct Poller {
    public struct Events: OptionSet, Sendable {
        public let rawValue: Int16
        public init(rawValue: Int16) { self.rawValue = rawValue }

        public static let readable = Events(rawValue: Int16(ZMQ_POLLIN))
        public static let writable = Events(rawValue: Int16(ZMQ_POLLOUT))
        /// Only reported for file descriptors.
        public static let error = Events(rawValue: Int16(ZMQ_POLLERR))
    }

    private var items: [zmq_pollitem_t] = []
    // Keeps registered sockets open for as long as the poller refers to their handles.
    private var sockets: [Socket] = []

    public init() {}

    /// Adds `socket`; returns its index for `events(at:)`.
    @discardableResult
    public mutating func register(_ socket: Socket, for events: Events = .readable) -> Int {
        sockets.append(socket)
        items.append(zmq_pollitem_t(socket: socket.liveHandle, fd: -1, events: events.rawValue, revents: 0))
        return items.count - 1
    }

    /// Adds a file descriptor (a `Wakeup`'s, for instance); returns its index.
    @discardableResult
    public mutating func register(fileDescriptor: Int32, for events: Events = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: events.rawValue, revents: 0))
        return items.count - 1
    }

    /// Changes what the item at `index` is polled for; `[]` leaves it registered but ignored.
    public mutating func setEvents(_ events: Events, at index: Int) {
        items[index].events = events.rawValue
    }

    /// Blocks until at least one registered item is ready or `timeout` passes.
    ///
    /// - Parameter timeout: `nil` waits indefinitely. Rounded up to whole milliseconds, so
    ///   a deadline a few microseconds away does not turn into a busy loop of zero waits.
    /// - Returns: the number of ready items; 0 when the timeout expired.
    public mutating func poll(timeout: Duration?) throws(ZMQError) -> Int {
        let milliseconds = timeout.map(Self.milliseconds(roundingUp:)) ?? -1
        let count = Int32(items.count)
        return Int(try items.withUnsafeMutableBufferPointer { (buffer) throws(ZMQError) -> Int32 in
            try zmqCall("zmq_poll") { zmq_poll(buffer.baseAddress, count, milliseconds) }
        })
    }

    /// What the last `poll` found ready on the item at `index`.
    public func events(at index: Int) -> Events {
        Events(rawValue: items[index].revents)
    }

    static func milliseconds(roundingUp duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0, attoseconds >= 0 || seconds > 0 else { return 0 }
        let attosecondsPerMillisecond: Int64 = 1_000_000_000_000_000
        let partial = (attoseconds + attosecondsPerMillisecond - 1) / attosecondsPerMillisecond
        let (total, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        guard !overflow, total <= Int64(Int32.max) else { return Int(Int32.max) }
        return Int(min(total + partial, Int64(Int32.max)))
    }
}
