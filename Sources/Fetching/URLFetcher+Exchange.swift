import AsyncHTTPClient
import Dispatch
import Locking
import NIOCore
import NIOHTTP1

// One hop of a fetch: a single request to a checked address. The request runs in a task
// (its I/O on the fetcher's event loop) while the calling thread waits for it; the task is
// never left running: the calling thread alone enforces the total timeout and turns a
// cancellation into `task.cancel()`, the task then ends promptly (AsyncHTTPClient aborts the
// request, and the hop's client is shut down, which closes the connection), and the calling
// thread returns only after it has ended, so no event is delivered after `fetch` returns.

extension URLFetcher {
    struct Hop: Sendable {
        var url: SourceURL
        var address: IPAddress
        var deadline: ContinuousClock.Instant
        var events: @Sendable (FetchEvent) -> Void
        var enough: (@Sendable ([UInt8]) -> Bool)?
    }

    enum Outcome: Sendable {
        case body(FetchedBody)
        case redirect(status: Int, location: String)
    }

    static let redirectStatuses: Set<UInt> = [301, 302, 303, 307, 308]

    func exchange(_ hop: Hop, cancellation: FetchCancellation) throws(FetchError) -> Outcome {
        let finished = DispatchSemaphore(value: 0)
        let result = Lock<Result<Outcome, FetchError>?>(nil)
        // Why the task was cancelled from outside; the first reason wins.
        let stopReason = Lock<FetchError?>(nil)
        let policy = self.policy
        let group = self.group
        let task = Task {
            let outcome = await Self.run(hop, policy: policy, group: group)
            result.withLock { $0 = outcome }
            finished.signal()
        }
        @Sendable func stop(_ reason: FetchError) {
            stopReason.withLock { if $0 == nil { $0 = reason } }
            task.cancel()
        }
        let token = cancellation.addHandler { stop(.cancelled) }
        defer { cancellation.removeHandler(token) }

        let (seconds, attoseconds) = max(.zero, hop.deadline - ContinuousClock.now).components
        let nanoseconds = min(seconds, 1 << 32) * 1_000_000_000 + attoseconds / 1_000_000_000
        if finished.wait(timeout: .now() + .nanoseconds(Int(nanoseconds))) == .timedOut {
            stop(totalTimeout)
            finished.wait()
        }
        let outcome = result.withLock { $0! }
        if case .failure = outcome, let reason = stopReason.withLock({ $0 }) { throw reason }
        return try outcome.get()
    }

    static func run(_ hop: Hop, policy: URLSourcePolicy, group: any EventLoopGroup) async -> Result<Outcome, FetchError> {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(policy.connectTimeout), read: TimeAmount(policy.readTimeout)),
            decompression: .disabled
        )
        // One checked address, one attempt: retrying a refused connection until the connect
        // timeout would only delay the error.
        configuration.connectionPool.retryConnectionEstablishment = false
        if case .name(let name) = hop.url.host {
            configuration.dnsOverride = [name: hop.address.description]
        }
        do {
            return .success(
                try await HTTPClient.withHTTPClient(eventLoopGroup: group, configuration: configuration) { client in
                    try await download(hop, policy: policy, client: client)
                }
            )
        } catch let error as FetchError {
            return .failure(error)
        } catch {
            return .failure(translate(error, hop: hop, policy: policy))
        }
    }

    private static func download(_ hop: Hop, policy: URLSourcePolicy, client: HTTPClient) async throws -> Outcome {
        var request = HTTPClientRequest(url: hop.url.description)
        request.headers.add(name: "User-Agent", value: "Enlarger")
        request.headers.add(name: "Accept-Encoding", value: "identity")
        let response = try await client.execute(request, deadline: .now() + TimeAmount(hop.deadline - .now))

        let status = response.status.code
        if redirectStatuses.contains(status) {
            guard let location = response.headers.first(name: "location") else {
                throw FetchError.unavailable("HTTP \(status) redirect without a Location from \(hop.url)")
            }
            return .redirect(status: Int(status), location: location)
        }
        guard (200..<300).contains(status) else {
            throw FetchError.unavailable("HTTP \(status) \(response.status.reasonPhrase) from \(hop.url)")
        }

        let expected = contentLength(response.headers)
        if let expected, expected > policy.maxBytes { throw FetchError.tooLarge(limit: policy.maxBytes) }
        let head = FetchedHead(finalURL: hop.url, validator: validator(response.headers), expectedBytes: expected)
        hop.events(.started(head))

        var bytes: [UInt8] = []
        // The declared size is reserved only for a whole download: one that `enough` may
        // stop after a header should not allocate for the rest. Without a Content-Length the
        // limit is reserved (address space only, until written): growing by doubling would
        // hold up to twice the limit for a moment, beyond what the worker admitted.
        if hop.enough == nil { bytes.reserveCapacity(expected ?? policy.maxBytes) }
        var throttle = ProgressThrottle(interval: .milliseconds(250))
        for try await chunk in response.body {
            guard chunk.readableBytes <= policy.maxBytes - bytes.count else {
                throw FetchError.tooLarge(limit: policy.maxBytes)
            }
            bytes += chunk.readableBytesView
            if let enough = hop.enough, enough(bytes) {
                // Leaving the body unread ends the request; the hop's client closes the connection.
                return .body(FetchedBody(head: head, bytes: bytes, complete: false))
            }
            if throttle.shouldReport(at: .now) {
                hop.events(.progress(bytes: bytes.count, expectedBytes: expected))
            }
        }
        hop.events(.finished(bytes: bytes.count))
        return .body(FetchedBody(head: head, bytes: bytes, complete: true))
    }

    /// The Content-Length when it is one plain decimal number.
    static func contentLength(_ headers: HTTPHeaders) -> Int? {
        guard let text = headers.first(name: "content-length"), (1...18).contains(text.utf8.count),
              text.utf8.allSatisfy(isDigit)
        else { return nil }
        return Int(text)
    }

    /// What names this version of the body, or nil when nothing does (then the result is
    /// neither cached nor shared by version).
    static func validator(_ headers: HTTPHeaders) -> String? {
        // A weak ETag (W/"…") names content that is only "equivalent": not this version's bytes.
        if let etag = headers.first(name: "etag"), !etag.hasPrefix("W/") { return "etag:\(etag)" }
        // HTTP dates count whole seconds: a file rewritten within the second of its last
        // modification keeps its Last-Modified. RFC 9110 §8.8.2.2 holds it strong only when
        // the response's Date is at least a second later.
        guard let lastModified = headers.first(name: "last-modified"),
              let modified = HTTPDate.seconds(lastModified),
              let date = headers.first(name: "date").flatMap(HTTPDate.seconds),
              date >= modified + 1
        else { return nil }
        return "last-modified:\(lastModified)"
    }

    private static func translate(_ error: any Error, hop: Hop, policy: URLSourcePolicy) -> FetchError {
        if error is CancellationError { return .cancelled }
        let target = "\(hop.url.origin) (\(hop.address))"
        if let error = error as? HTTPClientError {
            switch error {
            case .cancelled:
                return .cancelled
            case .readTimeout:
                return .timedOut("read timeout: \(target) sent nothing for \(policy.readTimeout)")
            case .connectTimeout, .getConnectionFromPoolTimeout:
                return .timedOut("connect timeout: no connection to \(target) within \(policy.connectTimeout)")
            case .deadlineExceeded:
                return .timedOut("total timeout of \(policy.totalTimeout) exceeded")
            case .remoteConnectionClosed:
                return .unavailable("\(target) closed the connection")
            default:
                break
            }
        }
        return .unavailable("\(target): \(error)")
    }
}
