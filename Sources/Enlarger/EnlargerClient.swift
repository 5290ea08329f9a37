// A producer needs only `import Enlarger`: the request and result types come with it, and
// the keys a tcp connection needs.
@_exported import ImageModel
@_exported import struct ZeroMQ.CurveClientCredentials
import EnlargerProtocol
import Foundation
import ZeroMQ

/// A producer's connection to the Enlarger broker: submit resize requests (JPEG, PNG, WebP, HEIC or
/// AVIF in; the output format chosen by `ResizeOptions.format` or `accept`), stream
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
/// `heartbeatInterval` (or the broker's own interval from its Accepted or Pong, if
/// shorter); after `missedHeartbeats` intervals without a word from it, every outstanding
/// request and call fails with `.brokerLost`, or `.brokerUnreachable` when no broker ever
/// answered on the connection, and the client connects afresh. Every `syncInterval` it asks
/// the broker which of its requests it still holds, and fails the forgotten ones at once
/// with `.failed(.requestLost, …)` (their end was lost with a reset connection). A request
/// with a `timeout` fails by then even if the broker cannot say so.
///
/// **Identity.** The client's socket has a random, stable routing id: after a connection
/// reset, libzmq reconnects under the same id and the broker delivers what waited for it.
/// A request whose id still belongs to an earlier request of this client that the broker
/// may not have ended yet (one cancelled, timed out, or left behind with a silent
/// connection) is sent once the broker's end of that one is heard: about one round trip
/// after `cancel(id)`, so that no frame of the old request is taken for the new one.
///
/// **Broker restarts.** A broker that restarted has forgotten every request. By default the
/// client submits its unfinished requests again, with the same ids, to the new instance (a
/// request whose degraded result was delivered asks for the final one only, so at most one
/// final is ever delivered); with `resubmitAfterBrokerRestart` off they fail `.brokerLost`.
///
/// **Lifetime.** Call `close()` when done (or use `withEnlargerClient`): it fails whatever
/// is outstanding with `.closed` and stops the I/O thread.
public final class EnlargerClient: Sendable {
    public struct Configuration: Sendable {
        /// How often the client pings the broker while it has anything outstanding.
        public var heartbeatInterval: Duration
        /// Intervals without a message from the broker after which it is presumed gone.
        public var missedHeartbeats: Int
        /// How often the client asks the broker which of its accepted requests it still holds.
        public var syncInterval: Duration
        /// Submit unfinished requests again when the broker restarted (see the type's notes).
        public var resubmitAfterBrokerRestart: Bool
        /// The largest image the client sends before it has heard the broker's own limit
        /// (`Pong.max_input_bytes`); larger ones are refused locally with `.rejected(.tooLarge, …)`.
        public var maxInputBytes: Int
        /// Keys for a broker that requires CURVE (every tcp broker unless run insecurely).
        public var curve: CurveClientCredentials?
        /// Connect to a `tcp://` endpoint without `curve` keys. Off by default: such a client
        /// is refused at `init` (fail closed), since anyone on the network could read its
        /// images or pose as the broker. For closed test networks only; `ipc://` needs no keys.
        public var allowInsecureTCP = false

        public init(heartbeatInterval: Duration = .seconds(1), missedHeartbeats: Int = 3,
                    syncInterval: Duration = .seconds(2), resubmitAfterBrokerRestart: Bool = true,
                    maxInputBytes: Int = 64 << 20) {
            precondition(heartbeatInterval > .zero && missedHeartbeats >= 1, "invalid client heartbeat settings")
            precondition(syncInterval > .zero && maxInputBytes > 0, "invalid client settings")
            self.heartbeatInterval = heartbeatInterval
            self.missedHeartbeats = missedHeartbeats
            self.syncInterval = syncInterval
            self.resubmitAfterBrokerRestart = resubmitAfterBrokerRestart
            self.maxInputBytes = maxInputBytes
        }
    }

    private let registry: RequestRegistry

    /// Connects to the broker's client endpoint (`ipc://…` or `tcp://host:port`) and starts
    /// the I/O thread. The connection is made in the background: an endpoint where no broker
    /// listens is reported by the calls, as `.brokerUnreachable`.
    ///
    /// - Throws: `.insecureEndpoint` for a `tcp://` endpoint without `configuration.curve`
    ///   (unless `allowInsecureTCP`); `.transport` for an endpoint libzmq cannot use at all.
    public init(brokerEndpoint: String, configuration: Configuration = Configuration()) throws(EnlargerClientError) {
        if brokerEndpoint.hasPrefix("tcp://"), configuration.curve == nil, !configuration.allowInsecureTCP {
            throw .insecureEndpoint(
                "refusing to connect to \(brokerEndpoint) without authentication: set Configuration.curve "
                    + "(CurveClientCredentials(keyFile:serverPublicKeyFile:), keys made by `enlarger keygen`), "
                    + "or allowInsecureTCP on a closed network")
        }
        do throws(ZMQError) {
            registry = RequestRegistry(mailbox: try Mailbox())
            let loop = try ClientLoop(endpoint: brokerEndpoint, configuration: configuration, registry: registry)
            let thread = Thread { loop.run() }
            thread.name = "enlarger-client-io"
            thread.start()
        } catch {
            throw .transport(error)
        }
    }

    /// Submits `request` and returns its events. Never blocks and never throws: a request
    /// that cannot be sent (invalid id or options, an id live in this client, a closed
    /// client) fails through its sequence.
    public func submit(_ request: ResizeRequest) -> RequestEvents {
        RequestEvents(channel: registry.submit(request), registry: registry)
    }

    /// Cancels the request with this id, whichever of this principal's connections
    /// submitted it.
    ///
    /// **Strict cancel holds from the moment of the call**, not from its return: the call
    /// marks this client's requests with the id cancelled synchronously, before it first
    /// suspends, so from then on their sequences deliver nothing (not even events already
    /// received) and simply end. It then waits for the broker's answer, which throws
    /// `.failed(.requestLost, …)` in the rare case that a reset connection lost it and it
    /// cannot be asked for again without hitting a later request with the same id.
    nonisolated(nonsending)
    public func cancel(_ id: String) async throws(EnlargerClientError) -> CancelResult {
        try ResizeRequest.validate(id: id)
        // Runs on the caller's executor (no hop before the body), and the continuation's body
        // runs before the first suspension: the request is marked cancelled within the call.
        return try await withCheckedContinuation { registry.cancel(id, waiter: $0) }.get()
    }

    /// Cancels like `cancel(_:)` without waiting for the broker's answer: when this returns,
    /// this client's requests with the id are marked cancelled (nothing more about them is
    /// delivered) and the Cancel is on its way to the broker. For callers that cannot await
    /// (callbacks, signal handlers).
    public func cancelNow(_ id: String) throws(EnlargerClientError) {
        try ResizeRequest.validate(id: id)
        registry.cancel(id, waiter: nil)
    }

    /// Resizes one image and returns the final result (delivery `.final`). Cancelling the
    /// calling task cancels the request and throws `.cancelled`.
    public func resize(_ image: [UInt8], options: ResizeOptions, id: String = UUID().uuidString,
                       timeout: Duration? = nil, priority: Priority = .interactive) async throws(EnlargerClientError) -> EncodedImage {
        var request = ResizeRequest(id: id, image: image, options: options, delivery: .final, timeout: timeout)
        request.priority = priority
        request.placeholder = false  // only the final is returned
        return try await resize(request)
    }

    /// Runs `request` and returns its terminal result: the final one, or the degraded one
    /// for delivery `.degraded`. Cancelling the calling task cancels the request and throws
    /// `.cancelled`.
    public func resize(_ request: ResizeRequest) async throws(EnlargerClientError) -> EncodedImage {
        for try await event in submit(request) {
            switch event {
            case .final(let result): return result
            case .degraded(let result) where request.delivery == .degraded: return result
            case .accepted, .started, .placeholder, .degraded, .info, .download: continue
            }
        }
        throw .cancelled
    }

    /// Runs `requests` as one batch: all of them, or none. Returns their terminal results in
    /// input order once every item has its result.
    ///
    /// Nothing is sent unless every request is valid (ids unique within the batch, options
    /// within range). As soon as one item fails, the broker cancels the others and this
    /// throws `.batchFailed(index:id:reason:)` naming the first item to fail (the lowest
    /// index when several fail at once) and how it failed. An item cancelled from another
    /// connection cancels the batch: this throws `.cancelled`. Cancelling the calling task
    /// cancels every item (strictly: nothing more of them is delivered) and throws
    /// `.cancelled`. At most 1024 items; `id` names the batch (1 to 64 bytes of UTF-8,
    /// unique among this principal's live batches).
    public func resize(
        batch requests: [ResizeRequest], id batchID: String = UUID().uuidString
    ) async throws(EnlargerClientError) -> [EncodedImage] {
        guard (1...Int(WireLimits.maxBatchSize)).contains(requests.count) else {
            throw .rejected(.invalidArgument, "a batch has 1 to \(WireLimits.maxBatchSize) items, got \(requests.count)")
        }
        do throws(EnlargerClientError) {
            try ResizeRequest.validate(id: batchID)
        } catch {
            throw .invalidRequestID("batch id: \(error)")
        }
        var seen: [String: Int] = [:]
        for (index, request) in requests.enumerated() {
            do throws(EnlargerClientError) {
                try request.check()
            } catch {
                throw .batchFailed(index: index, id: request.id, reason: error)
            }
            if let first = seen.updateValue(index, forKey: request.id) {
                throw .batchFailed(index: index, id: request.id,
                                   reason: .duplicateID("request id \(request.id) is also item \(first) of the batch"))
            }
        }
        let items = requests.enumerated().map { index, request in
            var item = request
            item.batch = (batchID, index, requests.count)
            return item
        }
        let outcomes = await withTaskGroup(of: BatchItemOutcome.self) { group in
            for (index, item) in items.enumerated() {
                group.addTask {
                    do throws(EnlargerClientError) {
                        return BatchItemOutcome(index: index, result: .success(try await self.resize(item)))
                    } catch {
                        return BatchItemOutcome(index: index, result: .failure(error))
                    }
                }
            }
            var outcomes: [Result<EncodedImage, EnlargerClientError>?] = Array(repeating: nil, count: items.count)
            var failing = false
            while let outcome = await group.next() {
                outcomes[outcome.index] = outcome.result
                // The broker cancels the rest of a failed batch; stop waiting for them here too.
                if case .failure(let error) = outcome.result, !failing, Self.failsBatch(error) {
                    failing = true
                    for (other, item) in items.enumerated() where outcomes[other] == nil { try? cancelNow(item.id) }
                }
            }
            return outcomes.map { $0! }
        }
        var images: [EncodedImage] = []
        var firstFailure: (Int, EnlargerClientError)?
        for (index, outcome) in outcomes.enumerated() {
            switch outcome {
            case .success(let image): images.append(image)
            case .failure(let error):
                if firstFailure == nil, Self.failsBatch(error) { firstFailure = (index, error) }
            }
        }
        if let (index, error) = firstFailure { throw .batchFailed(index: index, id: items[index].id, reason: error) }
        guard images.count == items.count else { throw .cancelled }
        return images
    }

    /// Whether an item's error is what ended its batch, rather than the batch's end reaching
    /// it (a cancel, a refusal for a batch already ended).
    private static func failsBatch(_ error: EnlargerClientError) -> Bool {
        switch error {
        case .cancelled, .rejected(.batchEnded, _): false
        default: true
        }
    }

    /// What `image`'s header says (size, orientation, colour, profile, thumbnail), read by a
    /// worker without decoding pixels. Fails like a resize would for an input in none of the
    /// formats the worker reads, damaged (as `failOn` says) or over the limits.
    public func info(_ image: [UInt8], failOn: FailOn = .error, id: String = UUID().uuidString,
                     timeout: Duration? = nil) async throws(EnlargerClientError) -> ImageInfo {
        try await info(source: .bytes(image), failOn: failOn, id: id, timeout: timeout)
    }

    /// What the header of the image at `source` says. A worker reads no more of a file or a
    /// download than the header needs.
    public func info(source: ImageSource, failOn: FailOn = .error, id: String = UUID().uuidString,
                     timeout: Duration? = nil) async throws(EnlargerClientError) -> ImageInfo {
        var request = ResizeRequest(id: id, source: source, options: ResizeOptions(failOn: failOn), delivery: .final,
                                    timeout: timeout)
        request.infoOnly = true
        for try await event in submit(request) {
            if case .info(let info) = event { return info }
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

/// One item of a batch, as its task ended.
private struct BatchItemOutcome: Sendable {
    let index: Int
    let result: Result<EncodedImage, EnlargerClientError>
}
