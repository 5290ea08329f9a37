/// What an image's header says about it, read without decoding any pixel.
public struct ImageInfo: Sendable, Equatable {
    /// The container format detected from the content: `jpeg`, `png`, `webp`, `heic`,
    /// `avif`, `gif` or `jxl`.
    public var format: String
    /// Displayed size, after EXIF orientation.
    public var width: Int
    public var height: Int
    /// The EXIF orientation, 1 (upright) to 8.
    public var orientation: Int
    /// Channels of the decoded image: 1 (grey) or 3 (colour); 4 with alpha.
    public var channels: Int
    public var hasAlpha: Bool
    /// Bits per sample.
    public var bitDepth: Int
    /// How the file stores colour: `gray`, `ycbcr`, `rgb`, `cmyk` or `ycck` (JPEG); `gray`, `rgb`
    /// or `palette` (PNG); `ycbcr` or `argb` (WebP lossy or lossless); `ycbcr` (HEIC, AVIF);
    /// `palette` (GIF); `xyb` (JPEG XL lossy), `rgb` or `gray` (JPEG XL lossless).
    public var colorSpace: String
    /// The embedded colour profile's description, `nil` when there is none (or it is unreadable).
    public var profileDescription: String?
    /// The embedded profile's size in bytes, 0 when there is none.
    public var profileBytes: Int
    /// A progressive JPEG, or an interlaced PNG.
    public var progressive: Bool
    /// Whether an embedded thumbnail (EXIF in JPEG, a thumbnail item in HEIC) is there to make a
    /// quick degraded result.
    public var hasEmbeddedThumbnail: Bool
    /// The input's size.
    public var byteSize: Int
    /// A JPEG carrying an HDR gain map (UltraHDR, ISO 21496-1) that a resize can keep.
    public var hasGainMap: Bool

    public init(format: String, width: Int, height: Int, orientation: Int, channels: Int, hasAlpha: Bool,
                bitDepth: Int, colorSpace: String, profileDescription: String?, profileBytes: Int,
                progressive: Bool, hasEmbeddedThumbnail: Bool, byteSize: Int, hasGainMap: Bool = false) {
        self.format = format
        self.width = width
        self.height = height
        self.orientation = orientation
        self.channels = channels
        self.hasAlpha = hasAlpha
        self.bitDepth = bitDepth
        self.colorSpace = colorSpace
        self.profileDescription = profileDescription
        self.profileBytes = profileBytes
        self.progressive = progressive
        self.hasEmbeddedThumbnail = hasEmbeddedThumbnail
        self.byteSize = byteSize
        self.hasGainMap = hasGainMap
    }
}
