import Dispatch
import Locking
import NIOCore
import NIOPosix

/// Downloads a source image from an http or https URL, refusing what could reach inside the
/// network it runs in.
///
/// One fetch is a loop of hops on the calling thread: read the URL strictly (`SourceURL`),
/// resolve its host once (`NameLookup`), refuse it unless the address policy permits every
/// address the name resolved to, then exchange one request with the first of them. A
/// redirect starts the next hop from its `Location`, checked from scratch; the body of a 2xx
/// response is streamed under the size limit.
///
/// No rebinding: the request goes to the very address that was checked. AsyncHTTPClient is
/// given that address through `dnsOverride` (host name → address), so it connects without a
/// lookup of its own, while the Host header, the TLS server name (SNI) and the certificate
/// check keep using the host name of the URL. `dnsOverride` is a setting of a whole client,
/// so each hop gets a short-lived `HTTPClient` on this fetcher's event loop, shut down (and
/// its connection closed) when the hop ends; nothing is pooled between fetches.
public final class URLFetcher: Sendable {
    public let policy: URLSourcePolicy
    let lookup: BoundedLookup
    let group: MultiThreadedEventLoopGroup
    private let isShutDown = Lock(false)

    public init(policy: URLSourcePolicy = .init(), lookup: NameLookup = .system) {
        self.policy = policy
        self.lookup = BoundedLookup(lookup)
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    }

    /// Stops the event loop. Call it once no fetch is running; later calls do nothing, and
    /// a fetch after it throws `.unavailable`.
    public func shutdown() {
        let first = isShutDown.withLock { isShutDown in
            defer { isShutDown = true }
            return !isShutDown
        }
        guard first else { return }
        // The group is ours and idle: the only failure is "already shut down".
        try? group.syncShutdownGracefully()
    }

    /// Downloads `url`, blocking the calling thread (a job thread: never an event loop
    /// thread, nor a thread of Swift's cooperative pool) until the body is in or the fetch
    /// fails.
    ///
    /// `events` is called in order (see `FetchEvent`) from a Swift concurrency thread, so it
    /// must not block; every call has returned when `fetch` returns. `enough`, when given, is
    /// called the same way with the body received so far after each chunk; once it returns
    /// true the download stops, with no `.finished`, and the body comes back with
    /// `complete: false` (a caller wanting only an image's header reads no more than that).
    ///
    /// `cancellation` aborts the request in flight at once; the fetch then throws
    /// `.cancelled`, even if the body was in.
    public func fetch(
        _ url: String,
        for principal: String = "",
        cancellation: FetchCancellation,
        events: @escaping @Sendable (FetchEvent) -> Void,
        enough: (@Sendable ([UInt8]) -> Bool)? = nil
    ) throws(FetchError) -> FetchedBody {
        guard !isShutDown.withLock({ $0 }) else { throw .unavailable("the fetcher has been shut down") }
        let deadline = ContinuousClock.now + policy.totalTimeout
        var current = try SourceURL(parsing: url)
        var resolved: [String: [IPAddress]] = [:]
        var redirects = 0
        while true {
            guard !cancellation.isCancelled else { throw .cancelled }
            let address = try checkedAddress(of: current, resolved: &resolved, deadline: deadline, principal: principal,
                                             cancellation: cancellation)
            guard ContinuousClock.now < deadline else { throw totalTimeout }
            let outcome = try exchange(
                Hop(url: current, address: address, deadline: deadline, events: events, enough: enough),
                cancellation: cancellation
            )
            guard !cancellation.isCancelled else { throw .cancelled }
            switch outcome {
            case .body(let body):
                return body
            case .redirect(let status, let location):
                current = try redirectTarget(from: current, status: status, location: location, redirectsSoFar: redirects)
                redirects += 1
            }
        }
    }

    /// Where a redirect leads, if it may be followed: within `maxRedirects`, a URL as strict as
    /// the first, and never from https down to http. Its address is checked by the next hop.
    func redirectTarget(
        from current: SourceURL, status: Int, location: String, redirectsSoFar: Int
    ) throws(FetchError) -> SourceURL {
        guard redirectsSoFar < policy.maxRedirects else {
            throw .refused("more than \(policy.maxRedirects) redirects (HTTP \(status) from \(current))")
        }
        let next = try current.resolving(location)
        if current.scheme == "https", next.scheme == "http" {
            throw .refused("redirect from https to http (\(current) → \(next))")
        }
        return next
    }

    /// The address to connect to for `url`, after the policy has passed every address its
    /// host stands for. A name is resolved once per fetch: a redirect back to the same host
    /// reuses the answer rather than asking again (and perhaps being told something else).
    ///
    /// The lookup is bounded like a connection: it is abandoned at the connect timeout (or the
    /// total deadline, if sooner), or at once when the fetch is cancelled.
    func checkedAddress(
        of url: SourceURL, resolved: inout [String: [IPAddress]],
        deadline: ContinuousClock.Instant = .now + .seconds(3600), principal: String = "",
        cancellation: FetchCancellation = FetchCancellation()
    ) throws(FetchError) -> IPAddress {
        switch url.host {
        case .address(let address):
            guard policy.addresses.permits(address) else {
                throw .refused("\(url.host) is a \(address.category) address")
            }
            return address
        case .name(let name):
            let addresses: [IPAddress]
            if let known = resolved[name] {
                addresses = known
            } else {
                let connectBy = ContinuousClock.now + policy.connectTimeout
                addresses = try lookup.resolve(
                    name, for: principal, deadline: min(connectBy, deadline),
                    timeoutName: connectBy <= deadline ? "connect timeout of \(policy.connectTimeout)" : "total timeout of \(policy.totalTimeout)",
                    cancellation: cancellation)
                resolved[name] = addresses
            }
            guard let first = addresses.first else { throw .unavailable("cannot resolve \(name): no addresses") }
            // A name that resolves to public and private addresses alike is refused whole:
            // which one a connection would use is not ours to predict.
            if let refused = addresses.first(where: { !policy.addresses.permits($0) }) {
                throw .refused("\(name) resolves to \(refused), a \(refused.category) address")
            }
            return first
        }
    }

    var totalTimeout: FetchError {
        .timedOut("total timeout of \(policy.totalTimeout) exceeded")
    }
}
