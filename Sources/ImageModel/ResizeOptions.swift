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
    /// 8-bit grey, RGB or RGBA.
    case png
    /// Lossy at the request's quality, or lossless; RGB or RGBA.
    case webp
    /// AV1 in HEIF at a fast encoder speed; RGB, RGBA or grey.
    case avif

    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .pnm: "pnm"
        case .png: "png"
        case .webp: "webp"
        case .avif: "avif"
        }
    }

    /// The media type that names the format in an `accept` list and in a result.
    public var contentType: String {
        switch self {
        case .jpeg: "image/jpeg"
        case .pnm: "image/x-portable-anymap"
        case .png: "image/png"
        case .webp: "image/webp"
        case .avif: "image/avif"
        }
    }

    /// The format a media type names (case-insensitive, parameters ignored), or nil.
    public init?(contentType: String) {
        let bare = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let name = String(bare.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
            .lowercased()
        guard let format = Self.allCases.first(where: { $0.contentType == name }) ?? Self.aliases[name] else {
            return nil
        }
        self = format
    }

    private static let aliases: [String: OutputFormat] = [
        "image/jpg": .jpeg, "image/pjpeg": .jpeg, "image/x-portable-pixmap": .pnm, "image/x-portable-graymap": .pnm,
    ]

    /// Whether the format can carry transparency.
    public var carriesAlpha: Bool {
        switch self {
        case .png, .webp, .avif: true
        case .jpeg, .pnm: false
        }
    }
}

/// An opaque sRGB colour, for flattening transparency.
public struct RGBColour: Sendable, Equatable, CustomStringConvertible {
    public var red: UInt8
    public var green: UInt8
    public var blue: UInt8

    public init(red: UInt8, green: UInt8, blue: UInt8) {
        self.red = red
        self.green = green
        self.blue = blue
    }

    public static let white = RGBColour(red: 255, green: 255, blue: 255)

    /// `0xRRGGBB`.
    public init(packed: UInt32) {
        self.init(red: UInt8((packed >> 16) & 0xFF), green: UInt8((packed >> 8) & 0xFF), blue: UInt8(packed & 0xFF))
    }

    public var packed: UInt32 { UInt32(red) << 16 | UInt32(green) << 8 | UInt32(blue) }

    /// `#rrggbb`, `rrggbb` or `#rgb`; nil for anything else.
    public init?(hex text: String) {
        var digits = Substring(text)
        if digits.hasPrefix("#") { digits = digits.dropFirst() }
        if digits.count == 3 { digits = Substring(digits.flatMap { [$0, $0] }) }
        guard digits.count == 6, digits.allSatisfy(\.isHexDigit), let value = UInt32(digits, radix: 16) else { return nil }
        self.init(packed: value)
    }

    public var description: String {
        "#" + [red, green, blue].map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
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

/// What becomes of a JPEG source's HDR gain map (UltraHDR / ISO 21496-1: a second image
/// saying how much brighter each pixel is on an HDR screen).
public enum GainMapMode: String, Sendable, CaseIterable {
    /// Resized with the image (same crop and orientation) and written into a JPEG output with
    /// its metadata, so the output still shows as HDR. Other output formats drop it (said in a
    /// note). The default.
    case keep
    /// Left out: a plain SDR JPEG.
    case drop
    /// The SDR rendition with no map: the base image itself when it is SDR (every phone writes
    /// an SDR base), or an HDR base tone-mapped to SDR through the map.
    case apply
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
    /// The output format when `accept` is empty: then transparency, if any, is flattened onto
    /// `background` when the format cannot carry it.
    public var format: OutputFormat = .jpeg
    /// Acceptable output formats in order of preference. The first that can carry the image
    /// is produced: one that would drop real transparency is passed over unless `flatten` is
    /// set. Empty: `format`.
    public var accept: [OutputFormat] = []
    /// Allow an image with transparency to go to a format without it (flattened onto
    /// `background`) when that format comes first in `accept`.
    public var flatten = false
    /// What transparency is flattened onto.
    public var background = RGBColour.white
    /// WebP output: lossless instead of lossy at `quality`.
    public var lossless = false
    /// Which damage in the input fails the decode.
    public var failOn: FailOn = .error
    /// Keep an RGB or grey source's embedded ICC profile: no conversion to sRGB, and the
    /// profile embedded in JPEG output (PNM carries none). A CMYK source is converted to sRGB
    /// whatever this says: its profile cannot describe the RGB output.
    public var keepProfile = false
    /// What becomes of an HDR gain map (UltraHDR, ISO 21496-1) in a JPEG source.
    public var gainMap: GainMapMode = .keep

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

    /// The format to produce for an image with (`hasAlpha`) or without real transparency, and
    /// whether its transparency is flattened; throws `.invalidArgument` when no acceptable
    /// format keeps the transparency and flattening is not allowed.
    public func outputFormat(hasAlpha: Bool) throws(ImagingError) -> (format: OutputFormat, flatten: Bool) {
        if accept.isEmpty { return (format, hasAlpha && !format.carriesAlpha) }
        guard hasAlpha else { return (accept[0], false) }
        for candidate in accept where candidate.carriesAlpha || flatten {
            return (candidate, !candidate.carriesAlpha)
        }
        let names = accept.map(\.contentType).joined(separator: ", ")
        throw ImagingError(.invalidArgument, "the image has transparency and no accepted type keeps it (\(names)); "
                           + "accept image/png, image/webp or image/avif, or allow flattening")
    }

    /// A copy accepting `formats`, in order of preference.
    public func accepting(_ formats: [OutputFormat], flatten: Bool = false) -> ResizeOptions {
        var copy = self
        copy.accept = formats
        copy.flatten = flatten
        return copy
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
