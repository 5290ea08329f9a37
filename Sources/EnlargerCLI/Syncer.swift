import Enlarger
import Foundation
import ImageModel
import Imaging

/// One mirror of a source tree (see `SyncCommand`): its manifest, and the passes that bring
/// OUT in step with SRC, whole (`fullPass`) or for named paths only (`pass(paths:)`). Used
/// by one task at a time.
final class Syncer {
    let source: String
    let root: String
    let out: String
    let options: ResizeOptions
    let json: Bool
    let inFlight: Int
    let maxBytes: Int
    private var manifest: SyncManifest
    private let manifestPath: String

    init(source: String, out: String, options: ResizeOptions, json: Bool, inFlight: Int, maxBytes: Int) throws {
        self.source = source
        root = URL(fileURLWithPath: source).standardizedFileURL.path
        self.out = out
        self.options = options
        self.json = json
        self.inFlight = inFlight
        self.maxBytes = maxBytes
        manifestPath = (out as NSString).appendingPathComponent(SyncManifest.fileName)
        manifest = SyncManifest.load(manifestPath)
        let spec = SyncManifest.specKey(options)
        if manifest.spec != spec {
            // Other options: every thumbnail is made again (the old ones are replaced or removed).
            manifest.spec = spec
            for key in manifest.entries.keys { manifest.entries[key]?.version = nil }
        }
    }

    /// Scans the whole tree and reconciles everything. Returns the number of failures.
    func fullPass(client: EnlargerClient) async -> Int {
        do {
            let tree = try SyncTree.scan(source, excluding: out)
            let gone = manifest.entries.keys.filter { tree.files[$0] == nil }
            return await run(SyncPlan(files: tree.files, removed: gone, manifest: manifest, out: out), pass: "full",
                             client: client)
        } catch {
            var report = SyncReport(json: json)
            report.fail(source, code: "unreadable", message: "\(error)")
            report.finish(source: source, out: out, pass: "full", elapsed: .zero)
            return 1
        }
    }

    /// Only `paths` (relative to SRC; files, or directories whose whole subtree counts), as
    /// they are now: present ones inserted or changed, missing ones removed.
    func pass(paths: Set<String>, client: EnlargerClient) async -> Int {
        var files: [String: SyncManifest.Version] = [:]
        var gone = Set<String>()
        for path in paths {
            var info = stat()
            let full = (root as NSString).appendingPathComponent(path)
            if lstat(full, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG {
                files[path] = SyncManifest.Version(info)
            } else if lstat(full, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR {
                if let below = try? SyncTree.scan(source, excluding: out, below: path) {
                    files.merge(below.files) { a, _ in a }
                }
            } else {
                // Gone (or no longer a file): it, and everything that was below it.
                gone.insert(path)
                gone.formUnion(manifest.entries.keys.filter { $0.hasPrefix(path + "/") })
            }
        }
        return await run(SyncPlan(files: files, removed: Array(gone), manifest: manifest, out: out), pass: "incremental",
                         client: client)
    }

    private func run(_ plan: SyncPlan, pass: String, client: EnlargerClient) async -> Int {
        var report = SyncReport(json: json)
        report.unchanged = plan.unchanged.count
        // Removed first: their names may be reused by inserted files with another extension.
        for path in plan.removed {
            if let output = manifest.entries[path]?.output { unlink((out as NSString).appendingPathComponent(output)) }
            manifest.entries[path] = nil
            report.record(path, "removed")
        }
        let start = ContinuousClock.now
        let work = plan.inserted.map { ($0, "inserted") } + plan.changed.map { ($0, "changed") }
        let outcomes = work.isEmpty ? [] : await SyncCommand.process(work, root: root, client: client, options: options,
                                                                      out: out, maxBytes: maxBytes, inFlight: inFlight)
        for outcome in outcomes {
            switch outcome.result {
            case .written(let output):
                let old = manifest.entries[outcome.path]?.output
                if let old, old != output { unlink((out as NSString).appendingPathComponent(old)) }
                // The version seen before sending: a file changed meanwhile is made again next pass.
                manifest.entries[outcome.path] = SyncManifest.Entry(version: plan.files[outcome.path], output: output)
                report.record(outcome.path, outcome.action, output: output)
            case .skipped(let why):
                report.skip(outcome.path, why)
            case .failed(let code, let message):
                report.fail(outcome.path, code: code, message: message)
            }
        }
        do {
            try manifest.save(manifestPath)
        } catch {
            report.fail(manifestPath, code: "writeFailed", message: "\(error)")
        }
        report.finish(source: source, out: out, pass: pass, elapsed: ContinuousClock.now - start)
        return report.failed
    }
}
