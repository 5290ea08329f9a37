import EnlargerProtocol
import Foundation

/// What makes two requests the same work: the source, the spec's meaning, the delivery, and
/// the scope results may be shared in (a principal, or everyone).
///
/// The source is named in one of three ways (see CACHE AND SHARED JOBS in client.proto):
/// - `digest`: inline bytes, by the SHA-256 the client computed;
/// - `location`: a file path or URL as submitted, before any worker has opened it. It names
///   no version, so it lets identical requests join a job that has not read anything yet,
///   but never reads or fills the cache;
/// - `version`: what the worker found when it opened the file or URL (JobSourceOpened).
struct ShareKey: Hashable {
    enum Kind: UInt8 {
        case digest
        case location
        case version
    }

    /// The principal's name; nil where the operator shares results across principals.
    let scope: String?
    let kind: Kind
    let source: Data
    /// `ResizeSpec.normalisedForSharing(delivery:)`.
    let spec: [UInt8]
    let delivery: Enlarger_V1_Delivery

    /// Whether results may be cached under the key: only a key naming a version can be.
    var namesVersion: Bool { kind != .location }

    /// The key of the terminal result this work gives. A progressive request ends with the
    /// same final result as a final-only one, so both read and fill the same cache entry.
    var cacheKey: ShareKey {
        guard delivery == .progressive else { return self }
        return ShareKey(scope: scope, kind: kind, source: source, spec: spec, delivery: .final)
    }

    /// The same work, with the source named by the version a worker found.
    func withVersion(_ identity: Data) -> ShareKey {
        ShareKey(scope: scope, kind: .version, source: identity, spec: spec, delivery: delivery)
    }

    /// Bytes the key itself occupies, for the cache's accounting.
    var byteCount: Int { (scope?.utf8.count ?? 0) + source.count + spec.count + 64 }
}
