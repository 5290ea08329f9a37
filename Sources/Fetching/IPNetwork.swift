/// A block of addresses written in CIDR notation: `10.0.0.0/8`, `::1/128`, or a bare address
/// for a single host (`127.0.0.1` is `127.0.0.1/32`).
///
/// A network holds addresses of its own family only: `127.0.0.0/8` does not contain
/// `::ffff:127.0.0.1` (the address policy relates the two, not the network).
public struct IPNetwork: Hashable, Sendable, CustomStringConvertible {
    /// The first address of the block (host bits cleared).
    public let address: IPAddress
    public let prefixLength: Int

    /// Nil when the text is not an address, the prefix is not decimal digits within the
    /// family's width, or host bits are set (`10.0.0.1/8` is more likely a typo than a wish).
    public init?(_ cidr: String) {
        let parts = cidr.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(String(parts[0])) else { return nil }
        let width = address.isV4 ? 32 : 128
        var prefixLength = width
        if parts.count == 2 {
            let digits = parts[1].utf8
            guard (1...3).contains(digits.count), digits.allSatisfy(isDigit), let length = Int(parts[1]),
                  length <= width
            else { return nil }
            prefixLength = length
        }
        guard Self.masked(address, prefixLength) == address else { return nil }
        self.address = address
        self.prefixLength = prefixLength
    }

    public func contains(_ a: IPAddress) -> Bool {
        guard a.isV4 == address.isV4 else { return false }
        return Self.masked(a, prefixLength) == address
    }

    public var description: String { "\(address)/\(prefixLength)" }

    static func masked(_ a: IPAddress, _ prefixLength: Int) -> IPAddress {
        func mask64(_ bits: Int) -> UInt64 {
            bits <= 0 ? 0 : bits >= 64 ? .max : ~(UInt64.max >> bits)
        }
        switch a.value {
        case .v4(let bits):
            return IPAddress(v4: bits & UInt32(truncatingIfNeeded: mask64(prefixLength) >> 32))
        case .v6(let high, let low):
            return IPAddress(v6: high & mask64(prefixLength), low & mask64(prefixLength - 64))
        }
    }
}
