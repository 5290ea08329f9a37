import EnlargerProtocol
import Foundation

/// What makes two requests the same work: the image's digest, the spec's meaning, the
/// delivery, and the scope results may be shared in (a principal, or everyone).
struct ShareKey: Hashable {
    /// The principal's name; nil where the operator shares results across principals.
    let scope: String?
    let digest: Data
    /// `ResizeSpec.normalisedForSharing(delivery:)`.
    let spec: [UInt8]
    let delivery: Enlarger_V1_Delivery

    /// The key of the terminal result this work gives. A progressive request ends with the
    /// same final result as a final-only one, so both read and fill the same cache entry.
    var cacheKey: ShareKey {
        guard delivery == .progressive else { return self }
        return ShareKey(scope: scope, digest: digest, spec: spec, delivery: .final)
    }

    /// Bytes the key itself occupies, for the cache's accounting.
    var byteCount: Int { (scope?.utf8.count ?? 0) + digest.count + spec.count + 64 }
}
