/// An http or https URL that is safe to act on: read strictly, so that what the address
/// policy checks is what a browser, a proxy or a server would take the URL to mean.
///
/// Refused outright (`.badURL`): schemes other than http and https; userinfo in any form
/// (`user@`, `user:pw@`, a bare `@`), which only serves to disguise the host; backslashes,
/// whitespace, control characters and non-ASCII text anywhere (no IDNA: a host must be given
/// in its ASCII form); percent-encoded hosts; empty hosts; ports that are not 1...65535 in
/// decimal digits; IPv6 zone identifiers.
///
/// Hosts that a browser reads as IPv4 although they are not dotted quads (`2130706433`,
/// `0x7f.1`, `0177.0.0.1`, `127.1`, `127.0.0.1.`) are read the same way (the WHATWG URL
/// rules), so that they reach the address policy as the address they denote.
public struct SourceURL: Sendable, Hashable, CustomStringConvertible {
    public enum Host: Hashable, Sendable, CustomStringConvertible {
        /// Lowercased, without a trailing dot.
        case name(String)
        case address(IPAddress)

        /// As written in a URL: IPv6 addresses in brackets.
        public var description: String {
            switch self {
            case .name(let name): name
            case .address(let address): address.isV4 ? "\(address)" : "[\(address)]"
            }
        }
    }

    /// "http" or "https".
    public var scheme: String
    public var host: Host
    /// Explicit or the scheme's default.
    public var port: Int
    /// Starts with "/"; characters a URL may not carry are percent-encoded; no fragment.
    public var pathAndQuery: String

    public init(parsing text: String) throws(FetchError) {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw .badURL("empty URL") }
        if bytes.contains(where: { $0 >= 0x80 }) {
            throw .badURL("non-ASCII characters are not accepted (no IDNA); give the host in its ASCII (punycode) form and percent-encode the path")
        }
        if let c = bytes.first(where: { $0 <= 0x20 || $0 == 0x7f }) {
            throw .badURL(c == 0x20 ? "space in URL" : "whitespace or control character (0x\(String(c, radix: 16))) in URL")
        }
        if bytes.contains(UInt8(ascii: "\\")) { throw .badURL("backslash in URL") }

        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0,
              Self.isScheme(bytes[..<colon])
        else { throw .badURL("no scheme") }
        let scheme = String(decoding: bytes[..<colon], as: UTF8.self).lowercased()
        guard scheme == "http" || scheme == "https" else {
            throw .badURL("scheme \(scheme) is not http or https")
        }
        let afterScheme = bytes[(colon + 1)...]
        guard afterScheme.starts(with: "//".utf8) else { throw .badURL("expected // after \(scheme):") }

        let authorityStart = afterScheme.startIndex + 2
        let authorityEnd = bytes[authorityStart...].firstIndex { c in
            c == UInt8(ascii: "/") || c == UInt8(ascii: "?") || c == UInt8(ascii: "#")
        } ?? bytes.endIndex
        let authority = bytes[authorityStart..<authorityEnd]
        if authority.contains(UInt8(ascii: "@")) { throw .badURL("userinfo (user@host) is not accepted") }
        guard !authority.isEmpty else { throw .badURL("empty host") }

        let hostText: ArraySlice<UInt8>
        let portText: ArraySlice<UInt8>?
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else {
                throw .badURL("unterminated IPv6 address")
            }
            hostText = authority[(authority.startIndex + 1)..<close]
            let after = authority[(close + 1)...]
            if after.isEmpty {
                portText = nil
            } else if after.first == UInt8(ascii: ":") {
                portText = after.dropFirst()
            } else {
                throw .badURL("unexpected text after the IPv6 address")
            }
        } else if let portColon = authority.firstIndex(of: UInt8(ascii: ":")) {
            hostText = authority[..<portColon]
            portText = authority[(portColon + 1)...]
        } else {
            hostText = authority
            portText = nil
        }

        let host = try Self.parseHost(hostText, bracketed: authority.first == UInt8(ascii: "["))
        let port = try portText.map { text throws(FetchError) in try Self.parsePort(text) }
            ?? (scheme == "https" ? 443 : 80)

        var rest = bytes[authorityEnd...]
        if let hash = rest.firstIndex(of: UInt8(ascii: "#")) { rest = rest[..<hash] }
        var path = Self.percentEncoded(rest)
        if !path.hasPrefix("/") { path = "/" + path }

        self.scheme = scheme
        self.host = host
        self.port = port
        self.pathAndQuery = path
    }

    public var defaultPort: Int { scheme == "https" ? 443 : 80 }

    /// Scheme, host and port as written in a URL, the port only when not the default.
    public var origin: String {
        "\(scheme)://\(host)" + (port == defaultPort ? "" : ":\(port)")
    }

    public var description: String { origin + pathAndQuery }

    /// The URL a redirect's `Location` names: absolute (`https://…`), scheme-relative
    /// (`//host/…`), absolute-path (`/…`), query-only (`?…`) or relative (`img/a.jpg`,
    /// `../b.jpg`), resolved against this URL (RFC 3986 section 5.2) and then read as
    /// strictly as the first URL.
    public func resolving(_ location: String) throws(FetchError) -> SourceURL {
        let bytes = Array(location.utf8)
        guard !bytes.isEmpty else { throw .badURL("empty Location") }
        if let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0, Self.isScheme(bytes[..<colon]) {
            return try SourceURL(parsing: location)
        }
        if location.hasPrefix("//") { return try SourceURL(parsing: scheme + ":" + location) }
        if location.hasPrefix("#") { return self }

        let reference = location.prefix { $0 != "#" }
        let split = reference.firstIndex(of: "?") ?? reference.endIndex
        let (path, query) = (reference[..<split], reference[split...])
        let basePath = pathAndQuery.prefix { $0 != "?" }
        let merged: String
        if path.hasPrefix("/") {
            merged = String(path)
        } else if path.isEmpty {
            merged = String(basePath)
        } else {
            merged = String(basePath[...(basePath.lastIndex(of: "/") ?? basePath.startIndex)]) + path
        }
        return try SourceURL(parsing: origin + Self.removingDotSegments(merged[...]) + query)
    }
}

extension SourceURL {
    static func isScheme(_ text: ArraySlice<UInt8>) -> Bool {
        guard let first = text.first, isAlpha(first) else { return false }
        return text.allSatisfy { c in
            isAlpha(c) || isDigit(c) || c == UInt8(ascii: "+") || c == UInt8(ascii: "-") || c == UInt8(ascii: ".")
        }
    }

    static func parsePort(_ text: ArraySlice<UInt8>) throws(FetchError) -> Int {
        guard !text.isEmpty else { throw .badURL("empty port") }
        guard text.allSatisfy(isDigit) else {
            throw .badURL("port \(String(decoding: text, as: UTF8.self)) is not a decimal number")
        }
        let significant = text.drop { $0 == UInt8(ascii: "0") }
        let value = significant.count > 5 ? Int.max : significant.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
        guard (1...65535).contains(value) else {
            throw .badURL("port \(String(decoding: text, as: UTF8.self)) is outside 1...65535")
        }
        return value
    }

    static func parseHost(_ text: ArraySlice<UInt8>, bracketed: Bool) throws(FetchError) -> Host {
        guard !text.isEmpty else { throw .badURL("empty host") }
        if bracketed {
            if text.contains(UInt8(ascii: "%")) { throw .badURL("IPv6 zone identifiers are not accepted") }
            guard let address = IPAddress.parseV6(Array(text)) else {
                throw .badURL("[\(String(decoding: text, as: UTF8.self))] is not an IPv6 address")
            }
            return .address(address)
        }
        if text.contains(UInt8(ascii: "%")) { throw .badURL("percent-encoded hosts are not accepted") }
        if let c = text.first(where: { c in
            !(isAlpha(c) || isDigit(c) || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_"))
        }) {
            throw .badURL("character \(Character(Unicode.Scalar(c))) is not accepted in a host")
        }
        let lowered = text.map { isAlpha($0) ? $0 | 0x20 : $0 }
        var labels = lowered.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        if labels.count > 1, labels.last!.isEmpty { labels.removeLast() }  // one trailing dot

        // The WHATWG rule: a host whose last label is a number is an IPv4 address or nothing.
        if let last = labels.last, Self.endsInNumber(last) {
            guard let bits = Self.parseLooseIPv4(labels) else {
                throw .badURL("\(String(decoding: text, as: UTF8.self)) is neither a valid IPv4 address nor a name")
            }
            return .address(IPAddress(v4: bits))
        }
        guard labels.allSatisfy({ !$0.isEmpty && $0.count <= 63 }), lowered.count <= 254 else {
            throw .badURL("\(String(decoding: text, as: UTF8.self)) is not a valid host name")
        }
        return .name(labels.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "."))
    }

    static func endsInNumber(_ label: ArraySlice<UInt8>) -> Bool {
        guard !label.isEmpty else { return false }
        return label.allSatisfy(isDigit) || parseLooseIPv4Number(label) != nil
    }

    /// The WHATWG IPv4 parser: one to four parts, each decimal, octal (leading 0) or hex
    /// (0x); the last part fills the bytes the others leave (`127.1` is 127.0.0.1).
    static func parseLooseIPv4(_ labels: [ArraySlice<UInt8>]) -> UInt32? {
        guard (1...4).contains(labels.count) else { return nil }
        var numbers: [UInt64] = []
        for label in labels {
            guard let number = parseLooseIPv4Number(label) else { return nil }
            numbers.append(number)
        }
        guard numbers.dropLast().allSatisfy({ $0 <= 255 }),
              numbers.last! < UInt64(1) << (8 * (5 - numbers.count))
        else { return nil }
        var value = numbers.last!
        for (index, number) in numbers.dropLast().enumerated() {
            value += number << (8 * (3 - index))
        }
        return UInt32(value)
    }

    static func parseLooseIPv4Number(_ label: ArraySlice<UInt8>) -> UInt64? {
        guard !label.isEmpty else { return nil }
        var digits = label
        var radix: UInt64 = 10
        if label.count >= 2, label.first == UInt8(ascii: "0"), label.dropFirst().first == UInt8(ascii: "x") {
            digits = label.dropFirst(2)
            radix = 16
        } else if label.count >= 2, label.first == UInt8(ascii: "0") {
            digits = label.dropFirst()
            radix = 8
        }
        var value: UInt64 = 0
        for c in digits {
            let digit: UInt64
            switch radix {
            case 16:
                guard isHexDigit(c) else { return nil }
                digit = UInt64(hexValue(c))
            default:
                guard isDigit(c), UInt64(c - UInt8(ascii: "0")) < radix else { return nil }
                digit = UInt64(c - UInt8(ascii: "0"))
            }
            // Anything past 2^32 is out of range for every part; stop growing.
            value = min(value * radix + digit, UInt64(1) << 33)
        }
        return value
    }

    /// Keeps RFC 3986 path and query characters and valid `%XX` escapes; encodes the rest
    /// (`"`, `<`, `>`, `` ` ``, `{`, `}`, `|`, `^`, `[`, `]`, a stray `%`).
    static func percentEncoded(_ bytes: ArraySlice<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let c = bytes[index]
            if c == UInt8(ascii: "%"), index + 2 < bytes.endIndex,
               isHexDigit(bytes[index + 1]), isHexDigit(bytes[index + 2])
            {
                out.append(c)
            } else if isAlpha(c) || isDigit(c) || "-._~!$&'()*+,;=:@/?".utf8.contains(c) {
                out.append(c)
            } else {
                out += "%\(c < 16 ? "0" : "")\(String(c, radix: 16, uppercase: true))".utf8
            }
            index += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// RFC 3986 section 5.2.4, on a path without its query.
    static func removingDotSegments(_ path: Substring) -> String {
        var output: [Substring] = []
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        for (index, segment) in segments.enumerated() {
            let isLast = index == segments.count - 1
            switch segment {
            case ".":
                if isLast { output.append("") }
            case "..":
                if !output.isEmpty { output.removeLast() }
                if isLast { output.append("") }
            default:
                output.append(segment)
            }
        }
        return "/" + output.joined(separator: "/")
    }
}

func isAlpha(_ c: UInt8) -> Bool {
    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(c | 0x20)
}
