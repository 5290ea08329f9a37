import Crypto
import EnlargerProtocol
import Foundation
import ImageModel

/// One image to resize, as submitted to the broker.
public struct ResizeRequest: Sendable {
    /// Chosen by the producer: 1 to 64 bytes of UTF-8, unique among the broker's live
    /// requests. A random UUID by default.
    public var id: String
    /// The source image (JPEG, PNG, WebP, HEIC or AVIF).
    public var image: [UInt8]
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
    /// caller about a millisecond per 2 MB.
    public var sharesResults = true
    /// The batch it is an item of (`EnlargerClient.resize(batch:)`): its id, this item's
    /// place and the batch's size.
    var batch: (id: String, index: Int, size: Int)?
    /// Only the header's facts are asked for (`EnlargerClient.info`): of the options only
    /// `failOn` counts.
    var infoOnly = false

    public init(id: String = UUID().uuidString, image: [UInt8], options: ResizeOptions,
                delivery: Delivery = .progressive, timeout: Duration? = nil, sharesResults: Bool = true) {
        self.id = id
        self.image = image
        self.options = options
        self.delivery = delivery
        self.timeout = timeout
        self.sharesResults = sharesResults
    }

    /// The Submit header, or the error the request fails with before anything is sent.
    func wireSubmit() throws(EnlargerClientError) -> Enlarger_V1_Submit {
        try check()
        var submit = Enlarger_V1_Submit()
        submit.requestID = id
        // `validate()` has bounded every number to the wire's ranges.
        submit.spec.width = UInt32(options.width ?? 0)
        submit.spec.height = UInt32(options.height ?? 0)
        submit.spec.fit = switch options.fit {
        case .inside: .inside
        case .cover: .cover
        case .fill: .fill
        }
        submit.spec.enlarge = options.enlarge
        submit.spec.quality = UInt32(options.quality)
        submit.spec.progressive = options.progressive
        submit.spec.chroma = options.chroma444 ? .yuv444 : .yuv420
        submit.spec.format = switch options.format {
        case .jpeg: .jpeg
        case .pnm: .pnm
        case .png: .png
        case .webp: .webp
        case .avif: .avif
        }
        submit.spec.accept = options.accept.map(\.contentType)
        submit.spec.flatten = options.flatten
        if options.background != .white { submit.spec.background = options.background.packed }
        submit.spec.lossless = options.lossless
        submit.spec.keepProfile = options.keepProfile
        submit.spec.failOn = switch options.failOn {
        case .none: .none
        case .truncated: .truncated
        case .error: .default
        case .warning: .warning
        }
        submit.delivery = switch delivery {
        case .progressive: .progressive
        case .final: .final
        case .degraded: .degraded
        }
        if infoOnly { submit.delivery = .info }
        if sharesResults { submit.source.inline.sha256 = Data(SHA256.hash(data: image)) }
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

    /// What `wireSubmit` checks before building anything: the id, the options, the timeout.
    func check() throws(EnlargerClientError) {
        try Self.validate(id: id)
        do throws(ImagingError) {
            if !infoOnly { try options.validate() }
        } catch {
            throw .rejected(.invalidArgument, error.message)
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
