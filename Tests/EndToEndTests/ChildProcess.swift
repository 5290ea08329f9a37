import Foundation

/// A child process run to its end: what the CLI and README tests start.
enum ChildProcess {
    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `executable` with `arguments` in `environment` (and `directory`), feeding it
    /// `stdin` (none: /dev/null), and returns its exit status and both outputs.
    static func run(_ executable: URL, _ arguments: [String], environment: [String: String], directory: URL? = nil,
                    stdin: Data? = nil) throws -> Output {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = environment
        if let directory { process.currentDirectoryURL = directory }
        let stdout = Pipe(), stderr = Pipe(), input = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = stdin == nil ? FileHandle.nullDevice : input
        try process.run()
        if let stdin {
            input.fileHandleForWriting.write(stdin)
            try input.fileHandleForWriting.close()
        }
        // Both pipes at once, so that neither fills and blocks the child.
        let errors = ErrorBytes()
        let done = DispatchSemaphore(value: 0)
        Thread {
            errors.data = stderr.fileHandleForReading.readDataToEndOfFile()
            done.signal()
        }.start()
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        done.wait()
        process.waitUntilExit()
        return Output(status: process.terminationStatus, stdout: String(decoding: out, as: UTF8.self),
                      stderr: String(decoding: errors.data, as: UTF8.self))
    }
}

/// Written by the reading thread before the semaphore, read after it.
private final class ErrorBytes: @unchecked Sendable {
    var data = Data()
}
