import EnlargerProtocol
import ImageModel
import Imaging

// Conversions between the wire types and the Imaging pipeline's types. The broker has
// validated the spec already, with the same conversion; anything this version cannot honour
// still ends the job with INVALID_ARGUMENT rather than a guess.

extension ResizeOptions {
    /// The spec read as the broker read it when it accepted the Submit (one conversion,
    /// `ResizeOptions(_:)` of the protocol); anything this version cannot honour fails the
    /// job with INVALID_ARGUMENT.
    init(wire spec: Enlarger_V1_ResizeSpec) throws(ImagingError) {
        do throws(InvalidArgumentError) {
            self = try ResizeOptions(spec)
        } catch {
            throw ImagingError(.invalidArgument, error.message)
        }
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
        hasGainMap_p = info.hasGainMap
    }
}
