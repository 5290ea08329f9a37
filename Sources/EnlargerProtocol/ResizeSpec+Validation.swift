/// A resize spec or delivery that the protocol does not allow. Answered with
/// `Rejected{INVALID_ARGUMENT}` by the broker.
public struct InvalidArgumentError: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String

    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}

extension Enlarger_V1_ResizeSpec {
    /// Checks the ranges documented in common.proto: a box within 65535 px with at least one
    /// side set, quality 0 to 100, and enum values this version knows.
    public func validate() throws(InvalidArgumentError) {
        guard width != 0 || height != 0 else {
            throw InvalidArgumentError("at least one of width and height must be non-zero")
        }
        guard width <= WireLimits.maxDimension, height <= WireLimits.maxDimension else {
            throw InvalidArgumentError(
                "width and height must be at most \(WireLimits.maxDimension), got \(width)x\(height)")
        }
        guard quality <= 100 else {
            throw InvalidArgumentError("quality must be 0 (default) to 100, got \(quality)")
        }
        if case .UNRECOGNIZED(let value) = fit { throw InvalidArgumentError("unknown fit \(value)") }
        if case .UNRECOGNIZED(let value) = chroma { throw InvalidArgumentError("unknown chroma \(value)") }
        if case .UNRECOGNIZED(let value) = format { throw InvalidArgumentError("unknown format \(value)") }
        if case .UNRECOGNIZED(let value) = failOn { throw InvalidArgumentError("unknown fail_on \(value)") }
        if !accept.isEmpty {
            guard accept.count <= Self.maxAccepted else {
                throw InvalidArgumentError("accept lists \(accept.count) types, at most \(Self.maxAccepted) are allowed")
            }
            guard accept.contains(where: { Self.contentTypes.contains(Self.bareType($0)) }) else {
                throw InvalidArgumentError("accept names no known content type (known: "
                                           + Self.contentTypes.sorted().joined(separator: ", ") + ")")
            }
        }
        if hasBackground && background > 0xFF_FFFF {
            throw InvalidArgumentError("background must be 0xRRGGBB, got 0x\(String(background, radix: 16))")
        }
    }

    /// The most entries `accept` may have.
    public static let maxAccepted = 16

    /// The content types of the output formats, as `accept` names them (and their aliases).
    public static let contentTypes: Set<String> = [
        "image/jpeg", "image/jpg", "image/pjpeg", "image/png", "image/webp", "image/avif",
        "image/x-portable-anymap", "image/x-portable-pixmap", "image/x-portable-graymap",
    ]

    /// A media type without parameters or surrounding blanks, in lower case.
    static func bareType(_ type: String) -> String {
        let bare = type.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return String(bare.filter { $0 != " " && $0 != "\t" }).lowercased()
    }

    /// Only `fail_on`: all an info request's spec needs.
    public func validateFailOn() throws(InvalidArgumentError) {
        if case .UNRECOGNIZED(let value) = failOn { throw InvalidArgumentError("unknown fail_on \(value)") }
    }

    /// The JPEG quality to encode with: `quality`, or 80 when it is 0.
    public var effectiveQuality: UInt32 {
        quality == 0 ? WireLimits.defaultQuality : quality
    }
}

extension Enlarger_V1_Delivery {
    public func validate() throws(InvalidArgumentError) {
        if case .UNRECOGNIZED(let value) = self { throw InvalidArgumentError("unknown delivery \(value)") }
    }

    /// Whether a result of `stage` is the terminal one under this delivery, or `nil` when
    /// the delivery never produces that stage. The one place finality is decided.
    public func isTerminal(_ stage: Enlarger_V1_Stage) -> Bool? {
        switch (self, stage) {
        case (.progressive, .degraded): false
        case (.progressive, .final), (.final, .final), (.degraded, .degraded), (.info, .info): true
        default: nil
        }
    }
}
