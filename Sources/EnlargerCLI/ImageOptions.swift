import ArgumentParser
import Foundation
import ImageModel
import Imaging

extension Fit: ExpressibleByArgument {}
extension OutputFormat: ExpressibleByArgument {}
extension Delivery: ExpressibleByArgument {}
extension FailOn: ExpressibleByArgument {}
extension GainMapMode: ExpressibleByArgument {}

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

    @Option(parsing: .unconditional, help: "JPEG, lossy WebP and AVIF quality 1…100.")
    var quality: Int = 80

    @Flag(help: "Write progressive JPEGs.")
    var progressive = false

    @Option(help: "JPEG chroma subsampling: 420 or 444.")
    var chroma: Chroma = .c420

    @Option(help: ArgumentHelp(
        "Output format: jpeg (the default), png, webp, avif, or pnm (binary PGM/PPM: lossless pixels). "
            + "Transparency is flattened onto --background when the format cannot carry it.",
        valueName: "format"))
    var format: OutputFormat?

    @Option(help: ArgumentHelp(
        "Acceptable output types in order of preference, comma-separated (image/avif,image/webp,image/jpeg; "
            + "or avif,webp,jpeg): the first that can carry the image is written. An image with transparency "
            + "skips types without it (jpeg, pnm) unless --flatten is given. Instead of --format.",
        valueName: "types"))
    var accept: String?

    @Flag(help: "With --accept: let an image with transparency go to a type without it, flattened onto --background.")
    var flatten = false

    @Option(help: ArgumentHelp("What transparency is flattened onto: #rrggbb or #rgb. (default: #ffffff)",
                               valueName: "colour"))
    var background: String?

    @Flag(help: "WebP output: lossless instead of lossy at --quality.")
    var lossless = false

    @Option(help: ArgumentHelp(
        "Which damage in the input fails it, least sensitive first: none; truncated (data that ends early); "
            + "error (also damaged image data; the default: stray bytes before a marker, which lose no pixels, "
            + "are accepted); warning (every decoder warning).",
        valueName: "level"))
    var failOn: FailOn = .error

    @Flag(help: "Keep an RGB or grey source's ICC profile (embedded in the output; PNM has none) instead of converting to sRGB.")
    var keepProfile = false

    @Option(help: ArgumentHelp(
        "A JPEG source's HDR gain map (UltraHDR / ISO 21496-1): keep (the default: resized with the image and "
            + "written into JPEG output, so it still shows as HDR; other formats leave it out), drop (a plain SDR "
            + "JPEG), or apply (the SDR rendition without a map: the base itself, or an HDR base tone-mapped).",
        valueName: "mode"))
    var gainMap: GainMapMode = .keep

    @Option(name: .customLong("variant"), help: ArgumentHelp(
        "Several outputs from one decode instead of --width/--height: boxes WxH (W or H may be left out), each "
            + "optionally :format, comma-separated or repeated, e.g. 320x320:webp,640x640:webp,1280x1280:jpeg "
            + "(at most \(ImagePipeline.maxVariants)). The other options apply to each. Written as <name>-WxH.<ext>.",
        valueName: "variants"))
    var variantList: [String] = []

    func validate() throws {
        if format != nil && accept != nil { throw ValidationError("give --format or --accept, not both") }
        if flatten && accept == nil { throw ValidationError("--flatten goes with --accept (--format flattens as needed)") }
        if let background, RGBColour(hex: background) == nil {
            throw ValidationError("--background '\(background)' is not a colour: give #rrggbb or #rgb")
        }
        if let accept { _ = try Self.acceptedFormats(accept) }
        if !variantList.isEmpty {
            if width != nil || height != nil { throw ValidationError("give --width/--height or --variant, not both") }
            for variant in try variants {
                do { try variant.options.validate() } catch { throw ValidationError("--variant \(variant.label): \(error.message)") }
            }
            return
        }
        do { try resizeOptions.validate() } catch { throw ValidationError(error.message) }
    }

    /// One output of --variant: its options and the label its file is named by.
    struct Variant {
        var label: String
        var options: ResizeOptions
    }

    /// --variant's outputs, each the common options with its own box (and format).
    var variants: [Variant] {
        get throws {
            let entries = variantList.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
            guard entries.count <= ImagePipeline.maxVariants else {
                throw ValidationError("--variant names \(entries.count) outputs; at most \(ImagePipeline.maxVariants)")
            }
            var seen: Set<String> = []
            return try entries.map { entry in
                let parts = entry.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
                let box = parts[0].lowercased().split(separator: "x", omittingEmptySubsequences: false)
                guard parts.count <= 2, box.count == 2, box.allSatisfy({ $0.isEmpty || Int($0) != nil }),
                      !(box[0].isEmpty && box[1].isEmpty) else {
                    throw ValidationError("--variant '\(entry)' is not WxH[:format] (e.g. 640x480:webp, 320x, x200)")
                }
                var options = resizeOptions
                options.width = Int(box[0])
                options.height = Int(box[1])
                if parts.count == 2 {
                    guard let format = OutputFormat(rawValue: parts[1].lowercased()) else {
                        throw ValidationError("--variant '\(entry)': '\(parts[1])' is not a format (jpeg, png, webp, avif, pnm)")
                    }
                    options.format = format
                    options.accept = []
                    options.flatten = false
                }
                let label = String(parts[0].lowercased())
                let key = label + ":" + (parts.count == 2 ? options.format.rawValue : accept ?? options.format.rawValue)
                guard seen.insert(key).inserted else {
                    throw ValidationError("--variant names '\(entry)' twice: each output must differ in box or format")
                }
                return Variant(label: label, options: options)
            }
        }
    }

    /// `--accept`'s list: content types or format names, comma-separated.
    static func acceptedFormats(_ list: String) throws -> [OutputFormat] {
        try list.split(separator: ",").map { entry in
            let name = entry.trimmingCharacters(in: .whitespaces)
            guard let format = OutputFormat(contentType: name) ?? OutputFormat(rawValue: name.lowercased()) else {
                throw ValidationError("--accept: '\(name)' is not a known type (image/jpeg, image/png, image/webp, "
                                      + "image/avif, image/x-portable-anymap, or jpeg, png, webp, avif, pnm)")
            }
            return format
        }
    }

    var resizeOptions: ResizeOptions {
        var options = ResizeOptions(width: width, height: height, fit: fit, enlarge: enlarge, quality: quality,
                                    progressive: progressive, chroma444: chroma == .c444, format: format ?? .jpeg,
                                    failOn: failOn, keepProfile: keepProfile)
        options.accept = accept.flatMap { try? Self.acceptedFormats($0) } ?? []
        options.flatten = flatten
        options.background = background.flatMap(RGBColour.init(hex:)) ?? .white
        options.lossless = lossless
        options.gainMap = gainMap
        return options
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

    @Option(name: .customLong("max-avif-pixels"),
            help: "Refuse AVIF outputs with more pixels than this (the AV1 encoder cannot be interrupted: this bounds its time).")
    var maxAVIFPixels: Int = DecodeLimits.defaultMaxAVIFPixels

    func validate() throws {
        for (flag, value) in [("--max-pixels", maxPixels), ("--max-bytes", maxBytes), ("--max-scans", maxScans),
                              ("--max-avif-pixels", maxAVIFPixels)]
        where value <= 0 {
            throw ValidationError("\(flag) must be positive, got \(value)")
        }
    }

    var limits: DecodeLimits {
        DecodeLimits(maxPixels: maxPixels, maxInputBytes: maxBytes, maxScans: maxScans, maxAVIFPixels: maxAVIFPixels)
    }
}
