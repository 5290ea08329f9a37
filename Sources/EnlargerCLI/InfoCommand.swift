import ArgumentParser
import Foundation
import ImageModel
import Imaging

/// `enlarger info`: what each image's header says, without decoding a pixel.
struct InfoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show what images' headers say (size, orientation, colour, profile, thumbnail) without decoding pixels.",
        discussion: """
            Reads only the headers, locally (no broker needed): format, displayed width and height \
            (after EXIF orientation), orientation, channels, alpha, bit depth, colour space, the \
            embedded colour profile's description, progressive or not, embedded thumbnail or not, \
            and byte size. The limits are checked as a resize would check them. The exit code is 1 \
            if any input could not be read.

            Example: enlarger info photos/*.jpg --json
            """
    )

    @Argument(help: "Image files (- for standard input).")
    var inputs: [String]

    @Flag(help: "Print one JSON object per file.")
    var json = false

    @Option(help: ArgumentHelp("Which damage in a header fails it: none, truncated, error (default) or warning.",
                               valueName: "level"))
    var failOn: FailOn = .error

    @OptionGroup var limitOptions: LimitOptions

    func validate() throws {
        if inputs.filter({ $0 == InputSource.standardInput }).count > 1 {
            throw ValidationError("standard input (-) can be given only once")
        }
    }

    func run() throws {
        let pipeline = ImagePipeline(limits: limitOptions.limits)
        var failures = 0
        for input in inputs {
            do {
                let failOn = failOn
                let info: ImageInfo
                if !InputSource.mappable(input) {
                    let bytes = try InputSource.read(input, maxBytes: pipeline.limits.maxInputBytes)
                    if let problem = InputSource.notAnImage(bytes, input: input) { throw problem }
                    info = try bytes.withUnsafeBytes { raw throws(ImagingError) in try pipeline.info(of: raw, failOn: failOn) }
                } else {
                    // Mapped: only the header's pages are ever read.
                    let file = try MappedFile(path: input, maxBytes: pipeline.limits.maxInputBytes)
                    if let problem = InputSource.notAnImage(Array(file.bytes.prefix(16)), input: input) { throw problem }
                    info = try pipeline.info(of: file.bytes, failOn: failOn)
                    withExtendedLifetime(file) {}
                }
                print(json ? Self.json(info, input: input) : Self.line(info, input: input))
            } catch {
                failures += 1
                InputSource.report(error, for: input, json: json)
            }
        }
        if failures > 0 { throw ExitCode(1) }
    }

    static func line(_ info: ImageInfo, input: String) -> String {
        var parts = ["\(info.format) \(info.width)x\(info.height)"]
        if info.orientation != 1 { parts.append("orientation \(info.orientation)") }
        parts.append("\(info.colorSpace) \(info.bitDepth)-bit, \(info.channels) channel\(info.channels == 1 ? "" : "s")"
                     + (info.hasAlpha ? " with alpha" : ""))
        if let profile = info.profileDescription {
            parts.append("profile \"\(profile)\"")
        } else if info.profileBytes > 0 {
            parts.append("unreadable profile (\(info.profileBytes) bytes)")
        }
        switch info.format {
        case "jpeg": parts.append(info.progressive ? "progressive" : "baseline")
        case "png": if info.progressive { parts.append("interlaced") }
        default: break
        }
        if info.hasEmbeddedThumbnail { parts.append(info.format == "jpeg" ? "EXIF thumbnail" : "embedded thumbnail") }
        if info.hasGainMap { parts.append("HDR gain map") }
        parts.append("\(info.byteSize) bytes")
        return "\(input): " + parts.joined(separator: ", ")
    }

    static func json(_ info: ImageInfo, input: String) -> String {
        var object = JSONLine()
        object.add("input", input)
        object.add("format", info.format)
        object.add("width", info.width)
        object.add("height", info.height)
        object.add("orientation", info.orientation)
        object.add("channels", info.channels)
        object.add("alpha", info.hasAlpha)
        object.add("bit_depth", info.bitDepth)
        object.add("color_space", info.colorSpace)
        if let profile = info.profileDescription { object.add("profile", profile) }
        object.add("profile_bytes", info.profileBytes)
        object.add("progressive", info.progressive)
        object.add("embedded_thumbnail", info.hasEmbeddedThumbnail)
        object.add("gain_map", info.hasGainMap)
        object.add("bytes", info.byteSize)
        return object.text
    }
}
