/// Why a fetch gave no body. Each case carries what a person needs to see the cause.
public enum FetchError: Error, Sendable, Equatable {
    /// The URL cannot be read, or is a form refused outright (userinfo, a scheme other than
    /// http/https, a non-ASCII host, …).
    case badURL(String)
    /// The fetch was refused on safety grounds: the address policy, an https → http redirect,
    /// too many redirects.
    case refused(String)
    /// The source could not be had: name resolution, connection refused or reset, an HTTP
    /// status other than 2xx, a TLS failure.
    case unavailable(String)
    /// The declared or the streamed body is over the policy's `maxBytes`.
    case tooLarge(limit: Int)
    /// Which of the connect, read or total timeouts ran out.
    case timedOut(String)
    case cancelled

    /// One line, for a person.
    public var message: String {
        switch self {
        case .badURL(let reason): "bad URL: \(reason)"
        case .refused(let reason): "refused: \(reason)"
        case .unavailable(let reason): "unavailable: \(reason)"
        case .tooLarge(let limit): "too large: the body is over the limit of \(limit) bytes"
        case .timedOut(let which): "timed out: \(which)"
        case .cancelled: "cancelled"
        }
    }
}
