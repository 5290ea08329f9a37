import ArgumentParser
import CLISupport
import Enlarger
import Foundation
import ImageModel
import Imaging
import Locking

struct SubmitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "submit",
        abstract: "Submit images (JPEG, PNG, WebP, HEIC, AVIF, GIF, JPEG XL) to the service and write their degraded and final results.",
        discussion: """
            All inputs are submitted concurrently (at most --in-flight at a time). Results go to \
            OUT/<name>.<ext> and OUT/<name>.degraded.<ext>. With --json, one JSON object per \
            event per line: id, event (accepted, started, placeholder, degraded, final, failed, \
            cancelled, rejected), t_ms since that request was submitted, and width, height, bytes, \
            path for results (the final one also queue_ms and processing_ms), width, height and \
            thumbhash (base64) for the placeholder, or code and message for failures; then one \
            summary object. Without --json, one line per result, problems on \
            standard error, a progress bar when standard error is a terminal, and a summary: done, \
            failed by code, cancelled, wall time, images/s, time queued apart from processing.

            An input of - is read from standard input (written as OUT/stdin.<ext>). Inputs are \
            recognised by their content; one in none of the formats the service reads (JPEG, PNG, \
            WebP, HEIC, AVIF, GIF, JPEG XL) is refused before anything is sent, naming what it looks like. The \
            extension of each result is the format the worker chose (see --accept).

            Ctrl-C (or SIGTERM) cancels every live request at the broker at once, prints their \
            ids and exits with status 130; a second Ctrl-C exits without waiting. The exit code \
            is 1 if any request failed.

            With --batch, the inputs are one all-or-nothing batch: every input is read and \
            checked before anything is sent; the finals are written (in input order) only once \
            all of them have arrived; if one fails, the others are cancelled, nothing is \
            written, and the failing input and its code are printed (exit code 1). With --json \
            the batch prints one object per final and then {"batch": ID, "outcome": ...}.

            With --source file, each input is a path the worker reads under its own files root \
            (enlarger worker --files-root DIR); with --source url, an http(s) URL the worker \
            downloads (--json then also prints download events: phase, bytes, expected_bytes). \
            Either way nothing is read here, and a changed file or URL is never answered from \
            the broker's cache.

            Example: enlarger submit photos/* --width 720 --height 588 --accept image/avif,image/jpeg --id-prefix batch7 --out thumbs --json
            """
    )

    @Argument(help: "Image files to submit (- for standard input).")
    var inputs: [String]

    @OptionGroup var image: ImageOptions

    @Option(help: "progressive (degraded then final), final, or degraded.")
    var delivery: Delivery = .progressive

    @Option(help: ArgumentHelp(
        "What the inputs are: local (files read here and sent), file (paths under the worker's files root), or url.",
        valueName: "kind"))
    var source: SourceKind = .local

    @Option(help: "Request ids P-0, P-1, … in input order (default: random UUIDs).")
    var idPrefix: String?

    @Option(help: "Output directory (created if missing).")
    var out: String

    @Flag(help: ArgumentHelp("Replace files already in --out. Without it, an output whose name is taken there fails "
              + "that input (WRITE_FAILED: already exists) and the file is left as it was."))
    var overwrite = false

    @Flag(help: "Print one JSON object per event.")
    var json = false

    @Option(help: "Requests outstanding at once.")
    var inFlight = 64

    @Option(help: "Refuse input files larger than this many bytes before sending them.")
    var maxBytes = DecodeLimits().maxInputBytes

    @Option(help: ArgumentHelp("Seconds each request may take from acceptance to its end (default: the broker's, 300); a request "
                + "still running then fails with DEADLINE_EXCEEDED and its worker is told to stop."))
    var timeout: Double?

    @Flag(help: "Submit the inputs as one all-or-nothing batch: every final written, or none (see below).")
    var batch = false

    @Flag(help: ArgumentHelp("Send no image digest: never answered from the broker's result cache, never sharing a job (by default "
              + "each image's SHA-256 goes with it, so an identical request in flight or recently done is not worked "
              + "out twice)."))
    var noShare = false

    @Option(help: "The broker lane of the requests: interactive (the default) or bulk, which waits behind interactive requests and never takes the capacity kept for them.")
    var priority: Priority = .interactive

    @Flag(help: ArgumentHelp("With --json, ask for no `placeholder` event (by default the first after `accepted`: the final's "
              + "size and a ThumbHash of its picture, in base64). Without --json none is asked for: nothing would show it."))
    var noPlaceholder = false

    @OptionGroup var service: ServiceOptions

    func validate() throws {
        if !image.variantList.isEmpty {
            if batch { throw ValidationError("--variant goes with one request per input, not --batch") }
            if delivery == .degraded { throw ValidationError("--variant results are finals: not with --delivery degraded") }
        }
        if let idPrefix, idPrefix.utf8.count + 1 + String(inputs.count - 1).utf8.count > 64 {
            throw ValidationError("--id-prefix is too long: request ids are at most 64 bytes")
        }
        guard inFlight > 0 else { throw ValidationError("--in-flight must be positive") }
        if let timeout, !(timeout > 0 && timeout <= 4_000_000) {
            throw ValidationError("--timeout must be a positive number of seconds (at most 4000000)")
        }
        if source != .local, inputs.contains(InputSource.standardInput) {
            throw ValidationError("standard input (-) needs --source local")
        }
        if inputs.filter({ $0 == InputSource.standardInput }).count > 1 {
            throw ValidationError("standard input (-) can be given only once")
        }
        var seen: [String: String] = [:]
        for input in inputs {
            let name = source.outputName(input)
            if let other = seen[name] {
                throw ValidationError("'\(other)' and '\(input)' would both write '\(name)' in the output directory")
            }
            seen[name] = input
        }
    }

    func run() async throws {
        try OutputDirectory.prepare(out)
        if batch { return try await runBatch() }
        let configuration = try service.clientConfiguration()
        let endpoint = service.clientEndpoint
        let display = SubmitDisplay(total: inputs.count, showsProgress: !json && isatty(STDERR_FILENO) != 0)
        let options = image.resizeOptions
        let ids = inputs.indices.map { index in idPrefix.map { "\($0)-\(index)" } ?? UUID().uuidString }
        let live = LiveRequests()

        // The first Ctrl-C cancels what is live; a second one leaves without waiting.
        let (interrupts, interrupt) = AsyncStream.makeStream(of: Int32.self)
        let signalled = Lock(false)
        let signals = onTerminationSignals { number in
            if signalled.withLock({ seen in defer { seen = true }; return seen }) { _exit(128 + number) }
            interrupt.yield(number)
        }
        defer { signals.forEach { $0.cancel() } }

        let start = ContinuousClock.now
        let (summary, cancelledIDs, signal) = try await withEnlargerClient(brokerEndpoint: endpoint, configuration: configuration) {
            client in
            await withTaskGroup(of: (cancelled: [String], signal: Int32)?.self) { group in
                group.addTask {
                    for await number in interrupts {
                        // Strict cancel: these requests' events end now; the broker stops their work.
                        let ids = live.stop()
                        let cancelled = await withTaskGroup(of: String?.self) { cancels in
                            for id in ids {
                                cancels.addTask { (try? await client.cancel(id)) == .cancelled ? id : nil }
                            }
                            var cancelled: [String] = []
                            for await id in cancels { if let id { cancelled.append(id) } }
                            return cancelled
                        }
                        return (ids.filter(cancelled.contains), number)
                    }
                    return nil
                }
                let summary = await submitAll(ids: ids, options: options, client: client, live: live, display: display)
                interrupt.finish()
                var interruption: (cancelled: [String], signal: Int32)?
                for await result in group { if let result { interruption = result } }
                return (summary, interruption?.cancelled ?? [], interruption?.signal)
            }
        }
        let wall = ContinuousClock.now - start
        display.endProgress()
        if summary.unreachable > 0 {
            display.error("cannot reach the broker at \(endpoint): no answer (is it running, and is this the right endpoint?)")
        }
        if signal != nil {
            display.error(cancelledIDs.isEmpty
                ? "interrupted: nothing was live to cancel"
                : "interrupted: cancelled \(cancelledIDs.count) at the broker: \(cancelledIDs.joined(separator: " "))")
        }
        if json {
            display.line(summary.json(wall: wall).text)
        } else {
            display.error(summary.text(wall: wall))
        }
        if let signal { throw ExitCode(128 + signal) }
        if summary.failed > 0 { throw ExitCode(1) }
    }

    /// `--batch`: reads every input, runs them as one batch, writes every final or none.
    private func runBatch() async throws {
        let display = SubmitDisplay(total: inputs.count, showsProgress: false)
        let batchID = idPrefix ?? UUID().uuidString
        guard inputs.count <= 1024 else { throw CLIError("--batch takes at most 1024 inputs, got \(inputs.count)") }
        var requests: [ResizeRequest] = []
        for (index, input) in inputs.enumerated() {
            let imageSource: ImageSource
            do {
                imageSource = try self.imageSource(input)
            } catch {
                throw CLIError("\(input): \(error.message) (nothing was sent)")
            }
            var request = ResizeRequest(
                id: idPrefix.map { "\($0)-\(index)" } ?? UUID().uuidString, source: imageSource, options: image.resizeOptions,
                delivery: .final, timeout: timeout.map { .milliseconds(Int64(($0 * 1000).rounded(.up))) },
                sharesResults: !noShare)
            request.priority = priority
            request.placeholder = false  // a batch returns its finals only
            requests.append(request)
        }
        let start = ContinuousClock.now
        // Ctrl-C cancels the batch (every item at the broker) and exits 130.
        let work = Task { [requests] () async -> Result<[EncodedImage], EnlargerClientError> in
            do {
                return .success(try await withEnlargerClient(
                    brokerEndpoint: service.clientEndpoint, configuration: try service.clientConfiguration()
                ) { client in try await client.resize(batch: requests, id: batchID) })
            } catch let error as EnlargerClientError {
                return .failure(error)
            } catch {
                return .failure(.failed(.internal, "\(error)"))
            }
        }
        let interrupted = Lock<Int32?>(nil)
        let signals = onTerminationSignals { number in
            if interrupted.withLock({ seen in defer { seen = number }; return seen != nil }) { _exit(128 + number) }
            work.cancel()
        }
        defer { signals.forEach { $0.cancel() } }
        let outcome = await work.value
        let wall = milliseconds(ContinuousClock.now - start)
        func summary(_ outcome: String, _ fill: (inout JSONLine) -> Void = { _ in }) {
            guard json else { return }
            var line = JSONLine()
            line.add("batch", batchID)
            line.add("outcome", outcome)
            line.add("items", inputs.count)
            line.add("wall_ms", wall)
            fill(&line)
            display.line(line.text)
        }
        switch outcome {
        case .success(let images):
            let paths = images.enumerated().map { index, result in
                (out as NSString).appendingPathComponent("\(source.outputName(inputs[index])).\(result.format.fileExtension)")
            }
            do {
                // All or nothing on disk too: every file is written before any is put in place.
                if source == .local {
                    for (input, path) in zip(inputs, paths) { try OutputFile.refuseOverwriting(input: input, with: path) }
                }
                try OutputFile.writeAll(zip(images, paths).map { ($0.bytes, $1) }, replacing: overwrite)
            } catch {
                summary("failed") {
                    $0.add("code", error.code.name)
                    $0.add("message", error.message)
                }
                if !json { display.error("batch \(batchID): \(error.message); nothing was written") }
                throw ExitCode(1)
            }
            for (index, result) in images.enumerated() {
                let path = paths[index]
                if json {
                    var line = JSONLine()
                    line.add("id", requests[index].id)
                    line.add("input", inputs[index])
                    line.add("event", "final")
                    line.add("index", index)
                    line.add("width", result.width)
                    line.add("height", result.height)
                    line.add("bytes", result.bytes.count)
                    line.add("content_type", result.format.contentType)
                    if result.cached { line.add("cached", true) }
                    line.add("path", path)
                    display.line(line.text)
                } else {
                    display.line("\(inputs[index]) -> \(path) \(result.width)x\(result.height)")
                }
            }
            summary("completed")
            if !json { display.error("batch \(batchID): \(images.count) of \(inputs.count) done in \(Int(wall)) ms") }
        case .failure(.batchFailed(let index, let id, let reason)):
            let (code, message) = reason.codeAndMessage
            summary("failed") {
                $0.add("index", index)
                $0.add("id", id)
                $0.add("input", inputs[index])
                $0.add("code", code)
                $0.add("message", message)
            }
            if !json {
                display.error("batch \(batchID) failed: item \(index) (\(inputs[index])): \(code): \(message); "
                              + "the others were cancelled and nothing was written")
            }
            throw ExitCode(1)
        case .failure(let error):
            let (code, message) = error.codeAndMessage
            let signal = interrupted.withLock { $0 }
            summary(signal != nil || error == .cancelled ? "cancelled" : "failed") {
                $0.add("code", code)
                $0.add("message", message)
            }
            if !json { display.error("batch \(batchID): \(signal != nil ? "interrupted, cancelled" : message); nothing was written") }
            throw ExitCode(signal.map { 128 + $0 } ?? 1)
        }
    }

    /// What a request for `input` names: its bytes, read here and checked to be an image in a
    /// format the service reads; or, with `--source file|url`, the path or URL as given.
    private func imageSource(_ input: String) throws(ImagingError) -> ImageSource {
        switch source {
        case .local:
            let bytes = try InputSource.read(input, maxBytes: maxBytes)
            if let problem = InputSource.notAnImage(bytes, input: input) { throw problem }
            return .bytes(bytes)
        case .file:
            return .file(path: input)
        case .url:
            return .url(input)
        }
    }

    /// Submits every input, at most `inFlight` at a time, until all have ended or the run stops.
    private func submitAll(ids: [String], options: ResizeOptions, client: EnlargerClient, live: LiveRequests,
                           display: SubmitDisplay) async -> SubmitSummary {
        await withTaskGroup(of: SubmitOutcome.self) { group in
            var summary = SubmitSummary()
            var next = 0
            var brokerAnswered = true
            func add() {
                let index = next
                next += 1
                group.addTask {
                    await submitOne(inputs[index], id: ids[index], options: options, client: client, live: live, display: display)
                }
            }
            while next < min(inFlight, inputs.count) { add() }
            for await outcome in group {
                summary.add(outcome)
                display.finished(outcome)
                if case .unreachable = outcome { brokerAnswered = false }
                if next < inputs.count && brokerAnswered && !live.isStopped { add() }
            }
            // Stopped early: the rest were never sent.
            for _ in next..<inputs.count {
                summary.add(.notSent)
                display.finished(.notSent)
            }
            return summary
        }
    }

    /// Submits one input and reports its events.
    private func submitOne(_ input: String, id: String, options: ResizeOptions, client: EnlargerClient,
                           live: LiveRequests, display: SubmitDisplay) async -> SubmitOutcome {
        let start = ContinuousClock.now
        let shownInput = input == InputSource.standardInput ? "(stdin)" : input
        func report(_ event: String, _ fill: (inout JSONLine) -> Void = { _ in }) {
            guard json else { return }
            var line = JSONLine()
            line.add("id", id)
            line.add("input", input)
            line.add("event", event)
            line.add("t_ms", milliseconds(ContinuousClock.now - start))
            fill(&line)
            display.line(line.text)
        }
        func fail(_ event: String, code: String, message: String) -> SubmitOutcome {
            report(event) {
                $0.add("code", code)
                $0.add("message", message)
            }
            // `cancelled by another connection`, `failed CORRUPT: …`, `rejected OVERLOADED: …`.
            if !json { display.error("\(shownInput) [\(id)]: " + (event == "cancelled" ? message : "\(event) \(code): \(message)")) }
            return .failed(code: code)
        }
        let imageSource: ImageSource
        do {
            imageSource = try self.imageSource(input)
        } catch {
            return fail("failed", code: error.code.name, message: error.message)
        }
        let name = source.outputName(input)
        var timings: [String] = []
        var startedAt: ContinuousClock.Instant?
        var request = ResizeRequest(id: id, source: imageSource, options: options, delivery: delivery,
                                    timeout: timeout.map { .milliseconds(Int64(($0 * 1000).rounded(.up))) })
        request.sharesResults = !noShare
        request.priority = priority
        request.placeholder = !noPlaceholder && json
        let variants = (try? image.variants) ?? []
        request.variants = variants.map(\.options)
        var variantsWritten = 0
        guard let events = live.begin(id, { client.submit(request) }) else { return .notSent }
        defer { live.end(id) }
        do {
            for try await event in events {
                switch event {
                case .accepted:
                    report("accepted")
                case .started(let attempt):
                    if startedAt == nil { startedAt = .now }
                    report("started") { $0.add("attempt", attempt) }
                case .placeholder(let placeholder):
                    report("placeholder") {
                        $0.add("width", placeholder.width)
                        $0.add("height", placeholder.height)
                        $0.add("thumbhash", Data(placeholder.thumbHash).base64EncodedString())
                    }
                case .degraded(let result), .final(let result):
                    let isFinal = if case .final = event { true } else { false }
                    let ext = result.format.fileExtension
                    var path = (out as NSString).appendingPathComponent(isFinal ? "\(name).\(ext)" : "\(name).degraded.\(ext)")
                    if !variants.isEmpty {
                        guard isFinal, variants.indices.contains(result.variant) else {
                            return fail("failed", code: "internal", message: "the service sent a result for no variant asked")
                        }
                        path = (out as NSString).appendingPathComponent("\(name)-\(variants[result.variant].label).\(ext)")
                    }
                    do {
                        if source == .local { try OutputFile.refuseOverwriting(input: input, with: path) }
                        try OutputFile.write(result.bytes, to: path, replacing: overwrite)
                    } catch {
                        // Nothing more of it can be written: stop its work at the broker too.
                        if !isFinal { _ = try? await client.cancel(id) }
                        return fail("failed", code: error.code.name, message: error.message)
                    }
                    let now = ContinuousClock.now
                    let queued = (startedAt ?? now) - start
                    let processing = now - (startedAt ?? now)
                    timings.append("\(isFinal ? "final" : "degraded") at \(Int(milliseconds(now - start))) ms")
                    report(isFinal ? "final" : "degraded") {
                        if !variants.isEmpty { $0.add("variant", variants[result.variant].label) }
                        $0.add("width", result.width)
                        $0.add("height", result.height)
                        $0.add("bytes", result.bytes.count)
                        $0.add("content_type", result.format.contentType)
                        if !result.notes.isEmpty { $0.add("notes", result.notes.joined(separator: "; ")) }
                        if result.cached { $0.add("cached", true) }
                        $0.add("path", path)
                        if isFinal {
                            $0.add("queue_ms", milliseconds(queued))
                            $0.add("processing_ms", milliseconds(processing))
                        }
                    }
                    if (isFinal || delivery == .degraded) && !json {
                        display.line("\(shownInput) -> \(path) \(result.width)x\(result.height) "
                                     + (result.cached ? "(from the broker's cache; \(timings.joined(separator: ", ")))"
                                        : "(queued \(Int(milliseconds(queued))) ms, processing \(Int(milliseconds(processing))) ms; "
                                          + "\(timings.joined(separator: ", ")))"))
                    }
                    // With variants, the request ends with the last of them.
                    if !variants.isEmpty {
                        variantsWritten += 1
                        if variantsWritten < variants.count { continue }
                    }
                    if isFinal || delivery == .degraded { return .done(queued: queued, processing: processing) }
                case .download(let progress):
                    report("download") {
                        $0.add("phase", progress.phase.name)
                        $0.add("bytes", progress.bytes)
                        if let expected = progress.expectedBytes { $0.add("expected_bytes", expected) }
                    }
                case .info:
                    // Only `EnlargerClient.info` asks for one; a resize never gets it.
                    return fail("failed", code: "internal", message: "the service answered a resize with an info result")
                }
            }
            // The sequence ends without a result only after a cancel through this client
            // (Ctrl-C): reported once for the whole run.
            report("cancelled") {
                $0.add("code", "cancelled")
                $0.add("message", "cancelled on interrupt")
            }
            return .cancelled
        } catch .brokerUnreachable {
            // Reported once for the whole run.
            report("failed") {
                $0.add("code", "brokerUnreachable")
                $0.add("message", "no broker answered")
            }
            return .unreachable
        } catch {
            let (code, message) = error.codeAndMessage
            if case .cancelled = error {
                _ = fail(error.eventName, code: code, message: message)
                return .cancelled
            }
            return fail(error.eventName, code: code, message: message)
        }
    }
}

/// The requests of one `submit` run that may still be live at the broker, and whether the
/// run has stopped (Ctrl-C): after that nothing more is submitted.
final class LiveRequests: Sendable {
    private let state = Lock((ids: Set<String>(), stopped: false))

    /// Submits under the lock, so a stop either sees the request or prevents it.
    func begin(_ id: String, _ submit: () -> RequestEvents) -> RequestEvents? {
        state.withLock { state in
            guard !state.stopped else { return nil }
            state.ids.insert(id)
            return submit()
        }
    }

    func end(_ id: String) {
        state.withLock { _ = $0.ids.remove(id) }
    }

    var isStopped: Bool { state.withLock { $0.stopped } }

    /// Stops the run and returns the ids still live, sorted.
    func stop() -> [String] {
        state.withLock { state in
            state.stopped = true
            return state.ids.sorted()
        }
    }
}

/// What `submit`'s inputs name (`--source`).
enum SourceKind: String, ExpressibleByArgument, CaseIterable, Sendable {
    case local
    case file
    case url

    /// The result's file name without extension: the input's last path component without its
    /// extension (for a URL, of its path; `download` when it has none).
    func outputName(_ input: String) -> String {
        switch self {
        case .local, .file:
            return InputSource.outputName(input)
        case .url:
            let path = URLComponents(string: input)?.path ?? ""
            let name = ((path as NSString).lastPathComponent as NSString).deletingPathExtension
            return name.isEmpty || name == "/" ? "download" : name
        }
    }
}

extension DownloadProgress.Phase {
    var name: String {
        switch self {
        case .started: "started"
        case .progress: "progress"
        case .finished: "finished"
        }
    }
}

extension Priority: ExpressibleByArgument {}
