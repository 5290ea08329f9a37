import Foundation
import Imaging
import ZeroMQ

/// A producer's connection to the Enlarger broker: submit JPEG resize requests, stream
/// their degraded and final results, cancel them.
///
/// **Threads.** One I/O thread, started by `init`, owns the DEALER socket; every method is
/// thread-safe and hands its work to that thread. Results come back through async sequences
/// and continuations; no method blocks a thread.
///
/// **Strict cancel.** Once `cancel(id)` has been called, or the task iterating a request's
/// events has been cancelled, nothing more about that request is delivered, not even events
/// already received (see `RequestEvents`).
///
/// **Nothing hangs.** While anything is outstanding the client pings the broker every
/// `heartbeatInterval` (or the broker's own interval from its Pong, if shorter); after
/// `missedHeartbeats` intervals without a word from it, every outstanding request and call
/// fails with `.brokerLost`, or `.brokerUnreachable` when no broker ever answered on the
/// connection, and the client connects afresh.
///
/// **Lifetime.** Call `close()` when done (or use `withEnlargerClient`): it fails whatever
/// is outstanding with `.closed` and stops the I/O thread.
public final class EnlargerClient: Sendable {
    public struct Configuration: Sendable {
        /// How often the client pings the broker while it has anything outstanding.
        public var heartbeatInterval: Duration
        /// Intervals without a message from the broker after which it is presumed gone.
        public var missedHeartbeats: Int

        public init(heartbeatInterval: Duration = .seconds(1), missedHeartbeats: Int = 3) {
            precondition(heartbeatInterval > .zero && missedHeartbeats >= 1, "invalid client heartbeat settings")
            self.heartbeatInterval = heartbeatInterval
            self.missedHeartbeats = missedHeartbeats
        }
    }

    private let registry: RequestRegistry

    /// Connects to the broker's client endpoint (`ipc://…` or `tcp://host:port`) and starts
    /// the I/O thread. The connection is made in the background: an endpoint where no broker
    /// listens is reported by the calls, as `.brokerUnreachable`.
    ///
    /// - Throws: `ZMQError` for an endpoint libzmq cannot use at all.
    public init(brokerEndpoint: String, configuration: Configuration = Configuration()) throws(ZMQError) {
        registry = RequestRegistry(mailbox: try Mailbox())
        let loop = try ClientLoop(endpoint: brokerEndpoint, configuration: configuration, registry: registry)
        let thread = Thread { loop.run() }
        thread.name = "enlarger-client-io"
        thread.start()
    }

    /// Submits `request` and returns its events. Never blocks and never throws: a request
    /// that cannot be sent (invalid id or options, an id live in this client, a closed
    /// client) fails through its sequence.
    public func submit(_ request: ResizeRequest) -> RequestEvents {
        RequestEvents(channel: registry.submit(request), registry: registry)
    }

    /// Cancels the request with this id, whichever connection submitted it.
    ///
    /// Before it suspends, the call marks this client's request with the id cancelled: from
    /// then on its sequence delivers nothing and simply ends. It then waits for the broker's
    /// answer.
    public func cancel(_ id: String) async throws(EnlargerClientError) -> CancelResult {
        try ResizeRequest.validate(id: id)
        // The continuation is created synchronously, so the request is marked before any suspension.
        return try await withCheckedContinuation { registry.cancel(id, waiter: $0) }.get()
    }

    /// Resizes one image and returns the final result (delivery `.final`). Cancelling the
    /// calling task cancels the request and throws `.cancelled`.
    public func resize(_ image: [UInt8], options: ResizeOptions,
                       id: String = UUID().uuidString) async throws(EnlargerClientError) -> EncodedImage {
        for try await event in submit(ResizeRequest(id: id, image: image, options: options, delivery: .final)) {
            if case .final(let result) = event { return result }
        }
        throw .cancelled
    }

    /// Asks the broker for a snapshot of its workers, queue and counters.
    public func status() async throws(EnlargerClientError) -> BrokerStatus {
        try await withCheckedContinuation { registry.status($0) }.get()
    }

    /// Fails every outstanding request and call with `.closed`, stops the I/O thread and
    /// returns once it has closed the socket. Later calls fail with `.closed`. Idempotent.
    public func close() async {
        await withCheckedContinuation { continuation in
            if !registry.close(continuation) { continuation.resume() }
        }
    }
}

/// Runs `body` with a client connected to `brokerEndpoint`, closing the client when `body`
/// returns or throws.
public func withEnlargerClient<Result>(
    brokerEndpoint: String,
    configuration: EnlargerClient.Configuration = EnlargerClient.Configuration(),
    isolation: isolated (any Actor)? = #isolation,
    _ body: (EnlargerClient) async throws -> Result
) async throws -> Result {
    let client = try EnlargerClient(brokerEndpoint: brokerEndpoint, configuration: configuration)
    do {
        let result = try await body(client)
        await client.close()
        return result
    } catch {
        await client.close()
        throw error
    }
}
