import Locking

/// One request's events on their way from the client's I/O thread to the consumer.
///
/// **This is where strict cancel is enforced, in `State.take()`, and nowhere else.** Events
/// wait in a locked queue; an event leaves it only through `take()`, under the lock, after
/// checking `cancelled`. `cancel()` sets that flag under the same lock (and empties the
/// queue to free memory), so once it has returned no event, already queued or still to
/// come, is ever handed to the consumer. A suspended consumer is merely woken: it goes back
/// through `take()` and learns there that the sequence has ended.
final class RequestChannel: Sendable {
    let id: String
    private let state = Lock(State())

    /// What the consumer gets on its next step.
    enum Step: Equatable {
        case event(RequestEvent)
        case failure(EnlargerClientError)
        case end
    }

    private struct State {
        var events: [RequestEvent] = []
        /// Set with or after the last event: the sequence ends (or throws) once `events` is empty.
        var ending: Ending?
        var cancelled = false
        var waiter: CheckedContinuation<Void, Never>?

        enum Ending {
            case finished
            case failed(EnlargerClientError)
        }

        var isEnded: Bool { ending != nil }

        /// The only way out of the queue. Checks the cancel flag before anything else.
        mutating func take() -> Step? {
            if cancelled { return .end }
            if !events.isEmpty { return .event(events.removeFirst()) }
            switch ending {
            case .finished?: return .end
            case .failed(let error)?:
                ending = .finished  // an error is thrown once; the sequence then just ends
                return .failure(error)
            case nil: return nil
            }
        }

        mutating func wake() {
            waiter?.resume()
            waiter = nil
        }
    }

    init(id: String) {
        self.id = id
    }

    // MARK: I/O thread side

    /// Queues `event`; when `terminal`, it is the last one. Ignored once the request has ended
    /// or was cancelled.
    func deliver(_ event: RequestEvent, terminal: Bool) {
        state.withLock { state in
            // Not an enforcement point: `take()` would never hand the event out after a
            // cancel; dropping it here only saves keeping the image.
            guard !state.isEnded, !state.cancelled else { return }
            state.events.append(event)
            if terminal { state.ending = .finished }
            state.wake()
        }
    }

    /// Ends the request with `error`, after the events already queued. Ignored once the
    /// request has ended or was cancelled.
    func fail(_ error: EnlargerClientError) {
        state.withLock { state in
            guard !state.isEnded, !state.cancelled else { return }
            state.ending = .failed(error)
            state.wake()
        }
    }

    // MARK: Consumer side

    /// Marks the request cancelled: from now on the consumer gets nothing but the end.
    func cancel() {
        state.withLock { state in
            state.cancelled = true
            state.events.removeAll()
            state.wake()
        }
    }

    /// Whether the consumer has cancelled; such a channel only waits for the broker's
    /// terminal frame before it is forgotten.
    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Whether the request's last event or its failure has been queued.
    var hasEnded: Bool { state.withLock { $0.isEnded } }

    /// Events received and not yet taken (for tests that race a cancel against them).
    var bufferedCount: Int { state.withLock { $0.events.count } }

    /// The consumer's next step if one is ready, without waiting.
    func nextIfReady() -> Step? {
        state.withLock { $0.take() }
    }

    /// The consumer's next step, waiting for one if needed. One consumer at a time.
    func next() async -> Step {
        while true {
            if let step = nextIfReady() { return step }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                state.withLock { state in
                    precondition(state.waiter == nil, "RequestEvents iterated by two tasks at once")
                    let ready = state.cancelled || !state.events.isEmpty || state.isEnded
                    if ready { continuation.resume() } else { state.waiter = continuation }
                }
            }
        }
    }
}
