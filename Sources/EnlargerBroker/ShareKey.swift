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
    /// `ResizeSpec.sharingKey(delivery:)`: the worker's own reading, in canonical form.
    let spec: [UInt8]
    let delivery: Enlarger_V1_Delivery

    /// Whether results may be cached under the key: only a key naming a version can be.
    var namesVersion: Bool { kind != .location }

    /// The key under which `principal` reads or fills the cache with the terminal result of
    /// this work. A progressive request ends with the same final result as a final-only one,
    /// so both read and fill the same entry.
    ///
    /// A digest is the client's claim: a result stored for one principal's verified bytes is
    /// never an answer to another's digest alone (a guessed or known digest sent with junk
    /// would otherwise get the image). So digest entries are kept per principal even where
    /// results are shared; other principals share them only by joining a live job, which
    /// compares the bytes. A version was named by the worker that opened the source, so its
    /// entries are shared as the scope says.
    func cacheKey(for principal: Principal) -> ShareKey {
        let scope = kind == .digest ? principal.name : scope
        return ShareKey(scope: scope, kind: kind, source: source, spec: spec,
                        delivery: delivery == .progressive ? .final : delivery)
    }

    /// The same work, with the source named by the version a worker found.
    func withVersion(_ identity: Data) -> ShareKey {
        ShareKey(scope: scope, kind: .version, source: identity, spec: spec, delivery: delivery)
    }

    /// Bytes the key itself occupies, for the cache's accounting.
    var byteCount: Int { (scope?.utf8.count ?? 0) + source.count + spec.count + 64 }
}
