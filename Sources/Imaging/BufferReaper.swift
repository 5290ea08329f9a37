import Dispatch
import Locking

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Frees large buffers on a background thread. Returning a few hundred megabytes to the
/// kernel costs 20–35 ms (measured for 300 MB), which would otherwise sit between a cancel
/// and the job thread becoming free again.
///
/// The thread is the reaper's own, started once with a small stack, not one borrowed from
/// Dispatch: a worker near its address-space cap (the moment large buffers are freed) may be
/// unable to start a thread, and Dispatch then retries forever, holding up the job thread
/// that handed the buffer over. Should the reaper's thread fail to start, buffers are freed
/// in place instead.
public enum BufferReaper {
    /// Smaller buffers are freed in place: handing them over costs more than it saves.
    static let threshold = 8 << 20
    private static let reaper = Reaper()

    /// Starts the reaper's thread now, while memory is plentiful (a process that will run
    /// under a tight cap calls this at startup). Later calls do nothing.
    public static func start() {
        _ = reaper
    }

    /// Takes the buffer out of `buffer` (leaving `nil`) and frees its memory off this thread,
    /// unless another copy still shares it.
    static func release(_ buffer: inout PixelBuffer?) {
        guard let taken = buffer else { return }
        buffer = nil
        if case .allocated(let memory) = taken.storage { release(memory) }
    }

    /// Drops this reference to `memory`, off this thread when it is large.
    static func release(_ memory: Allocation) {
        guard memory.count >= threshold else { return }
        let doomed = Doomed(memory)
        reaper.submit { doomed.drop() }
    }

    /// Waits until everything handed over so far has been freed (for measurements).
    static func drain() {
        let done = DispatchSemaphore(value: 0)
        reaper.submit { done.signal() }
        done.wait()
    }

    /// Calls `body` on the reaper's thread once everything handed over so far has been freed:
    /// how a caller that accounts for memory learns that a finished run's buffers are gone.
    public static func afterPendingFrees(_ body: @escaping @Sendable () -> Void) {
        reaper.submit(body)
    }

    private final class Doomed: @unchecked Sendable {
        // Touched only by the reaper after hand-over.
        private var memory: Allocation?
        init(_ memory: Allocation) { self.memory = memory }
        func drop() { memory = nil }
    }
}

/// One thread running what is submitted to it, in order.
private final class Reaper: Sendable {
    private let work = Lock<[@Sendable () -> Void]>([])
    private let available = DispatchSemaphore(value: 0)
    /// Whether the thread runs; written once, in `init`.
    private let running: Bool

    init() {
        running = Self.startThread()
    }

    func submit(_ body: @escaping @Sendable () -> Void) {
        guard running else { return body() }
        work.withLock { $0.append(body) }
        available.signal()
    }

    fileprivate func serve() -> Never {
        while true {
            available.wait()
            let next = work.withLock { $0.removeFirst() }
            next()
        }
    }

    /// Starts the thread that serves `BufferReaper.reaper`; false when it cannot be started.
    private static func startThread() -> Bool {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        // Frees and small closures: a small stack keeps the thread startable close to a cap.
        pthread_attr_setstacksize(&attributes, 256 << 10)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        #if canImport(Glibc)
        var thread = pthread_t()
        #else
        var thread: pthread_t?
        #endif
        return pthread_create(&thread, &attributes, { _ in
            // `reaper` is being initialised by the thread that started this one: reading it
            // here waits until that is done.
            BufferReaper.serveReaper()
        }, nil) == 0
    }
}

extension BufferReaper {
    fileprivate static func serveReaper() -> Never {
        reaper.serve()
    }
}
