import EnlargerProtocol
import Foundation
import ImageModel

/// Where a request's image comes from.
public enum ImageSource: Sendable, Equatable {
    /// The image itself (JPEG, PNG, WebP, HEIC, AVIF, GIF or JPEG XL), sent with the request.
    case bytes([UInt8])
    /// A file under the worker's files root (`enlarger worker --files-root DIR`), by its
    /// path relative to that root; the worker refuses paths that leave it.
    case file(path: String)
    /// An http or https URL the worker downloads, reporting `.download` events; the worker
    /// refuses addresses its operator did not allow (loopback, private networks, ...).
    case url(String)
}

/// Which lane a request waits in at the broker.
public enum Priority: String, Sendable, CaseIterable {
    /// Someone is waiting for it (the default): dispatched before any bulk request, with a
    /// share of the workers kept for this lane.
    case interactive
    /// Nobody watches it (a backfill, a `sync` of a whole tree): dispatched when no
    /// interactive request waits, and never on the share kept for interactive ones.
    case bulk
}

/// One image to resize, as submitted to the broker.
public struct ResizeRequest: Sendable {
    /// Chosen by the producer: 1 to 64 bytes of UTF-8, unique among the broker's live
    /// requests. A random UUID by default.
    public var id: String
    /// Where the image comes from.
    public var source: ImageSource
    /// The source image, when it is sent with the request (JPEG, PNG, WebP, HEIC, AVIF, GIF or JPEG XL);
    /// empty for a file or URL source. Setting it makes the source `.bytes`.
    public var image: [UInt8] {
        get { if case .bytes(let bytes) = source { bytes } else { [] } }
        set { source = .bytes(newValue) }
    }
    public var options: ResizeOptions
    public var delivery: Delivery
    /// How long the request may take from acceptance to its end; `nil` leaves it to the
    /// broker's default (5 minutes unless configured). The broker ends a request still live
    /// at its deadline with `.failed(.deadlineExceeded, …)`; should the broker not say so in
    /// time (unreachable), the client fails the request itself one heartbeat interval later.
    /// At most 49 days (the wire's 32-bit milliseconds); the broker may shorten it.
    public var timeout: Duration?
    /// Sends the image's SHA-256 with it, so that the broker may answer from its result
    /// cache, or let this request share one job with identical ones in flight (the worker
    /// checks the digest before its result is shared). On by default; hashing costs the
    /// caller about a millisecond per 2 MB, and is skipped while the broker says (in its
    /// Accepted) that it neither caches nor shares. For a file or URL source the worker
    /// names the version it reads instead (file identity, URL validator); `false` opts out
    /// the same.
    public var sharesResults = true
    /// The lane it waits in at the broker (`.interactive` unless set).
    public var priority: Priority = .interactive
    /// A `.placeholder` event before any image (on by default; the worker spends a fraction
    /// of a millisecond on it).
    public var placeholder = true
    /// Several outputs from one decode (at most 8), instead of `options`: each comes as a
    /// `.final` whose image's `variant` is its index here, largest first; the last one ends
    /// the sequence. No `.degraded` or `.placeholder` comes with them.
    public var variants: [ResizeOptions] = []
    /// The batch it is an item of (`EnlargerClient.resize(batch:)`): its id, this item's
    /// place and the batch's size.
    var batch: (id: String, index: Int, size: Int)?
    /// Only the header's facts are asked for (`EnlargerClient.info`): of the options only
    /// `failOn` counts.
    var infoOnly = false

    public init(id: String = UUID().uuidString, image: [UInt8], options: ResizeOptions,
                delivery: Delivery = .progressive, timeout: Duration? = nil, sharesResults: Bool = true) {
        self.init(id: id, source: .bytes(image), options: options, delivery: delivery, timeout: timeout,
                  sharesResults: sharesResults)
    }

    public init(id: String = UUID().uuidString, source: ImageSource, options: ResizeOptions,
                delivery: Delivery = .progressive, timeout: Duration? = nil, sharesResults: Bool = true) {
        self.id = id
        self.source = source
        self.options = options
        self.delivery = delivery
        self.timeout = timeout
        self.sharesResults = sharesResults
    }

    /// The Submit header, or the error the request fails with before anything is sent.
    /// Without `digest` an inline image goes without its SHA-256 (the broker said that it
    /// uses none), as if `sharesResults` were off.
    func wireSubmit(digest: Bool) throws(EnlargerClientError) -> Enlarger_V1_Submit {
        try check()
        var submit = Enlarger_V1_Submit()
        submit.requestID = id
        submit.priority = priority == .bulk ? .bulk : .interactive
        submit.noPlaceholder = !placeholder
        // `validate()` has bounded every number to the wire's ranges.
        submit.spec = Self.wireSpec(options)
        submit.variants = variants.map(Self.wireSpec)
        submit.delivery = switch delivery {
        case .progressive: .progressive
        case .final: .final
        case .degraded: .degraded
        }
        if infoOnly { submit.delivery = .info }
        switch source {
        case .bytes(let image):
            // Without a digest (libcrypto could not allocate) the request runs unshared.
            if sharesResults, digest, let sha256 = Digest.sha256(image) { submit.source.inline.sha256 = sha256 }
        case .file(let path):
            submit.source.file.path = path
            submit.source.noShare = !sharesResults
        case .url(let url):
            submit.source.url.url = url
            submit.source.noShare = !sharesResults
        }
        if let timeout { submit.deadlineMs = UInt32(max(timeout.milliseconds, 1)) }
        if let batch {
            submit.batch = .with {
                $0.batchID = batch.id
                $0.index = UInt32(batch.index)
                $0.size = UInt32(batch.size)
            }
        }
        return submit
    }

    /// The ResizeSpec for `options` (bounded by `validate()` to the wire's ranges).
    static func wireSpec(_ options: ResizeOptions) -> Enlarger_V1_ResizeSpec {
        var spec = Enlarger_V1_ResizeSpec()
        spec.width = UInt32(options.width ?? 0)
        spec.height = UInt32(options.height ?? 0)
        spec.fit = switch options.fit {
        case .inside: .inside
        case .cover: .cover
        case .fill: .fill
        }
        spec.enlarge = options.enlarge
        spec.quality = UInt32(options.quality)
        spec.progressive = options.progressive
        spec.chroma = options.chroma444 ? .yuv444 : .yuv420
        spec.format = switch options.format {
        case .jpeg: .jpeg
        case .pnm: .pnm
        case .png: .png
        case .webp: .webp
        case .avif: .avif
        }
        spec.accept = options.accept.map(\.contentType)
        spec.flatten = options.flatten
        if options.background != .white { spec.background = options.background.packed }
        spec.lossless = options.lossless
        spec.keepProfile = options.keepProfile
        spec.gainMap = Enlarger_V1_ResizeSpec.wire(options.gainMap)
        spec.failOn = switch options.failOn {
        case .none: .none
        case .truncated: .truncated
        case .error: .default
        case .warning: .warning
        }
        return spec
    }

    /// What `wireSubmit` checks before building anything: the id, the source, the options,
    /// the timeout.
    func check() throws(EnlargerClientError) {
        try Self.validate(id: id)
        switch source {
        case .bytes:
            break
        case .file(let path):
            guard (1...WireLimits.maxSourcePathBytes).contains(path.utf8.count), !path.utf8.contains(0) else {
                throw .rejected(.invalidArgument, "a file path must be 1 to \(WireLimits.maxSourcePathBytes) bytes, without NUL")
            }
        case .url(let url):
            guard (1...WireLimits.maxSourceURLBytes).contains(url.utf8.count), !url.utf8.contains(0) else {
                throw .rejected(.invalidArgument, "a URL must be 1 to \(WireLimits.maxSourceURLBytes) bytes, without NUL")
            }
        }
        do throws(ImagingError) {
            if !infoOnly && variants.isEmpty { try options.validate() }
            for variant in variants { try variant.validate() }
        } catch {
            throw .rejected(.invalidArgument, error.message)
        }
        if !variants.isEmpty {
            guard variants.count <= Enlarger_V1_Submit.maxVariants else {
                throw .rejected(.invalidArgument, "\(variants.count) variants: at most \(Enlarger_V1_Submit.maxVariants)")
            }
            guard !infoOnly, delivery != .degraded else {
                throw .rejected(.invalidArgument, "variants come as finals: not with an info or degraded delivery")
            }
            guard variants.allSatisfy({ $0.failOn == variants[0].failOn }) else {
                throw .rejected(.invalidArgument, "the variants name different fail_on levels; one decode serves them all")
            }
        }
        if let timeout, !(timeout > .zero && timeout.milliseconds <= UInt64(UInt32.max)) {
            throw .rejected(.invalidArgument, "timeout must be positive and at most \(UInt32.max) ms")
        }
    }

    /// Throws `.invalidRequestID` unless `id` is 1 to 64 bytes of UTF-8 (a Swift string
    /// always is UTF-8, so only the length can be wrong).
    static func validate(id: String) throws(EnlargerClientError) {
        guard (1...WireLimits.maxRequestIDBytes).contains(id.utf8.count) else {
            throw .invalidRequestID(
                "request id must be 1 to \(WireLimits.maxRequestIDBytes) bytes of UTF-8, got \(id.utf8.count) bytes")
        }
    }
}

extension Duration {
    /// Whole milliseconds, rounded up; 0 for durations that are not positive.
    var milliseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0, self > .zero else { return 0 }
        return UInt64(seconds) * 1000 + UInt64((attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }
}

/// The broker's answer to `EnlargerClient.cancel(_:)`.
public enum CancelResult: Sendable, Equatable {
    /// The cancel ended the request; its submitter was told `Cancelled`.
    case cancelled
    /// The request had already ended (with a result, a failure or an earlier cancel).
    case finished
    /// No live or recently ended request has this id.
    case unknown

    init(_ outcome: Enlarger_V1_CancelAck.Outcome) {
        switch outcome {
        case .cancelled: self = .cancelled
        case .finished: self = .finished
        case .unknown, .unspecified, .UNRECOGNIZED: self = .unknown
        }
    }
}
