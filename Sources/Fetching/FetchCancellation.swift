import Locking

/// Cancels one fetch from any thread. Cancelling mid-download aborts the HTTP request at
/// once (no polling) and the fetch throws `.cancelled`; cancelling before the fetch starts, or
/// between its steps, makes it throw `.cancelled` without connecting again.
public final class FetchCancellation: Sendable {
    private struct State {
        var cancelled = false
        var nextToken = 0
        var handlers: [Int: @Sendable () -> Void] = [:]
    }

    private let state = Lock(State())

    public init() {}

    /// Idempotent. Runs the registered abort hooks on the calling thread.
    public func cancel() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.cancelled else { return [] }
            state.cancelled = true
            defer { state.handlers = [:] }
            return Array(state.handlers.values)
        }
        for handler in handlers { handler() }
    }

    public var isCancelled: Bool {
        state.withLock { $0.cancelled }
    }

    /// Registers `handler` to run on `cancel()`; when already cancelled, runs it now and
    /// returns nil. Pass the token to `removeHandler` once the work it aborts is over.
    func addHandler(_ handler: @escaping @Sendable () -> Void) -> Int? {
        let token = state.withLock { state -> Int? in
            guard !state.cancelled else { return nil }
            state.nextToken += 1
            state.handlers[state.nextToken] = handler
            return state.nextToken
        }
        if token == nil { handler() }
        return token
    }

    func removeHandler(_ token: Int?) {
        guard let token else { return }
        state.withLock { _ = $0.handlers.removeValue(forKey: token) }
    }
}
