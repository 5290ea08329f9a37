import ArgumentParser
import CLISupport
import Enlarger
import Foundation
import ImageModel
import Imaging
import Mirroring

/// `enlarger sync SRC --out DIR`: DIR mirrors SRC as thumbnails, made by the service. The
/// rules (what is written where, what is never touched, what a crash leaves) are
/// `Mirroring`'s; this command parses the options and reports.
struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Keep a directory of thumbnails in step with a directory of images, through the service.",
        discussion: """
            Walks SRC (recursively; names starting with a dot are left out) and makes OUT mirror \
            it: OUT/<relative path>.<ext> for every image, the source's whole name kept (so \
            IMG_1.jpg and IMG_1.HEIC never share a thumbnail) and <ext> the format the worker \
            chose. Files in no format the service reads, empty files, symbolic links (not \
            followed) and other non-regular files are skipped and reported. Only files new or \
            changed since the last pass are sent (size, modification and change times, inode); \
            thumbnails of removed files are deleted.

            OUT may not be SRC nor contain it (however named: links and bind mounts are seen \
            through); inside SRC it must be a directory of its own (empty, or made by sync), \
            which the scan leaves out. sync writes and deletes only the files its record \
            (OUT/.enlarger-sync.journal) names as its own thumbnails; any other file in OUT is \
            left alone and listed as foreign. The record is kept as each thumbnail is written: \
            after a crash or kill, the next run finishes or undoes what was under way.

            Prints what it did (inserted, changed, removed, unchanged, skipped, failed by \
            code, foreign), or one JSON object per file as it happens and a summary with \
            --json. Skipped files are not failures; the exit code is 1 if any file failed.

            With --watch it goes on after the first pass: file-system notifications (inotify) \
            name the files inserted, changed, renamed or removed, and only those are processed, a \
            summary per pass; a full pass runs again when the notifications cannot tell what \
            changed. Ctrl-C stops it.

            Example: enlarger sync photos --out thumbs --width 320 --height 320 --accept image/webp,image/jpeg
            """
    )

    @Argument(help: "The directory of images to mirror.")
    var source: String

    @Option(help: "The directory of thumbnails (created if missing).")
    var out: String

    @OptionGroup var image: ImageOptions

    @Flag(help: "Print one JSON object per file processed, then a summary.")
    var json = false

    @Flag(help: ArgumentHelp("Keep watching SRC after the first pass and mirror each change as it happens (until Ctrl-C). "
              + "File-system notifications name what changed; only those files are processed. When they cannot tell "
              + "(the notification queue overflowed, a watch was lost), a full pass reconciles everything."))
    var watch = false

    @Option(help: "Requests outstanding at once.")
    var inFlight = 16

    @Option(help: "Skip (and report) source files larger than this many bytes.")
    var maxBytes = DecodeLimits().maxInputBytes

    @Flag(help: ArgumentHelp("Replace files already at a thumbnail's name that no record names (after the record was lost); "
              + "without it, such files are never overwritten: their sources fail with OUTPUT_EXISTS. Also makes an OUT "
              + "that mirrors another directory this SRC's mirror (without it, that is refused)."))
    var adopt = false

    @Option(help: "The broker lane of its requests: bulk (the default) or interactive. Bulk requests wait behind interactive ones and never take the capacity kept for them, so a backfill does not hold up someone waiting for one image.")
    var priority: Priority = .bulk

    @OptionGroup var service: ServiceOptions

    func validate() throws {
        guard image.variantList.isEmpty else { throw ValidationError("sync makes one thumbnail per file: --variant is for resize") }
        guard inFlight > 0 else { throw ValidationError("--in-flight must be positive") }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ValidationError("'\(source)' is not a directory")
        }
    }

    func run() async throws {
        let syncer: Syncer
        do {
            syncer = try Syncer(source: source, out: out, options: image.resizeOptions, json: json, inFlight: inFlight,
                                maxBytes: maxBytes, adopt: adopt, priority: priority)
        } catch let error as MirrorError {
            throw CLIError(error.message)
        }
        let configuration = try service.clientConfiguration()
        let failed = try await withEnlargerClient(brokerEndpoint: service.clientEndpoint, configuration: configuration) {
            client in
            var failed = await syncer.fullPass(client: client)
            if watch { failed += try await SyncWatcher(syncer: syncer).run(client: client) }
            return failed
        }
        if failed > 0 { throw ExitCode(1) }
    }
}
