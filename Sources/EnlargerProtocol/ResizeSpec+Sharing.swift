import SwiftProtobuf

extension Enlarger_V1_ResizeSpec {
    /// The spec's meaning as bytes: two specs that ask for the same output give the same
    /// bytes, so identical requests can be recognised (see CACHE AND SHARED JOBS in
    /// client.proto). Defaults are filled in (quality 0 is 80, fail_on DEFAULT is ERROR, no
    /// background is white), fields the output ignores are cleared (`format` when `accept`
    /// is set; everything but `fail_on` for an info request), and accepted types are reduced
    /// to their bare, lower-case names with unknown ones dropped, as the worker reads them.
    /// Call it on a validated spec.
    public func normalisedForSharing(delivery: Enlarger_V1_Delivery) -> [UInt8] {
        var spec = self
        if spec.failOn == .default { spec.failOn = .error }
        if delivery == .info {
            spec = Enlarger_V1_ResizeSpec.with { $0.failOn = spec.failOn }
        } else {
            if spec.quality == 0 { spec.quality = 80 }
            if !spec.hasBackground { spec.background = 0xFF_FFFF }
            if !spec.accept.isEmpty {
                spec.accept = spec.accept.map(Self.bareType).filter(Self.contentTypes.contains)
                spec.format = .jpeg
            }
        }
        // Binary encoding is deterministic for a message without maps, as this one is.
        return (try? spec.serializedBytes()) ?? []
    }
}
