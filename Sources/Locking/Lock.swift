#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value guarded by a `pthread_mutex_t`: the same shape as `Synchronization.Lock`
/// (`init(_:)`, `withLock`), so one can replace the other by a rename.
///
/// Why not `Lock`: on Linux its contended path waits on a futex directly, which
/// ThreadSanitizer does not see, so TSan reports races on values a `Lock` guards correctly,
/// and those false reports bury the real ones. TSan intercepts `pthread_mutex_lock` and
/// `pthread_mutex_unlock`, so with this lock it sees every happens-before edge.
///
/// The mutex lives in its own heap allocation and never moves (a `pthread_mutex_t` must not),
/// and is an error-checking one: locking it again from the thread that holds it traps rather
/// than deadlocks, as `Lock` does.
///
/// Like `Lock`, a `Lock` is `Sendable` whatever `State` is: the value goes in `sending`,
/// and `withLock` only lends it out in place under the lock and returns a `sending` result,
/// so the guarded value can never be reached from outside the lock.
public final class Lock<State>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    // Accessed only by `withLock`, with `mutex` held.
    private var state: State

    public init(_ initial: consuming sending State) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        defer { pthread_mutexattr_destroy(&attributes) }
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ERRORCHECK))
        Self.check(pthread_mutex_init(mutex, &attributes), "pthread_mutex_init")
        state = initial
    }

    deinit {
        Self.check(pthread_mutex_destroy(mutex), "pthread_mutex_destroy")
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the state, blocking the calling thread until the
    /// lock is free. `body` must not call `withLock` on the same lock (that traps).
    public func withLock<Result, E: Error>(
        _ body: (inout sending State) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        Self.check(pthread_mutex_lock(mutex), "pthread_mutex_lock")
        defer { Self.check(pthread_mutex_unlock(mutex), "pthread_mutex_unlock") }
        return try body(&state)
    }

    // Every failure of these calls is a programmer error (recursive locking, a corrupt
    // mutex, unlocking from the wrong thread): trap with the code.
    private static func check(_ code: Int32, _ call: StaticString) {
        if code != 0 { fatalError("\(call) failed with error \(code)") }
    }
}
