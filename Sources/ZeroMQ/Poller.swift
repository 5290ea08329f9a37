import CZeroMQ
import Glibc

/// Waits on several sockets and file descriptors at once.
///
/// Used by the thread that owns the registered sockets. Register once, then call `poll`
/// in a loop and read `events(at:)` for each index that `register` returned. The poller
/// keeps its sockets alive; close them only once it is no longer polled.
///
/// What `zmq_poll` does, in fewer system calls: `zmq_poll` asks every socket for its events
/// (`ZMQ_EVENTS`, a system call or two each), polls every descriptor without waiting, and,
/// when nothing is ready, does both again before it sleeps and once more after. Here the
/// sockets are asked once; only when none is ready does the poller sleep, on the sockets'
/// signal descriptors (`ZMQ_FD`) and the files together, and then asks only the sockets
/// whose descriptor fired. That is libzmq's documented use of `ZMQ_FD`: the descriptor is
/// signalled when commands reach a socket after its events were last asked for, so a
/// socket found not ready stays quiet until something changes.
public struct Poller {
    public struct Events: OptionSet, Sendable {
        public let rawValue: Int16
        public init(rawValue: Int16) { self.rawValue = rawValue }

        public static let readable = Events(rawValue: Int16(ZMQ_POLLIN))
        public static let writable = Events(rawValue: Int16(ZMQ_POLLOUT))
        /// Only reported for file descriptors.
        public static let error = Events(rawValue: Int16(ZMQ_POLLERR))
    }

    private struct Item {
        /// nil for a file descriptor.
        let socket: Socket?
        /// Asked for its events on every poll; otherwise only once its signal descriptor
        /// fires (see `register(quietUntilSignalled:for:)`).
        var askedEveryPoll = true
        var events: Events
        var ready: Events = []
    }

    private var items: [Item] = []
    /// One per item: a socket's signal descriptor (polled for input; -1 until the first
    /// `poll` asks libzmq for it), or the file descriptor and what it is polled for.
    private var descriptors: [pollfd] = []
    /// What one wait polls, and the item each entry is for (kept to spare an allocation).
    private var waiting: [pollfd] = []
    private var waitingItems: [Int] = []

    public init() {}

    /// Adds `socket`; returns its index for `events(at:)`.
    @discardableResult
    public mutating func register(_ socket: Socket, for events: Events = .readable) -> Int {
        items.append(Item(socket: socket, events: events))
        descriptors.append(pollfd(fd: -1, events: 0, revents: 0))
        return items.count - 1
    }

    /// Adds `socket`, asked for its events only when its signal descriptor fires, which
    /// spares two system calls a poll. Only for a socket its owner touches when told it is
    /// ready, and then until a receive finds nothing (a ZAP handler's, say): a socket left
    /// by a send or a receive that found something may hold a message its descriptor will
    /// not announce, and must be registered with `register(_:for:)`.
    @discardableResult
    public mutating func register(quietUntilSignalled socket: Socket, for events: Events = .readable) -> Int {
        items.append(Item(socket: socket, askedEveryPoll: false, events: events))
        descriptors.append(pollfd(fd: -1, events: 0, revents: 0))
        return items.count - 1
    }

    /// Adds a file descriptor (a `Wakeup`'s, for instance); returns its index.
    @discardableResult
    public mutating func register(fileDescriptor: Int32, for events: Events = .readable) -> Int {
        items.append(Item(socket: nil, events: events))
        descriptors.append(pollfd(fd: fileDescriptor, events: Self.pollEvents(events), revents: 0))
        return items.count - 1
    }

    /// Changes what the item at `index` is polled for; `[]` leaves it registered but ignored.
    public mutating func setEvents(_ events: Events, at index: Int) {
        items[index].events = events
        if items[index].socket == nil { descriptors[index].events = Self.pollEvents(events) }
    }

    /// Blocks until at least one registered item is ready or `timeout` passes.
    ///
    /// - Parameter timeout: `nil` waits indefinitely. Rounded up to whole milliseconds, so
    ///   a deadline a few microseconds away does not turn into a busy loop of zero waits.
    /// - Returns: the number of ready items; 0 when the timeout expired.
    public mutating func poll(timeout: Duration?) throws(ZMQError) -> Int {
        try prepareSocketDescriptors()
        for index in items.indices { items[index].ready = [] }
        // The files are looked at first: asking a socket quiets its signal descriptor, which
        // may be registered as a file of its own (to hear of a full pipe's room).
        var ready = try waitForDescriptors(milliseconds: 0, sockets: false)
        // What the sockets already hold needs no wait.
        for index in items.indices where items[index].socket != nil && items[index].askedEveryPoll
            && !items[index].events.isEmpty {
            if try askSocket(at: index) { ready += 1 }
        }
        if ready > 0 || timeout == .zero { return ready }
        let deadline = timeout.map { ContinuousClock.now + $0 }
        while true {
            let milliseconds = deadline.map { Self.milliseconds(roundingUp: ContinuousClock.now.duration(to: $0)) } ?? -1
            ready = try waitForDescriptors(milliseconds: Int32(milliseconds), sockets: true)
            // A socket's descriptor may fire for commands that bring nothing it is polled for
            // (a peer connecting, say): wait again for what is left of the timeout.
            if ready > 0 || milliseconds == 0 { return ready }
            if let deadline, ContinuousClock.now >= deadline { return 0 }
        }
    }

    /// What the last `poll` found ready on the item at `index`.
    public func events(at index: Int) -> Events {
        items[index].ready
    }

    private mutating func prepareSocketDescriptors() throws(ZMQError) {
        for index in items.indices where descriptors[index].fd == -1 {
            guard let socket = items[index].socket else { continue }
            descriptors[index].fd = try socket.signalDescriptor()
            descriptors[index].events = Int16(POLLIN)
        }
    }

    /// Asks the socket at `index` for its events (`ZMQ_EVENTS`); returns whether any it is
    /// polled for is there.
    private mutating func askSocket(at index: Int) throws(ZMQError) -> Bool {
        let found = try items[index].socket!.pendingEvents().intersection(items[index].events)
        items[index].ready = found
        return !found.isEmpty
    }

    /// Polls the files and the quiet sockets' signal descriptors (with `sockets`, every
    /// socket's), asking each socket whose descriptor fired; returns how many items are ready.
    private mutating func waitForDescriptors(milliseconds: Int32, sockets: Bool) throws(ZMQError) -> Int {
        waiting.removeAll(keepingCapacity: true)
        waitingItems.removeAll(keepingCapacity: true)
        for index in items.indices where !items[index].events.isEmpty
            && (items[index].socket == nil || sockets || !items[index].askedEveryPoll) {
            waiting.append(pollfd(fd: descriptors[index].fd, events: descriptors[index].events, revents: 0))
            waitingItems.append(index)
        }
        guard !waiting.isEmpty || milliseconds != 0 else { return 0 }
        let count = nfds_t(waiting.count)
        let found = waiting.withUnsafeMutableBufferPointer { buffer in
            while true {
                let result = Glibc.poll(buffer.baseAddress, count, milliseconds)
                if result >= 0 || errno != EINTR { return result }
            }
        }
        guard found > 0 else { return 0 }
        var ready = 0
        for (slot, index) in waitingItems.enumerated() where waiting[slot].revents != 0 {
            if items[index].socket != nil {
                if try askSocket(at: index) { ready += 1 }
            } else {
                let revents = waiting[slot].revents
                var found: Events = []
                if revents & Int16(POLLIN) != 0 { found.insert(.readable) }
                if revents & Int16(POLLOUT) != 0 { found.insert(.writable) }
                if revents & ~Int16(POLLIN | POLLOUT) != 0 { found.insert(.error) }
                items[index].ready = found
                if !found.isEmpty { ready += 1 }
            }
        }
        return ready
    }

    private static func pollEvents(_ events: Events) -> Int16 {
        var polled: Int16 = 0
        if events.contains(.readable) { polled |= Int16(POLLIN) }
        if events.contains(.writable) { polled |= Int16(POLLOUT) }
        return polled
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

