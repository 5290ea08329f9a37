import EnlargerProtocol

/// What identical requests share: the live jobs they may join, found by share key, and the
/// cache of terminal results. The one owner of the rules of both (CACHE AND SHARED JOBS in
/// client.proto); `BrokerCore` asks and tells, and decides only what depends on a job's
/// progress (whether two jobs reading one version may merge).
///
/// - A key finds the job that holds it, and a job holds at most the key it was submitted or
///   re-keyed with (a set's job also the keys of its variants still to come): the first job
///   claims a key, later identical ones join it.
/// - A location key (a file or URL before anyone read it) lets requests join a job only
///   until the job is dispatched: from then its worker may open the source at any moment,
///   and a request sent later might have been sent after the source changed. A version is
///   what one attempt opened, so a dispatched job gives its version key up as well; the
///   next attempt names its own. A digest key stays with its job to the end.
/// - The cache is read and filled only under keys that name a version (a digest or a
///   version), each principal's digest entries its own (`ShareKey.cacheKey(for:)`), and
///   filled only with results whose worker checked the bytes.
struct Sharing<Payload: FrameBytes> {
    /// Whether requests may join live jobs (`--share-jobs`); the cache is separate.
    let joinsJobs: Bool
    private(set) var liveJobs: [ShareKey: UInt64] = [:]
    private var cache: ResultCache<Payload>

    init(joinsJobs: Bool, cacheBytes: Int) {
        self.joinsJobs = joinsJobs
        cache = ResultCache(limit: cacheBytes)
    }

    var isIdle: Bool { liveJobs.isEmpty }
    var cacheStatus: Enlarger_V1_CacheStatus { cache.status }
    var cachedCount: Int { cache.count }
    var cacheBytes: Int { cache.bytes }
    var cacheLimit: Int { cache.limit }
    func cacheBytes(heldBy principal: Principal) -> Int { cache.bytes(heldBy: principal) }

    // MARK: The cache

    /// The cached terminal result for `principal`'s request with `key`, if its key names a
    /// version and one is kept (it becomes the most recently used).
    mutating func cached(_ key: ShareKey?, for principal: Principal) -> ResultCache<Payload>.Hit? {
        guard let key, key.namesVersion else { return nil }
        return cache.lookup(key.cacheKey(for: principal))
    }

    /// Keeps the terminal result of a job with `key`, submitted by `principal`, when the key
    /// names a version and the worker checked the bytes it read against it.
    mutating func store(_ result: Enlarger_V1_Result, payload: Payload, key: ShareKey?, for principal: Principal,
                        verified: Bool) {
        guard let key, key.namesVersion, verified else { return }
        var result = result
        result.requestID = ""
        cache.store(result, payload: payload, for: key.cacheKey(for: principal), holder: principal)
    }

    // MARK: Live jobs

    /// The live job a request with `key` may join (its bytes still to be compared).
    func joinable(_ key: ShareKey?) -> UInt64? {
        guard joinsJobs, let key else { return nil }
        return liveJobs[key]
    }

    /// A new job with `key`: it holds the key unless another job already does.
    mutating func claim(_ key: ShareKey?, by jobID: UInt64) {
        guard joinsJobs, let key, liveJobs[key] == nil else { return }
        liveJobs[key] = jobID
    }

    /// `jobID` takes `key` over (a job re-keyed with the version its worker found, which
    /// did not merge into the job that held it).
    mutating func takeOver(_ key: ShareKey, by jobID: UInt64) {
        guard joinsJobs else { return }
        liveJobs[key] = jobID
    }

    /// `jobID` lets `key` go, if it holds it (a job ended, or re-keyed).
    mutating func release(_ key: ShareKey?, heldBy jobID: UInt64) {
        guard let key, liveJobs[key] == jobID else { return }
        liveJobs[key] = nil
    }

    /// `jobID`, with `key`, goes to a worker: it stops being found by a location, and gives
    /// its version up (see above). Returns the key the job keeps.
    mutating func dispatched(_ jobID: UInt64, key: ShareKey?) -> ShareKey? {
        guard let key else { return nil }
        if key.kind != .digest { release(key, heldBy: jobID) }
        return key.kind == .version ? nil : key
    }
}
