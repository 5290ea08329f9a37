import CLISupport
import Foundation

/// An `enlarger broker` child process for a benchmark, which reads its CPU time and RSS from
/// /proc. Started by `init`; `stop()` sends SIGTERM and waits for it.
final class BrokerProcess {
    private let process = Process()

    var pid: pid_t { process.processIdentifier }

    /// - Parameter enlarger: the `enlarger` executable (`--enlarger`); nil looks beside this
    ///   executable (both are products of the same package build).
    init(enlarger: String?, arguments: [String]) throws {
        let executable = enlarger.map { URL(fileURLWithPath: $0) } ?? URL(fileURLWithPath: "/proc/self/exe")
            .resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("enlarger")
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw CLIError("no enlarger executable at \(executable.path): build it (scripts/build) or give --enlarger")
        }
        process.executableURL = executable
        process.arguments = ["broker"] + arguments
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}
