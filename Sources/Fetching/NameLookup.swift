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

    /// `getaddrinfo`, both families, in the order it gives. It blocks the calling thread for as
    /// long as the system resolver takes; the fetch's total timeout is checked after it returns.
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
