/// The limits a URL fetch runs under. The defaults suit untrusted URLs.
public struct URLSourcePolicy: Sendable {
    public var addresses: AddressPolicy = .publicUnicastOnly
    /// The largest body accepted, declared or streamed.
    public var maxBytes: Int = 64 << 20
    /// How many redirects are followed; each one is checked like the first URL.
    public var maxRedirects: Int = 5
    /// For establishing each connection.
    public var connectTimeout: Duration = .seconds(5)
    /// The longest silence allowed: until the head arrives, and between body chunks.
    public var readTimeout: Duration = .seconds(15)
    /// For the whole fetch, redirects included.
    public var totalTimeout: Duration = .seconds(60)

    public init() {}
}
