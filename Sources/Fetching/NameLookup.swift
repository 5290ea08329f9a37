import Dispatch
import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Turns a host name into the addresses it stands for. The fetcher calls it once per host
/// per fetch, on the fetching thread, and connects only to an address it returned.
public struct NameLookup: Sendable {
    let resolve: @Sendable (String) throws(FetchError) -> [IPAddress]

    /// `resolve` gets a lowercased name without a trailing dot; it returns the addresses in
    /// order of preference, or throws (`.unavailable` naming the cause, as a rule).
    public init(_ resolve: @escaping @Sendable (String) throws(FetchError) -> [IPAddress]) {
        self.resolve = resolve
    }

    /// `getaddrinfo`, both families, in the order it gives. It blocks its thread for as long
    /// as the system resolver takes; the fetcher runs it through `BoundedLookup`, which gives
    /// up on it at the fetch's connect timeout or on cancel.
    public static let system = NameLookup { name throws(FetchError) in
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(name, nil, &hints, &list)
        guard status == 0 else {
            let reason = status == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(status))
            throw .unavailable("cannot resolve \(name): \(reason) (getaddrinfo \(status))")
        }
        defer { freeaddrinfo(list) }
        var addresses: [IPAddress] = []
        var entry = list
        while let info = entry?.pointee {
            entry = info.ai_next
            guard let sockaddr = info.ai_addr else { continue }
            let address: IPAddress?
            switch Int32(info.ai_family) {
            case AF_INET:
                address = sockaddr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                    withUnsafeBytes(of: v4.pointee.sin_addr) { IPAddress(bytes: $0) }
                }
            case AF_INET6:
                address = sockaddr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                    withUnsafeBytes(of: v6.pointee.sin6_addr) { IPAddress(bytes: $0) }
                }
            default:
                address = nil
            }
            if let address, !addresses.contains(address) { addresses.append(address) }
        }
        guard !addresses.isEmpty else { throw .unavailable("cannot resolve \(name): no addresses") }
        return addresses
    }
}

/// Runs name lookups on threads of their own, so that the fetch waiting for one can give up
/// on it: `getaddrinfo` cannot be interrupted and may take as long as the system resolver
/// likes (tens of seconds for a name whose servers never answer). A lookup is abandoned at
/// its deadline or on cancel; its thread finishes on its own and its answer is dropped.
/// At most `maxOutstanding` lookups (abandoned ones included) run at once: beyond that a
/// fetch fails at once rather than adding threads. A principal holds more than
/// `maxPerPrincipal` of them (a quarter) only while as many again stay free for the others:
/// a producer naming hosts whose servers never answer ties up its own lookups, and at least a
/// quarter of the pool stays for everyone else, while a producer alone still has three quarters.
final class BoundedLookup: Sendable {
    let lookup: NameLookup
    let maxOutstanding: Int
    let maxPerPrincipal: Int
    private let outstanding = Lock(Outstanding())

    private struct Outstanding {
        var total = 0
        var byPrincipal: [String: Int] = [:]
    }

    init(_ lookup: NameLookup, maxOutstanding: Int = 32, maxPerPrincipal: Int? = nil) {
        self.lookup = lookup
        self.maxOutstanding = maxOutstanding
        self.maxPerPrincipal = maxPerPrincipal ?? max(1, maxOutstanding / 4)
    }

    /// Lookups whose threads have not returned, abandoned ones included.
    var running: Int { outstanding.withLock { $0.total } }

    /// `principal`'s lookups whose threads have not returned.
    func running(for principal: String) -> Int { outstanding.withLock { $0.byPrincipal[principal, default: 0] } }

    /// The addresses of `name`, or `.timedOut` once `deadline` passes, or `.cancelled`.
    func resolve(
        _ name: String, for principal: String = "", deadline: ContinuousClock.Instant, timeoutName: String,
        cancellation: FetchCancellation
    ) throws(FetchError) -> [IPAddress] {
        guard !cancellation.isCancelled else { throw .cancelled }
        let refusal = outstanding.withLock { counts -> String? in
            guard counts.total < maxOutstanding else {
                return "\(maxOutstanding) name lookups are already outstanding"
            }
            let own = counts.byPrincipal[principal, default: 0]
            guard own < maxPerPrincipal || counts.total + 1 <= maxOutstanding - maxPerPrincipal else {
                return "\(own) name lookups of this principal's are already outstanding, and the last "
                    + "\(maxPerPrincipal) of \(maxOutstanding) are kept for other principals"
            }
            counts.total += 1
            counts.byPrincipal[principal] = own + 1
            return nil
        }
        if let refusal { throw .unavailable("cannot resolve \(name): \(refusal)") }
        let answer = Answer()
        let lookup = lookup
        let thread = Thread { [outstanding] in
            let result = Result { () throws(FetchError) in try lookup.resolve(name) }
            outstanding.withLock { counts in
                counts.total -= 1
                let own = counts.byPrincipal[principal, default: 1] - 1
                counts.byPrincipal[principal] = own > 0 ? own : nil
            }
            answer.give(result)
        }
        thread.name = "enlarger-lookup"
        thread.start()
        let token = cancellation.addHandler { answer.wake() }
        defer { cancellation.removeHandler(token) }
        while true {
            if cancellation.isCancelled { throw .cancelled }
            if let result = answer.result { return try result.get() }
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw .timedOut("resolving \(name) took longer than the \(timeoutName)") }
            answer.wait(upTo: left)
        }
    }

    /// One lookup's answer, and the signal that wakes its waiter.
    private final class Answer: Sendable {
        private let state = Lock<Result<[IPAddress], FetchError>?>(nil)
        private let signal = DispatchSemaphore(value: 0)

        var result: Result<[IPAddress], FetchError>? { state.withLock { $0 } }

        func give(_ result: Result<[IPAddress], FetchError>) {
            state.withLock { $0 = result }
            signal.signal()
        }

        func wake() { signal.signal() }

        func wait(upTo duration: Duration) {
            let (seconds, attoseconds) = duration.components
            let nanoseconds = Int(clamping: seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
            _ = signal.wait(timeout: .now() + .nanoseconds(max(0, nanoseconds)))
        }
    }
}
