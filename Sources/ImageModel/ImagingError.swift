/// A failure of decoding, resizing or encoding: a stable machine-readable `code` and a
/// human message (libjpeg's own text where it came from libjpeg).
public struct ImagingError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable, CaseIterable {
        /// The bytes are in no format Enlarger reads (no signature it knows, a damaged one
        /// included); the message names what they look like.
        case unknownFormat
        /// The input has zero bytes.
        case empty
        /// The data ends before the image does.
        case truncated
        /// Damaged markers, tables or entropy-coded data.
        case corrupt
        /// A valid JPEG this build cannot decode (12-bit, lossless, …).
        case unsupported
        /// Over a configured limit (pixels, input bytes) or libjpeg's own dimension limit.
        case tooLarge
        /// More progressive scans than the configured limit.
        case tooManyScans
        /// A target size or option that cannot be honoured.
        case invalidArgument
        /// The input path does not exist.
        case notFound
        /// The input path exists but cannot be read (permissions, a directory, I/O error).
        case unreadable
        /// The work was cancelled through its `CancellationFlag`.
        case cancelled
        /// Encoding the output failed.
        case encodeFailed
        /// Writing an output failed.
        case writeFailed

        /// The code's first name, from when JPEG was the only format read.
        @available(*, deprecated, renamed: "unknownFormat")
        public static var notJPEG: Code { .unknownFormat }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.name): \(message)" }
}

extension ImagingError.Code {
    /// The name commands and logs show: the contract's name where the wire has the code
    /// (`UNKNOWN_FORMAT`, `TOO_LARGE`), the same style for the codes that never leave a
    /// process (`NOT_FOUND`, `WRITE_FAILED`).
    public var name: String {
        switch self {
        case .unknownFormat: "UNKNOWN_FORMAT"
        case .empty: "EMPTY"
        case .truncated: "TRUNCATED"
        case .corrupt: "CORRUPT"
        case .unsupported: "UNSUPPORTED"
        case .tooLarge: "TOO_LARGE"
        case .tooManyScans: "TOO_MANY_SCANS"
        case .invalidArgument: "INVALID_ARGUMENT"
        case .notFound: "NOT_FOUND"
        case .unreadable: "UNREADABLE"
        case .cancelled: "CANCELLED"
        case .encodeFailed: "ENCODE_FAILED"
        case .writeFailed: "WRITE_FAILED"
        }
    }
}
