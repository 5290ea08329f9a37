import ArgumentParser
import Enlarger
import Foundation

/// Where client commands find the broker: `--broker ENDPOINT`, or the sockets of a
/// `serve` runtime directory (by default the one `serve` uses by default).
struct ServiceOptions: ParsableArguments {
    @Option(help: "The broker's client endpoint, e.g. tcp://host:5570 or ipc:///path/clients.sock.")
    var broker: String?

    @Option(help: "The runtime directory of `enlarger serve` whose sockets to use (default: \(RuntimeDirectory.defaultPath)).")
    var runtimeDir: String?

    @OptionGroup var auth: PeerAuthOptions

    func validate() throws {
        if broker != nil && runtimeDir != nil { throw ValidationError("give --broker or --runtime-dir, not both") }
    }

    var clientEndpoint: String {
        broker ?? RuntimeDirectory(path: runtimeDir ?? RuntimeDirectory.defaultPath).clientsEndpoint
    }

    /// The client settings for `clientEndpoint`, with its credentials.
    func clientConfiguration() throws -> EnlargerClient.Configuration {
        var configuration = EnlargerClient.Configuration()
        configuration.curve = try auth.credentials(for: clientEndpoint)
        return configuration
    }
}

/// The private directory holding a `serve` instance's ipc sockets and lock.
struct RuntimeDirectory {
    var path: String

    /// `$ENLARGER_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/enlarger`, else `/tmp/enlarger-UID`.
    static var defaultPath: String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["ENLARGER_RUNTIME_DIR"], !explicit.isEmpty { return explicit }
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty { return xdg + "/enlarger" }
        return "/tmp/enlarger-\(getuid())"
    }

    var clientsSocket: String { path + "/clients.sock" }
    var workersSocket: String { path + "/workers.sock" }
    var clientsEndpoint: String { "ipc://" + clientsSocket }
    var workersEndpoint: String { "ipc://" + workersSocket }

    /// Creates the directory with mode 0700 (an ipc socket takes its mode from the umask, so
    /// privacy comes from the directory), refusing one owned by someone else.
    func prepare() throws {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw CLIError("cannot create runtime directory \(path): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw CLIError("runtime directory \(path) is not a directory")
        }
        guard info.st_uid == getuid() else {
            throw CLIError("runtime directory \(path) belongs to another user")
        }
        if info.st_mode & 0o777 != 0o700 { chmod(path, 0o700) }
    }

    /// Holds an exclusive lock for this directory while the returned descriptor is open, so
    /// a second `serve` cannot silently steal the first one's ipc sockets.
    func lock() throws -> Int32 {
        let fd = open(path + "/serve.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CLIError("cannot open \(path)/serve.lock: \(String(cString: strerror(errno)))") }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            throw CLIError("another `enlarger serve` is running with runtime directory \(path)")
        }
        return fd
    }
}

/// A failure of a command at run time: printed as `Error: message` without the usage text
/// (ArgumentParser's `ValidationError` is for bad arguments).
struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs `handler` on SIGINT and SIGTERM (on a dispatch queue, not in signal context).
func onTerminationSignals(_ handler: @escaping @Sendable (Int32) -> Void) -> [any DispatchSourceSignal] {
    [SIGINT, SIGTERM].map { number in
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { handler(number) }
        source.resume()
        return source
    }
}
