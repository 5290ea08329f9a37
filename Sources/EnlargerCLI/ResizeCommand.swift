import ArgumentParser
import Foundation
import ImageModel
import Imaging

struct ResizeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resize",
        abstract: "Resize images (JPEG, PNG, WebP, HEIC, AVIF, GIF, JPEG XL) locally, in one process (no broker needed).",
        discussion: """
            Writes OUT/<name>.<ext> for each input (and OUT/<name>.degraded.<ext> with --degraded), \
            <ext> being the format written, printing one line per file, or one JSON object per line \
            with --json. Inputs are recognised by their content, never by their names. Every input is \
            processed; the exit code is 1 if any failed, and a failed input leaves no output file. \
            An output that would replace its own input (--out the input's directory) is refused.

            Example: enlarger resize photos/*.jpg --width 720 --height 588 --out thumbs
            """
    )

    @Argument(help: "Image files to resize (- for standard input).")
    var inputs: [String]

    @OptionGroup var image: ImageOptions
    @OptionGroup var limitOptions: LimitOptions

    @Flag(help: "Also write the degraded (quick preview) result the service would stream first.")
    var degraded = false

    @Option(help: "Output directory (created if missing).")
    var out: String

    @Flag(help: ArgumentHelp("Replace files already in --out. Without it, an output whose name is taken there fails "
              + "that input (WRITE_FAILED: already exists) and the file is left as it was."))
    var overwrite = false

    @Flag(help: "Print one JSON object per file.")
    var json = false

    func validate() throws {
        if degraded && !image.variantList.isEmpty { throw ValidationError("--degraded goes with one output, not --variant") }
        if inputs.filter({ $0 == InputSource.standardInput }).count > 1 {
            throw ValidationError("standard input (-) can be given only once")
        }
        var seen: [String: String] = [:]
        for input in inputs {
            let name = InputSource.outputName(input)
            if let other = seen[name] {
                throw ValidationError("'\(other)' and '\(input)' would both write '\(name)' in the output directory")
            }
            seen[name] = input
        }
    }

    func run() throws {
        try OutputDirectory.prepare(out)
        let pipeline = ImagePipeline(limits: limitOptions.limits)
        let options = image.resizeOptions
        let variants = try image.variants
        var failures = 0
        for input in inputs {
            do {
                let line = variants.isEmpty ? try process(input, pipeline: pipeline, options: options)
                    : try processVariants(input, pipeline: pipeline, variants: variants)
                print(line)
            } catch {
                failures += 1
                InputSource.report(error, for: input, json: json)
            }
        }
        if failures > 0 { throw ExitCode(1) }
    }

    private func process(_ input: String, pipeline: ImagePipeline, options: ResizeOptions) throws -> String {
        var preview: StageResult?
        var final: StageResult?
        let delivery: Delivery = degraded ? .progressive : .final
        let keep = { (result: StageResult) in if result.stage == .degraded { preview = result } else { final = result } }
        if !InputSource.mappable(input) {
            let bytes = try InputSource.read(input, maxBytes: pipeline.limits.maxInputBytes)
            if let problem = InputSource.notAnImage(bytes, input: input) { throw problem }
            try pipeline.run(bytes, options: options, delivery: delivery) { keep($0) }
        } else {
            // Mapped, not read: a large PNG is never resident whole (see MappedFile).
            let file = try MappedFile(path: input, maxBytes: pipeline.limits.maxInputBytes)
            if let problem = InputSource.notAnImage(Array(file.bytes.prefix(16)), input: input) { throw problem }
            try pipeline.run(file, options: options, delivery: delivery) { keep($0) }
        }
        guard let final else { throw ImagingError(.encodeFailed, "no final result") }
        // Written only once everything succeeded, degraded first: a failed input (or a failed
        // write) leaves no file behind.
        let name = InputSource.outputName(input)
        let path = (out as NSString).appendingPathComponent("\(name).\(final.image.format.fileExtension)")
        var degradedPath: String?
        var files = [(bytes: final.image.bytes, path: path)]
        if let preview {
            let p = (out as NSString).appendingPathComponent("\(name).degraded.\(preview.image.format.fileExtension)")
            files.insert((preview.image.bytes, p), at: 0)
            degradedPath = p
        }
        try write(files, input: input)
        // What the input cost: each result's timings count only what it added (the decode
        // with the first result that needed it).
        var t = final.timings
        if let preview {
            t.decodeMilliseconds += preview.timings.decodeMilliseconds
            t.resizeMilliseconds += preview.timings.resizeMilliseconds
            t.encodeMilliseconds += preview.timings.encodeMilliseconds
        }
        if json {
            var object = JSONLine()
            object.add("input", input)
            object.add("output", path)
            object.add("width", final.image.width)
            object.add("height", final.image.height)
            object.add("bytes", final.image.bytes.count)
            object.add("content_type", final.image.format.contentType)
            if !final.notes.isEmpty { object.add("notes", final.notes.joined(separator: "; ")) }
            object.add("decode_ms", t.decodeMilliseconds)
            object.add("resize_ms", t.resizeMilliseconds)
            object.add("encode_ms", t.encodeMilliseconds)
            if let preview, let degradedPath {
                var d = JSONLine()
                d.add("output", degradedPath)
                d.add("width", preview.image.width)
                d.add("height", preview.image.height)
                d.add("bytes", preview.image.bytes.count)
                d.add("source", preview.degradedSource?.rawValue ?? "")
                object.add("degraded", object: d)
            }
            return object.text
        }
        let ms = { (v: Double) in String(format: "%.1f", v) }
        return "\(input) -> \(path) \(final.image.width)x\(final.image.height) \(final.image.bytes.count) bytes "
            + "(decode \(ms(t.decodeMilliseconds)) ms, resize \(ms(t.resizeMilliseconds)) ms, encode \(ms(t.encodeMilliseconds)) ms)"
            + (degradedPath.map { " degraded -> \($0)" } ?? "")
            + final.notes.map { "\n  note: \($0)" }.joined()
    }

    /// Every variant from one decode; written once all are made (a failure leaves none).
    private func processVariants(_ input: String, pipeline: ImagePipeline,
                                 variants: [ImageOptions.Variant]) throws -> String {
        var results = [StageResult?](repeating: nil, count: variants.count)
        let options = variants.map(\.options)
        let collect = { (index: Int, result: StageResult) in results[index] = result }
        if !InputSource.mappable(input) {
            let bytes = try InputSource.read(input, maxBytes: pipeline.limits.maxInputBytes)
            if let problem = InputSource.notAnImage(bytes, input: input) { throw problem }
            try bytes.withUnsafeBytes { raw in try pipeline.prepareVariants(raw, variants: options).run(emit: collect) }
        } else {
            let file = try MappedFile(path: input, maxBytes: pipeline.limits.maxInputBytes)
            if let problem = InputSource.notAnImage(Array(file.bytes.prefix(16)), input: input) { throw problem }
            try withExtendedLifetime(file) {
                try pipeline.prepareVariants(file.bytes, variants: options).run(emit: collect)
            }
        }
        let name = InputSource.outputName(input)
        var files: [(bytes: [UInt8], path: String)] = []
        var lines: [String] = []
        var objects: [JSONLine] = []
        for (variant, result) in zip(variants, results) {
            guard let result else { throw ImagingError(.encodeFailed, "no result for variant \(variant.label)") }
            let path = (out as NSString).appendingPathComponent(
                "\(name)-\(variant.label).\(result.image.format.fileExtension)")
            files.append((result.image.bytes, path))
            let t = result.timings
            if json {
                var object = JSONLine()
                object.add("variant", variant.label)
                object.add("output", path)
                object.add("width", result.image.width)
                object.add("height", result.image.height)
                object.add("bytes", result.image.byteCount)
                object.add("content_type", result.image.format.contentType)
                if !result.notes.isEmpty { object.add("notes", result.notes.joined(separator: "; ")) }
                object.add("decode_ms", t.decodeMilliseconds)
                object.add("resize_ms", t.resizeMilliseconds)
                object.add("encode_ms", t.encodeMilliseconds)
                objects.append(object)
            } else {
                let ms = { (v: Double) in String(format: "%.1f", v) }
                lines.append("  \(path) \(result.image.width)x\(result.image.height) \(result.image.byteCount) bytes "
                             + "(decode \(ms(t.decodeMilliseconds)) ms, resize \(ms(t.resizeMilliseconds)) ms, "
                             + "encode \(ms(t.encodeMilliseconds)) ms)" + result.notes.map { "\n    note: \($0)" }.joined())
            }
        }
        try write(files, input: input)
        if json {
            return objects.map { line in
                var line = line
                line.add("input", input)
                return line.text
            }.joined(separator: "\n")
        }
        return "\(input) -> \(variants.count) outputs from one decode\n" + lines.joined(separator: "\n")
    }

    /// Every file or none (with --overwrite, a failure puts back the files that were there).
    private func write(_ files: [(bytes: [UInt8], path: String)], input: String) throws {
        for file in files { try OutputFile.refuseOverwriting(input: input, with: file.path) }
        try OutputFile.writeAll(files, replacing: overwrite)
    }
}
