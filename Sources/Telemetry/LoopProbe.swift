import Foundation
import Synchronization

/// Lets another thread ask an event loop to run something on the loop's own thread, and wait
/// for it: how a scrape reads the state a single-threaded loop owns, and how `/healthz`
/// learns that the loop still turns.
///
/// The asking thread calls `ask(timeout:)`, which wakes the loop and waits. The loop calls
/// `answer(_:)` once per turn; it costs one atomic load when nobody asked. Every `ask` that
/// returns `true` saw an `answer` that started after it asked, so what the loop published in
/// that answer is at least as new as the question.
public final class LoopProbe: Sendable {
    private let wake: @Sendable () -> Void
    /// Questions asked so far (the latest question's number).
    private let asked = Atomic<UInt64>(0)
    /// Guards `answered`, which only ever grows; waiters sleep on it.
    private let condition = NSCondition()
    nonisolated(unsafe) private var answered: UInt64 = 0

    /// - Parameter wake: Interrupts the loop's wait (a pipe write, a mailbox post); called
    ///   from the asking thread.
    public init(wake: @escaping @Sendable () -> Void) {
        self.wake = wake
    }

    /// Wakes the loop and waits until it has answered, at most `timeout`. `false` means the
    /// loop did not turn in time: it is stuck, paused, or gone.
    public func ask(timeout: Duration) -> Bool {
        let question = asked.add(1, ordering: .acquiringAndReleasing).newValue
        wake()
        let (seconds, attoseconds) = timeout.components
        let limit = Date(timeIntervalSinceNow: Double(seconds) + Double(attoseconds) * 1e-18)
        condition.lock()
        defer { condition.unlock() }
        while answered < question {
            guard condition.wait(until: limit) else { return answered >= question }
        }
        return true
    }

    /// On the loop's thread, once per turn: when a question waits, runs `body` (which
    /// publishes what the askers want) and releases them.
    public func answer(_ body: () -> Void) {
        let question = asked.load(ordering: .acquiring)
        guard question > lastAnswered else { return }
        body()
        condition.lock()
        answered = max(answered, question)
        condition.broadcast()
        condition.unlock()
        lastAnswered = question
    }

    // Touched only by the loop's thread, in `answer`.
    nonisolated(unsafe) private var lastAnswered: UInt64 = 0
}
