import ArgumentParser
import CLISupport
import Foundation

/// `--enlarger`: the `enlarger` executable a benchmark runs (its broker, or `serve`).
struct EnlargerExecutable: ParsableArguments {
    @Option(name: .customLong("enlarger"),
            help: "The `enlarger` executable to run (default: the one beside this executable, of the same build).")
    var path: String?

    /// `path`, or the `enlarger` beside this executable (both are products of one package
    /// build), checked to be executable.
    static func resolve(_ path: String?) throws -> URL {
        let executable = path.map { URL(fileURLWithPath: $0) } ?? URL(fileURLWithPath: "/proc/self/exe")
            .resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("enlarger")
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw CLIError("no enlarger executable at \(executable.path): build it (scripts/build) or give --enlarger")
        }
        return executable
    }
}

/// An `enlarger broker` child process for a benchmark, which reads its CPU time and RSS from
/// /proc. Started by `init`; `stop()` sends SIGTERM, waits for it and removes its sockets'
/// directory.
final class BrokerProcess {
    private let process = Process()
    /// The private directory of its ipc sockets, when it made one.
    private var directory: URL?
    /// Its client and worker endpoints, when it made them (`init(enlarger:name:arguments:)`).
    private(set) var clients = "", workers = ""

    var pid: pid_t { process.processIdentifier }

    /// - Parameter enlarger: the `enlarger` executable (`--enlarger`); nil looks beside this
    ///   executable (both are products of the same package build).
    init(enlarger: String?, arguments: [String]) throws {
        process.executableURL = try EnlargerExecutable.resolve(enlarger)
        process.arguments = ["broker"] + arguments
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    /// A broker on ipc sockets in a private directory named after `name`, with `arguments`
    /// besides its endpoints.
    convenience init(enlarger: String?, name: String, arguments: [String] = []) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-bench-\(name)-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let clients = "ipc://\(directory.path)/clients.sock", workers = "ipc://\(directory.path)/workers.sock"
        do {
            try self.init(enlarger: enlarger, arguments: ["--clients", clients, "--workers", workers] + arguments)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
        self.directory = directory
        self.clients = clients
        self.workers = workers
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }
}
