import EnlargerProtocol
import ImageModel
import Imaging

// Conversions between the wire types and the Imaging pipeline's types. The broker has
// validated the spec already; anything this version cannot honour still ends the job with
// INVALID_ARGUMENT rather than a guess.

extension ResizeOptions {
    init(_ spec: Enlarger_V1_ResizeSpec) throws(ImagingError) {
        let fit: Fit
        switch spec.fit {
        case .inside: fit = .inside
        case .cover: fit = .cover
        case .fill: fit = .fill
        case .UNRECOGNIZED(let value): throw ImagingError(.invalidArgument, "unknown fit \(value)")
        }
        let format: OutputFormat
        switch spec.format {
        case .jpeg: format = .jpeg
        case .pnm: format = .pnm
        case .png: format = .png
        case .webp: format = .webp
        case .avif: format = .avif
        case .UNRECOGNIZED(let value): throw ImagingError(.invalidArgument, "unknown format \(value)")
        }
        let chroma444: Bool
        switch spec.chroma {
        case .yuv420: chroma444 = false
        case .yuv444: chroma444 = true
        case .UNRECOGNIZED(let value): throw ImagingError(.invalidArgument, "unknown chroma \(value)")
        }
        let failOn: FailOn
        switch spec.failOn {
        case .default, .error: failOn = .error
        case .none: failOn = .none
        case .truncated: failOn = .truncated
        case .warning: failOn = .warning
        case .UNRECOGNIZED(let value): throw ImagingError(.invalidArgument, "unknown fail_on \(value)")
        }
        self.init(
            width: spec.width == 0 ? nil : Int(spec.width),
            height: spec.height == 0 ? nil : Int(spec.height),
            fit: fit, enlarge: spec.enlarge, quality: Int(spec.effectiveQuality),
            progressive: spec.progressive, chroma444: chroma444, format: format, failOn: failOn,
            keepProfile: spec.keepProfile)
        if !spec.accept.isEmpty {
            accept = spec.accept.compactMap(OutputFormat.init(contentType:))
            if accept.isEmpty {
                throw ImagingError(.invalidArgument, "no known content type in accept (\(spec.accept.joined(separator: ", ")))")
            }
        }
        flatten = spec.flatten
        if spec.hasBackground {
            guard spec.background <= 0xFF_FFFF else {
                throw ImagingError(.invalidArgument, "background 0x\(String(spec.background, radix: 16)) is not 0xRRGGBB")
            }
            background = RGBColour(packed: spec.background)
        }
        lossless = spec.lossless
    }
}

extension ImageModel.Delivery {
    init(_ delivery: Enlarger_V1_Delivery) throws(ImagingError) {
        switch delivery {
        case .progressive: self = .progressive
        case .final: self = .final
        case .degraded: self = .degraded
        case .info: throw ImagingError(.invalidArgument, "an info request has no image delivery")
        case .UNRECOGNIZED(let value): throw ImagingError(.invalidArgument, "unknown delivery \(value)")
        }
    }
}

extension Enlarger_V1_Stage {
    init(_ stage: ImageModel.Stage) {
        switch stage {
        case .degraded: self = .degraded
        case .final: self = .final
        }
    }
}

extension Enlarger_V1_ImageFormat {
    init(_ format: OutputFormat) {
        switch format {
        case .jpeg: self = .jpeg
        case .pnm: self = .pnm
        case .png: self = .png
        case .webp: self = .webp
        case .avif: self = .avif
        }
    }
}

extension Enlarger_V1_ErrorCode {
    /// The wire code for a pipeline failure: decoder errors map one to one, anything else
    /// (which a job cannot cause by its input) is INTERNAL.
    init(_ code: ImagingError.Code) {
        switch code {
        case .unknownFormat: self = .unknownFormat
        case .empty: self = .empty
        case .truncated: self = .truncated
        case .corrupt: self = .corrupt
        case .unsupported: self = .unsupported
        case .tooLarge: self = .tooLarge
        case .tooManyScans: self = .tooManyScans
        case .invalidArgument: self = .invalidArgument
        case .encodeFailed: self = .encodeFailed
        case .notFound, .unreadable, .writeFailed, .cancelled: self = .internal
        }
    }
}

extension Enlarger_V1_ImageInfo {
    init(_ info: ImageInfo) {
        self.init()
        format = info.format
        width = UInt32(clamping: info.width)
        height = UInt32(clamping: info.height)
        orientation = UInt32(clamping: info.orientation)
        channels = UInt32(clamping: info.channels)
        hasAlpha_p = info.hasAlpha
        bitDepth = UInt32(clamping: info.bitDepth)
        colorSpace = info.colorSpace
        profileDescription = info.profileDescription ?? ""
        profileBytes = UInt32(clamping: info.profileBytes)
        progressive = info.progressive
        hasEmbeddedThumbnail_p = info.hasEmbeddedThumbnail
        byteSize = UInt64(info.byteSize)
    }
}
