import Locking

/// A queue of commands for the thread that owns some sockets, with a `Wakeup` so posting a
/// command interrupts that thread's `Poller.poll`.
///
/// Any thread may `post`; only the owning thread calls `takeAll`, after its poll reports
/// `fileDescriptor` readable (or at any other time).
public final class Mailbox<Command: Sendable>: Sendable {
    private let pending = Lock<[Command]>([])
    private let wakeup: Wakeup

    public init() throws(ZMQError) {
        wakeup = try Wakeup()
    }

    /// The descriptor to register with `Poller.register(fileDescriptor:)`.
    public var fileDescriptor: Int32 { wakeup.fileDescriptor }

    /// Queues `command` and wakes the owning thread. Safe from any thread, never blocks on I/O.
    public func post(_ command: Command) {
        let wasEmpty = pending.withLock { queue in
            queue.append(command)
            return queue.count == 1
        }
        // One wakeup per batch: later posts find the queue non-empty and the signal pending.
        if wasEmpty { wakeup.signal() }
    }

    /// Removes and returns every queued command, oldest first.
    public func takeAll() -> [Command] {
        // Drain before taking: a post that lands after the take then leaves a fresh signal.
        wakeup.drain()
        return pending.withLock { queue in
            let taken = queue
            queue.removeAll()
            return taken
        }
    }
}
