/// How the output box is filled.
public enum Fit: String, Sendable, CaseIterable {
    /// Scale to fit inside the box, keeping the aspect ratio (the default).
    case inside
    /// Scale to cover the box, keeping the aspect ratio, then crop the centre to exactly the box.
    case cover
    /// Stretch to exactly the box.
    case fill
}

public enum OutputFormat: String, Sendable, CaseIterable {
    case jpeg
    /// Binary PGM (gray) or PPM (RGB): lossless, for tests and for users who want pixels.
    case pnm

    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .pnm: "pnm"
        }
    }
}

/// Which damage in the input fails a decode, least sensitive first; each level fails on what
/// the ones before it fail on and more. Fatal errors fail at every level, and the limits are
/// checked from the header whatever the level.
public enum FailOn: String, Sendable, CaseIterable, Comparable {
    /// No warning fails: damaged parts decode as the decoder repairs them (grey or garbled).
    case none
    /// Data that ends early fails (`truncated`).
    case truncated
    /// Also damaged entropy-coded data and the like (`corrupt`); warnings that lose no pixels
    /// (stray bytes before a marker between segments, an unknown JFIF revision, a damaged ICC
    /// chunk) are accepted. The default.
    case error
    /// Every warning fails (`corrupt`), also those that lose no pixels.
    case warning

    public static func < (lhs: FailOn, rhs: FailOn) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// What the caller asks for. A nil axis is unconstrained; at least one must be given.
public struct ResizeOptions: Sendable, Equatable {
    /// The largest target accepted on either axis.
    public static let maxDimension = 16384

    public var width: Int?
    public var height: Int?
    public var fit: Fit = .inside
    /// Allow the output to be larger than the (oriented) source.
    public var enlarge = false
    /// JPEG quality 1…100.
    public var quality = 80
    public var progressive = false
    /// 4:4:4 chroma instead of the default 4:2:0.
    public var chroma444 = false
    public var format: OutputFormat = .jpeg
    /// Which damage in the input fails the decode.
    public var failOn: FailOn = .error
    /// Keep an RGB or grey source's embedded ICC profile: no conversion to sRGB, and the
    /// profile embedded in JPEG output (PNM carries none). A CMYK source is converted to sRGB
    /// whatever this says: its profile cannot describe the RGB output.
    public var keepProfile = false

    public init(width: Int? = nil, height: Int? = nil, fit: Fit = .inside, enlarge: Bool = false,
                quality: Int = 80, progressive: Bool = false, chroma444: Bool = false, format: OutputFormat = .jpeg,
                failOn: FailOn = .error, keepProfile: Bool = false) {
        self.width = width
        self.height = height
        self.fit = fit
        self.enlarge = enlarge
        self.quality = quality
        self.progressive = progressive
        self.chroma444 = chroma444
        self.format = format
        self.failOn = failOn
        self.keepProfile = keepProfile
    }

    /// Throws `.invalidArgument` with a message naming the offending value.
    public func validate() throws(ImagingError) {
        if width == nil && height == nil {
            throw ImagingError(.invalidArgument, "a target width or height is required")
        }
        for (name, value) in [("width", width), ("height", height)] {
            if let value, value < 1 || value > Self.maxDimension {
                throw ImagingError(.invalidArgument, "\(name) \(value) is out of range 1…\(Self.maxDimension)")
            }
        }
        if quality < 1 || quality > 100 {
            throw ImagingError(.invalidArgument, "quality \(quality) is out of range 1…100")
        }
    }
}
