/// Which addresses a fetch may connect to: public unicast ones, and those in `allowed`.
///
/// `allowed` overrides the category refusal (a test server on `127.0.0.1/32`, an internal
/// image store on `10.1.0.0/16`) with one exception: a cloud metadata endpoint is let through
/// only by a network naming exactly that address (`169.254.169.254/32`), so that opening a
/// block such as `100.64.0.0/10` does not open the metadata service inside it by accident.
/// An IPv4-mapped IPv6 address is matched against `allowed` as the IPv4 address it is.
/// An IPv6 form that carries an IPv4 address (mapped, translated, compatible, NAT64, 6to4,
/// Teredo) is otherwise let through only by an IPv6 network of at least /96, one that names
/// such forms on purpose: opening all of IPv6 (`::/0`) opens no private or loopback IPv4
/// through `[::ffff:127.0.0.1]` and its kin.
public struct AddressPolicy: Sendable {
    public static let publicUnicastOnly = AddressPolicy(allowed: [])

    public var allowed: [IPNetwork]

    public init(allowed: [IPNetwork]) {
        self.allowed = allowed
    }

    public func permits(_ a: IPAddress) -> Bool {
        let category = a.category
        let forms = [a] + (a.mappedV4.map { [$0] } ?? [])
        let carriesV4 = a.embeddedV4 != nil
        let listed = allowed.contains { network in
            forms.contains { form in
                network.contains(form) && (category != .metadata || network.prefixLength == (form.isV4 ? 32 : 128))
                    && (!carriesV4 || form.isV4 || network.prefixLength >= 96)
            }
        }
        return listed || category == .publicUnicast
    }
}
