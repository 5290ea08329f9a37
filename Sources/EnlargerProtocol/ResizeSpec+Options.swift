import ImageModel
import SwiftProtobuf

// The one reading of a ResizeSpec. The worker resizes with what it gives; the broker accepts
// a Submit only if it succeeds, and keys sharing and the cache on its canonical form, so
// two Submits share a key exactly when the worker would make the same output of the same
// source. There is no second parser: content types in `accept` are read by
// `OutputFormat(contentType:)` here as everywhere (surrounding blanks trimmed, parameters
// dropped, case ignored, aliases known; an unknown type is skipped).

extension ResizeOptions {
    /// The options `spec` asks for, or why no worker can honour it.
    public init(_ spec: Enlarger_V1_ResizeSpec) throws(InvalidArgumentError) {
        let fit: Fit
        switch spec.fit {
        case .inside: fit = .inside
        case .cover: fit = .cover
        case .fill: fit = .fill
        case .UNRECOGNIZED(let value): throw InvalidArgumentError("unknown fit \(value)")
        }
        let format: OutputFormat
        switch spec.format {
        case .jpeg: format = .jpeg
        case .pnm: format = .pnm
        case .png: format = .png
        case .webp: format = .webp
        case .avif: format = .avif
        case .UNRECOGNIZED(let value): throw InvalidArgumentError("unknown format \(value)")
        }
        let chroma444: Bool
        switch spec.chroma {
        case .yuv420: chroma444 = false
        case .yuv444: chroma444 = true
        case .UNRECOGNIZED(let value): throw InvalidArgumentError("unknown chroma \(value)")
        }
        let failOn: FailOn
        switch spec.failOn {
        case .default, .error: failOn = .error
        case .none: failOn = .none
        case .truncated: failOn = .truncated
        case .warning: failOn = .warning
        case .UNRECOGNIZED(let value): throw InvalidArgumentError("unknown fail_on \(value)")
        }
        self.init(
            width: spec.width == 0 ? nil : Int(spec.width),
            height: spec.height == 0 ? nil : Int(spec.height),
            fit: fit, enlarge: spec.enlarge, quality: Int(spec.effectiveQuality),
            progressive: spec.progressive, chroma444: chroma444, format: format, failOn: failOn,
            keepProfile: spec.keepProfile)
        if !spec.accept.isEmpty {
            guard spec.accept.count <= Enlarger_V1_ResizeSpec.maxAccepted else {
                throw InvalidArgumentError("accept lists \(spec.accept.count) types, at most "
                                           + "\(Enlarger_V1_ResizeSpec.maxAccepted) are allowed")
            }
            accept = spec.accept.compactMap(OutputFormat.init(contentType:))
            if accept.isEmpty {
                let known = OutputFormat.allCases.map(\.contentType).joined(separator: ", ")
                throw InvalidArgumentError("accept names no known content type (known: \(known))")
            }
        }
        flatten = spec.flatten
        if spec.hasBackground {
            guard spec.background <= 0xFF_FFFF else {
                throw InvalidArgumentError("background must be 0xRRGGBB, got 0x\(String(spec.background, radix: 16))")
            }
            background = RGBColour(packed: spec.background)
        }
        lossless = spec.lossless
        switch spec.gainMap {
        case .keep: gainMap = .keep
        case .drop: gainMap = .drop
        case .apply: gainMap = .apply
        case .UNRECOGNIZED(let value): throw InvalidArgumentError("unknown gain_map \(value)")
        }
    }
}

extension Enlarger_V1_ResizeSpec {
    /// The canonical form of what this spec asks for under `delivery`, as bytes: the spec
    /// that `ResizeOptions(self)` reads, written back with every default filled in, every
    /// content type in its canonical name, and what the output ignores cleared (`format`
    /// under `accept`; all but `fail_on` for an info request). Equal bytes, same output.
    public func sharingKey(delivery: Enlarger_V1_Delivery) throws(InvalidArgumentError) -> [UInt8] {
        let options = try ResizeOptions(self)
        var canonical = Enlarger_V1_ResizeSpec()
        canonical.failOn = switch options.failOn {
        case .none: .none
        case .truncated: .truncated
        case .error: .error
        case .warning: .warning
        }
        if delivery != .info {
            canonical.width = UInt32(options.width ?? 0)
            canonical.height = UInt32(options.height ?? 0)
            canonical.fit = switch options.fit {
            case .inside: .inside
            case .cover: .cover
            case .fill: .fill
            }
            canonical.enlarge = options.enlarge
            canonical.quality = UInt32(options.quality)
            canonical.progressive = options.progressive
            canonical.chroma = options.chroma444 ? .yuv444 : .yuv420
            canonical.format = options.accept.isEmpty ? Self.wire(options.format) : .jpeg
            canonical.accept = options.accept.map(\.contentType)
            canonical.flatten = options.flatten
            canonical.background = options.background.packed
            canonical.lossless = options.lossless
            canonical.keepProfile = options.keepProfile
            canonical.gainMap = Self.wire(options.gainMap)
        }
        // Binary encoding is deterministic for a message without maps, as this one is.
        return (try? canonical.serializedBytes()) ?? []
    }

    public static func wire(_ mode: GainMapMode) -> Enlarger_V1_GainMap {
        switch mode {
        case .keep: .keep
        case .drop: .drop
        case .apply: .apply
        }
    }

    static func wire(_ format: OutputFormat) -> Enlarger_V1_ImageFormat {
        switch format {
        case .jpeg: .jpeg
        case .pnm: .pnm
        case .png: .png
        case .webp: .webp
        case .avif: .avif
        }
    }
}
