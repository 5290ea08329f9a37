/// What an address is for, after the IANA special-purpose registries (RFC 6890 and its
/// updates). Only `.publicUnicast` is fetched from by default.
///
/// IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:0:0/96`, IPv4-translated
/// `::ffff:0:0:0/96`, IPv4-compatible `::/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo
/// `2001::/32`) take the category of the IPv4 address they carry: `[::ffff:127.0.0.1]` is
/// loopback, and a 6to4 address of a private network is private.
public enum AddressCategory: Hashable, Sendable {
    case publicUnicast
    case loopback
    /// 10/8, 172.16/12, 192.168/16.
    case privateUse
    /// fc00::/7.
    case uniqueLocal
    case linkLocal
    /// fec0::/10, deprecated but still routed by some networks.
    case siteLocal
    case multicast
    /// 0.0.0.0 and `::` (Linux connects them to the local host).
    case unspecified
    /// 0.0.0.0/8 other than 0.0.0.0.
    case thisNetwork
    case broadcast
    /// 100.64/10, carrier-grade NAT.
    case sharedAddressSpace
    case documentation
    case benchmarking
    /// Cloud instance metadata endpoints (169.254.169.254, fd00:ec2::254, 100.100.100.200, …):
    /// they hand out credentials to whoever asks from inside the instance.
    case metadata
    /// Everything else that is not globally routable unicast: future use, protocol
    /// assignments, discard-only, IPv6 outside 2000::/3.
    case reserved

    public init(classifying a: IPAddress) {
        if Self.metadataAddresses.contains(a) {
            self = .metadata
            return
        }
        switch a.value {
        case .v4:
            self = Self.first(in: Self.v4Table, containing: a) ?? .publicUnicast
        case .v6:
            if let embedded = a.embeddedV4 {
                self = AddressCategory(classifying: embedded)
            } else {
                self = Self.first(in: Self.v6Table, containing: a)
                    ?? (Self.globalUnicast.contains(a) ? .publicUnicast : .reserved)
            }
        }
    }

    private static func first(in table: [(IPNetwork, AddressCategory)], containing a: IPAddress) -> AddressCategory? {
        table.first { $0.0.contains(a) }?.1
    }

    // Known metadata endpoints of the large clouds. Most sit in link-local or unique-local
    // space and are refused anyway; naming them keeps them refused even when an allow-list
    // opens their block (see `AddressPolicy`).
    static let metadataAddresses = Set([
        "169.254.169.254",  // AWS, GCP, Azure, OpenStack, DigitalOcean, …
        "169.254.170.2",  // AWS ECS task metadata
        "169.254.170.23",  // AWS EKS pod identity
        "169.254.0.23",  // Tencent Cloud
        "100.100.100.200",  // Alibaba Cloud
        "192.0.0.192",  // Oracle Cloud
        "fd00:ec2::254",  // AWS over IPv6
        "fd00:ec2::23",  // AWS EKS pod identity over IPv6
    ].map { IPAddress($0)! })

    // First match wins: the more specific blocks come before the blocks that hold them.
    private static let v4Table = table([
        "0.0.0.0/32": .unspecified,
        "0.0.0.0/8": .thisNetwork,
        "10.0.0.0/8": .privateUse,
        "100.64.0.0/10": .sharedAddressSpace,
        "127.0.0.0/8": .loopback,
        "169.254.0.0/16": .linkLocal,
        "172.16.0.0/12": .privateUse,
        "192.0.0.0/24": .reserved,  // IETF protocol assignments
        "192.0.2.0/24": .documentation,
        "192.88.99.0/24": .reserved,  // deprecated 6to4 relay anycast
        "192.168.0.0/16": .privateUse,
        "198.18.0.0/15": .benchmarking,
        "198.51.100.0/24": .documentation,
        "203.0.113.0/24": .documentation,
        "224.0.0.0/4": .multicast,
        "255.255.255.255/32": .broadcast,
        "240.0.0.0/4": .reserved,
    ])

    // IPv6 blocks that carry an IPv4 address are handled by `embeddedV4` before this table.
    private static let v6Table = table([
        "::/128": .unspecified,
        "::1/128": .loopback,
        "64:ff9b:1::/48": .reserved,  // local-use NAT64: translates into local networks
        "100::/64": .reserved,  // discard-only
        "2001:2::/48": .benchmarking,
        "2001:db8::/32": .documentation,
        "2001::/23": .reserved,  // IETF protocol assignments
        "3fff::/20": .documentation,
        "5f00::/16": .reserved,  // SRv6 segment identifiers
        "fc00::/7": .uniqueLocal,
        "fe80::/10": .linkLocal,
        "fec0::/10": .siteLocal,
        "ff00::/8": .multicast,
    ])

    private static let globalUnicast = IPNetwork("2000::/3")!

    private static func table(_ rows: KeyValuePairs<String, AddressCategory>) -> [(IPNetwork, AddressCategory)] {
        rows.map { (IPNetwork($0.key)!, $0.value) }
    }
}

extension IPAddress {
    public var category: AddressCategory { AddressCategory(classifying: self) }

    /// The IPv4 address an IPv6 address stands for or tunnels to, in the forms that carry one;
    /// nil for IPv4 addresses, `::` and `::1`.
    public var embeddedV4: IPAddress? {
        guard case .v6(let high, let low) = value else { return nil }
        let last32 = UInt32(truncatingIfNeeded: low)
        switch (high, low >> 32) {
        case (0, 0xffff),  // ::ffff:a.b.c.d, IPv4-mapped
             (0, 0xffff_0000):  // ::ffff:0:a.b.c.d, IPv4-translated
            return IPAddress(v4: last32)
        case (0, 0):  // ::a.b.c.d, IPv4-compatible (deprecated)
            return last32 <= 1 ? nil : IPAddress(v4: last32)
        case (0x0064_ff9b_0000_0000, 0):  // 64:ff9b::/96, NAT64
            return IPAddress(v4: last32)
        default:
            break
        }
        if high >> 48 == 0x2002 {  // 2002:aabb:ccdd::/48, 6to4
            return IPAddress(v4: UInt32(truncatingIfNeeded: high >> 16))
        }
        if high >> 32 == 0x2001_0000 {  // Teredo: the client's address, inverted, in the last 32 bits
            return IPAddress(v4: ~last32)
        }
        return nil
    }

    /// For an IPv4-mapped IPv6 address, the IPv4 address it is (the same endpoint on a
    /// dual-stack socket); nil otherwise.
    var mappedV4: IPAddress? {
        guard case .v6(0, let low) = value, low >> 32 == 0xffff else { return nil }
        return IPAddress(v4: UInt32(truncatingIfNeeded: low))
    }
}

extension AddressCategory: CustomStringConvertible {
    public var description: String {
        switch self {
        case .publicUnicast: "public"
        case .loopback: "loopback"
        case .privateUse: "private-use"
        case .uniqueLocal: "unique-local"
        case .linkLocal: "link-local"
        case .siteLocal: "site-local"
        case .multicast: "multicast"
        case .unspecified: "unspecified"
        case .thisNetwork: "this-network"
        case .broadcast: "broadcast"
        case .sharedAddressSpace: "shared (carrier-grade NAT)"
        case .documentation: "documentation"
        case .benchmarking: "benchmarking"
        case .metadata: "cloud metadata"
        case .reserved: "reserved"
        }
    }
}
