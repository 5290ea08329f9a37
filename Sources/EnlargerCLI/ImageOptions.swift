import ArgumentParser
import ImageModel
import Imaging

extension Fit: ExpressibleByArgument {}
extension OutputFormat: ExpressibleByArgument {}
extension Delivery: ExpressibleByArgument {}
extension FailOn: ExpressibleByArgument {}

enum Chroma: String, ExpressibleByArgument, CaseIterable {
    case c420 = "420", c444 = "444"
}

/// The resize options shared by `resize` and `submit`.
struct ImageOptions: ParsableArguments {
    // `.unconditional`: `--width -5` is a (bad) width, as `--width=-5` is, not a missing value.
    @Option(name: .shortAndLong, parsing: .unconditional,
            help: "Target width in pixels (1…16384). With only one of width/height the aspect ratio is kept.")
    var width: Int?

    // -h is help, as everywhere.
    @Option(name: [.customShort("H"), .long], parsing: .unconditional, help: "Target height in pixels (1…16384).")
    var height: Int?

    @Option(help: "inside: fit within the box (default); cover: fill the box and crop the centre; fill: stretch to the box.")
    var fit: Fit = .inside

    @Flag(help: "Allow output larger than the source (off by default: never upscale).")
    var enlarge = false

    @Option(parsing: .unconditional, help: "JPEG quality 1…100.")
    var quality: Int = 80

    @Flag(help: "Write progressive JPEGs.")
    var progressive = false

    @Option(help: "JPEG chroma subsampling: 420 or 444.")
    var chroma: Chroma = .c420

    @Option(help: "Output format: jpeg, or pnm (binary PGM/PPM: lossless pixels).")
    var format: OutputFormat = .jpeg

    @Option(help: ArgumentHelp(
        "Which damage in the input fails it, least sensitive first: none; truncated (data that ends early); "
            + "error (also damaged image data; the default: stray bytes before a marker, which lose no pixels, "
            + "are accepted); warning (every decoder warning).",
        valueName: "level"))
    var failOn: FailOn = .error

    @Flag(help: "Keep an RGB or grey source's ICC profile (embedded in JPEG output) instead of converting to sRGB.")
    var keepProfile = false

    func validate() throws {
        do { try resizeOptions.validate() } catch { throw ValidationError(error.message) }
    }

    var resizeOptions: ResizeOptions {
        ResizeOptions(width: width, height: height, fit: fit, enlarge: enlarge, quality: quality,
                      progressive: progressive, chroma444: chroma == .c444, format: format, failOn: failOn,
                      keepProfile: keepProfile)
    }
}

/// Decoder limits, configurable from every command that decodes.
struct LimitOptions: ParsableArguments {
    @Option(help: "Refuse images with more pixels than this (checked from the header).")
    var maxPixels: Int = DecodeLimits().maxPixels

    @Option(help: "Refuse inputs larger than this many bytes.")
    var maxBytes: Int = DecodeLimits().maxInputBytes

    @Option(help: "Refuse progressive JPEGs with more scans than this.")
    var maxScans: Int = DecodeLimits().maxScans

    func validate() throws {
        guard maxPixels > 0, maxBytes > 0, maxScans > 0 else {
            throw ValidationError("limits must be positive")
        }
    }

    var limits: DecodeLimits { DecodeLimits(maxPixels: maxPixels, maxInputBytes: maxBytes, maxScans: maxScans) }
}
