/// What each principal may have of the fleet: its weight in the fair share, and how many
/// requests it may have waiting and jobs running. Set by the operator in a tenants file
/// (`broker --tenants FILE`), re-read when it changes.
///
/// The file has one principal per line, then its terms; `*` gives the terms of every
/// principal not named; a word starting with `#` begins a comment:
///
///     # principal                                          terms
///     *                                                    weight=1 queued=256
///     curve:rq:A8mc0V*ZEbx[GNzoTsc]WO^c}&-L1bZmh(=L4Vz     weight=4 queued=2000 running=32
///     local                                                weight=2
///
/// `weight` (1 to 1000, default 1): jobs dispatched per turn within a lane. `queued`:
/// requests it may have waiting (beyond: Rejected{OVERLOADED}; left out, a quarter of the
/// broker's queue, or no limit but the queue's for an admin). `running`: its jobs on
/// workers at once. `image-mib`: MiB of source images its live requests may hold at the
/// broker (beyond: Rejected{OVERLOADED}); left out, the broker's per-principal share
/// (`BrokerConfiguration.maxLiveImageBytesPerPrincipal`). `files=DIR`: the directory under
/// the workers' files root that its file sources are read beneath (`files=.` the whole
/// root); left out, an admin (`local` included) reads the whole root and any other
/// principal no file at all: tenants sharing a files root never read each other's files.
/// `live`: requests it may have live over all its connections, waiting, running or sharing
/// another's job (beyond: Rejected{OVERLOADED}); left out,
/// `BrokerConfiguration.maxLiveRequestsPerPrincipal`, or no limit for an admin.
/// Another limit left out is no limit (the broker's own still apply).
public struct TenantPolicy: Sendable, Equatable {
    public struct Terms: Sendable, Equatable {
        public var weight = 1
        public var maxQueued: Int?
        public var maxRunning: Int?
        /// Bytes of source images its live requests may hold (nil: the broker's per-principal share).
        public var maxImageBytes: Int?
        /// The directory under the files root its file sources are read beneath ("" the whole
        /// root; nil: the whole root for an admin, no file sources for anyone else).
        public var files: String?
        /// Live requests over all its connections (nil: the broker's default; none for an admin).
        public var maxLive: Int?

        public init(weight: Int = 1, maxQueued: Int? = nil, maxRunning: Int? = nil, maxImageBytes: Int? = nil,
                    files: String? = nil, maxLive: Int? = nil) {
            self.weight = weight
            self.maxQueued = maxQueued
            self.maxRunning = maxRunning
            self.maxImageBytes = maxImageBytes
            self.files = files
            self.maxLive = maxLive
        }
    }

    /// The terms of principals not named.
    public var defaults = Terms()
    /// By principal name (`local`, `anonymous`, `curve:…` as logs and Status show it).
    public var principals: [String: Terms] = [:]

    public init(defaults: Terms = Terms(), principals: [String: Terms] = [:]) {
        self.defaults = defaults
        self.principals = principals
    }

    public func terms(for principal: Principal) -> Terms {
        principals[principal.name] ?? defaults
    }

    /// A line of a tenants file that cannot be used.
    public struct ParseError: Error, CustomStringConvertible, Equatable {
        public let line: Int
        public let reason: String
        public var description: String { "line \(line): \(reason)" }
    }

    /// Reads a tenants file's text; the first bad line is an error (the file is then not used
    /// at all: half a policy would be worse than the previous whole one).
    public init(parsing text: String) throws(ParseError) {
        var policy = TenantPolicy()
        var named: Set<String> = []
        for (offset, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = offset + 1
            // A comment is a word that starts with `#` (Z85 keys may contain `#` themselves).
            let words = raw.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
                .prefix { !$0.hasPrefix("#") }
            guard let name = words.first.map(String.init) else { continue }
            guard named.insert(name).inserted else { throw ParseError(line: number, reason: "\(name) is named twice") }
            var terms = Terms()
            for word in words.dropFirst() {
                let parts = word.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0] == "files" {
                    let directory = String(parts[1])
                    let names = directory.split(separator: "/", omittingEmptySubsequences: false)
                    guard directory == "." || (!directory.hasPrefix("/")
                                               && !names.contains { $0.isEmpty || $0 == "." || $0 == ".." }) else {
                        throw ParseError(line: number, reason: "files must be a directory under the files root "
                                         + "(like tenants/alice, without . or .. parts), or . for all of it")
                    }
                    terms.files = directory == "." ? "" : directory
                    continue
                }
                guard parts.count == 2, let value = Int(parts[1]) else {
                    throw ParseError(line: number, reason: "\"\(word)\" is not NAME=NUMBER (weight, queued, running, live, image-mib or files)")
                }
                switch parts[0] {
                case "weight":
                    guard (1...1000).contains(value) else { throw ParseError(line: number, reason: "weight must be 1 to 1000") }
                    terms.weight = value
                case "queued":
                    guard value >= 0 else { throw ParseError(line: number, reason: "queued must be 0 or more") }
                    terms.maxQueued = value
                case "running":
                    guard value >= 1 else { throw ParseError(line: number, reason: "running must be 1 or more") }
                    terms.maxRunning = value
                case "live":
                    guard value >= 1 else { throw ParseError(line: number, reason: "live must be 1 or more") }
                    terms.maxLive = value
                case "image-mib":
                    guard (1...(1 << 20)).contains(value) else {
                        throw ParseError(line: number, reason: "image-mib must be 1 to 1048576")
                    }
                    terms.maxImageBytes = value << 20
                default:
                    throw ParseError(line: number, reason: "unknown term \"\(parts[0])\" (weight, queued, running, live, image-mib or files)")
                }
            }
            if name == "*" { policy.defaults = terms } else { policy.principals[name] = terms }
        }
        self = policy
    }
}
