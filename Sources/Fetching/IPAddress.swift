/// An IPv4 or IPv6 address, as the address policy sees it and as a connection is made to it.
///
/// `init?(_:)` reads only the strict textual forms: a dotted quad of four decimal parts with
/// no leading zeros, or RFC 4291 IPv6 text (with an optional dotted-quad tail, no zone). The
/// looser forms a browser accepts in a URL host (`0x7f.1`, `2130706433`) are read by
/// `SourceURL`, which turns them into the address they denote.
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    public enum Value: Hashable, Sendable {
        case v4(UInt32)
        /// The 128 bits, most significant half first.
        case v6(high: UInt64, low: UInt64)
    }

    public var value: Value

    public init(v4 bits: UInt32) {
        value = .v4(bits)
    }

    public init(v6 high: UInt64, _ low: UInt64) {
        value = .v6(high: high, low: low)
    }

    /// `bytes` must hold 4 (IPv4) or 16 (IPv6) bytes in network order; otherwise nil.
    public init?(bytes: some Collection<UInt8>) {
        let array = Array(bytes)
        switch array.count {
        case 4:
            self.init(v4: array.reduce(0) { $0 << 8 | UInt32($1) })
        case 16:
            let high = array[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
            let low = array[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
            self.init(v6: high, low)
        default:
            return nil
        }
    }

    public init?(_ text: String) {
        if text.contains(":") {
            guard let address = Self.parseV6(Array(text.utf8)) else { return nil }
            self = address
        } else {
            guard let bits = Self.parseDottedQuad(Array(text.utf8)) else { return nil }
            self.init(v4: bits)
        }
    }

    public var isV4: Bool {
        if case .v4 = value { return true }
        return false
    }

    /// The address in network order: 4 or 16 bytes.
    public var bytes: [UInt8] {
        switch value {
        case .v4(let bits):
            return (0..<4).map { UInt8(truncatingIfNeeded: bits >> (24 - 8 * $0)) }
        case .v6(let high, let low):
            return (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) }
                + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
        }
    }

    /// Dotted quad, or RFC 5952 text for IPv6 (lowercase, the longest run of zero groups
    /// compressed; an IPv4-mapped address keeps its dotted tail, `::ffff:127.0.0.1`).
    public var description: String {
        switch value {
        case .v4(let bits):
            return Self.dottedQuad(bits)
        case .v6(let high, let low):
            if high == 0, low >> 32 == 0xffff {
                return "::ffff:" + Self.dottedQuad(UInt32(truncatingIfNeeded: low))
            }
            let groups = (0..<4).map { UInt16(truncatingIfNeeded: high >> (48 - 16 * $0)) }
                + (0..<4).map { UInt16(truncatingIfNeeded: low >> (48 - 16 * $0)) }
            // The longest run of two or more zero groups; the first one on a tie.
            var best: Range<Int>? = nil
            var index = 0
            while index < 8 {
                guard groups[index] == 0 else { index += 1; continue }
                var end = index
                while end < 8, groups[end] == 0 { end += 1 }
                if end - index >= 2, end - index > (best?.count ?? 0) { best = index..<end }
                index = end
            }
            func hex(_ slice: ArraySlice<UInt16>) -> String {
                slice.map { String($0, radix: 16) }.joined(separator: ":")
            }
            guard let best else { return hex(groups[...]) }
            return hex(groups[..<best.lowerBound]) + "::" + hex(groups[best.upperBound...])
        }
    }

    static func dottedQuad(_ bits: UInt32) -> String {
        (0..<4).map { String((bits >> (24 - 8 * $0)) & 0xff) }.joined(separator: ".")
    }

    /// Four decimal parts 0...255, no signs, no leading zeros (`010` is octal to some readers).
    static func parseDottedQuad(_ text: some Collection<UInt8>) -> UInt32? {
        let parts = text.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bits: UInt32 = 0
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy(isDigit),
                  part.count == 1 || part.first != UInt8(ascii: "0")
            else { return nil }
            let octet = part.reduce(0) { $0 * 10 + UInt32($1 - UInt8(ascii: "0")) }
            guard octet <= 255 else { return nil }
            bits = bits << 8 | octet
        }
        return bits
    }

    /// RFC 4291 section 2.2: eight groups of one to four hex digits, at most one `::`, and an
    /// optional dotted quad standing for the last two groups.
    static func parseV6(_ text: [UInt8]) -> IPAddress? {
        guard !text.isEmpty else { return nil }
        var head: [UInt16] = []
        var tail: [UInt16] = []
        var compressed = false
        var index = 0
        if text.starts(with: [UInt8(ascii: ":"), UInt8(ascii: ":")]) {
            compressed = true
            index = 2
            if index == text.count { return IPAddress(v6: 0, 0) }
        } else if text.first == UInt8(ascii: ":") {
            return nil
        }
        while index < text.count {
            var end = index
            while end < text.count, text[end] != UInt8(ascii: ":") { end += 1 }
            let field = text[index..<end]
            if field.contains(UInt8(ascii: ".")) {
                // A dotted quad may only end the address.
                guard end == text.count, let v4 = parseDottedQuad(field) else { return nil }
                let groups = [UInt16(v4 >> 16), UInt16(v4 & 0xffff)]
                if compressed { tail += groups } else { head += groups }
            } else {
                guard (1...4).contains(field.count), field.allSatisfy(isHexDigit) else { return nil }
                let group = field.reduce(UInt16(0)) { $0 << 4 | UInt16(hexValue($1)) }
                if compressed { tail.append(group) } else { head.append(group) }
            }
            if end == text.count { break }
            // `end` is at a colon: a second one right after it is the `::`.
            if end + 1 < text.count, text[end + 1] == UInt8(ascii: ":") {
                guard !compressed else { return nil }
                compressed = true
                index = end + 2
                if index == text.count { break }
            } else {
                guard end + 1 < text.count else { return nil }  // a trailing single colon
                index = end + 1
            }
        }
        let count = head.count + tail.count
        if compressed {
            guard count <= 7 else { return nil }
        } else {
            guard count == 8 else { return nil }
        }
        let groups = head + Array(repeating: 0, count: 8 - count) + tail
        let high = groups[0..<4].reduce(UInt64(0)) { $0 << 16 | UInt64($1) }
        let low = groups[4..<8].reduce(UInt64(0)) { $0 << 16 | UInt64($1) }
        return IPAddress(v6: high, low)
    }
}

func isDigit(_ c: UInt8) -> Bool {
    (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c)
}

func isHexDigit(_ c: UInt8) -> Bool {
    isDigit(c) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(c | 0x20)
}

func hexValue(_ c: UInt8) -> UInt8 {
    isDigit(c) ? c - UInt8(ascii: "0") : (c | 0x20) - UInt8(ascii: "a") + 10
}
