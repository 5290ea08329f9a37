import ImageModel

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
    /// Checks the ranges documented in common.proto (a box within 16384 px with at least one
    /// side set, quality 0 to 100), then reads it as the worker will (`ResizeOptions(_:)`):
    /// enum values this version knows, a known type in `accept`, a 0xRRGGBB background.
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
        // The rest is the worker's own reading of the spec: what is accepted here can be done.
        _ = try ResizeOptions(self)
    }

    /// The most entries `accept` may have.
    public static let maxAccepted = 16

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
        case (.progressive, .degraded), (.progressive, .placeholder), (.final, .placeholder), (.degraded, .placeholder): false
        case (.progressive, .final), (.final, .final), (.degraded, .degraded), (.info, .info): true
        default: nil
        }
    }
}
