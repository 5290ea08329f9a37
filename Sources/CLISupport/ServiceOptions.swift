import ArgumentParser
import Enlarger
import Foundation

/// Where client commands find the broker: `--broker ENDPOINT`, or the sockets of a
/// `serve` runtime directory (by default the one `serve` uses by default).
public struct ServiceOptions: ParsableArguments, Sendable {
    @Option(help: "The broker's client endpoint, e.g. tcp://host:5570 or ipc:///path/clients.sock. Env: ENLARGER_BROKER.")
    var broker: String?

    @Option(help: "The runtime directory of `enlarger serve` whose sockets to use (default: \(RuntimeDirectory.defaultPath)).")
    var runtimeDir: String?

    @OptionGroup public var auth: PeerAuthOptions

    public init() {}

    public func validate() throws {
        if broker != nil && runtimeDir != nil { throw ValidationError("give --broker or --runtime-dir, not both") }
        if let broker { try Endpoint.validate(broker, option: "--broker") }
    }

    /// `--broker`, else `--runtime-dir`'s socket, else `$ENLARGER_BROKER`, else the default
    /// runtime directory's socket.
    public var clientEndpoint: String {
        if let broker { return broker }
        if let runtimeDir { return RuntimeDirectory(path: runtimeDir).clientsEndpoint }
        if let fromEnvironment = ProcessInfo.processInfo.environment["ENLARGER_BROKER"], !fromEnvironment.isEmpty {
            return fromEnvironment
        }
        return RuntimeDirectory(path: RuntimeDirectory.defaultPath).clientsEndpoint
    }

    /// The client settings for `clientEndpoint`, with its credentials. Fails at once for an
    /// endpoint without a scheme, or an ipc socket that does not exist.
    public func clientConfiguration() throws -> EnlargerClient.Configuration {
        let endpoint = clientEndpoint
        if let problem = Endpoint.problem(endpoint, option: broker == nil ? "ENLARGER_BROKER" : "--broker") {
            throw CLIError(problem)
        }
        // A runtime directory's socket is trusted only in a directory that is this user's own
        // and private: in a shared /tmp, someone else could have made /tmp/enlarger-UID first
        // and put a broker of theirs behind it. An endpoint named outright is the user's choice.
        if broker == nil, runtimeDir != nil || ProcessInfo.processInfo.environment["ENLARGER_BROKER"].map(\.isEmpty) ?? true {
            try RuntimeDirectory(path: runtimeDir ?? RuntimeDirectory.defaultPath).checkPrivate()
        }
        if let missing = Endpoint.missingSocket(endpoint) { throw CLIError(missing) }
        var configuration = EnlargerClient.Configuration()
        configuration.curve = try auth.credentials(for: endpoint)
        configuration.allowInsecureTCP = try auth.allowsInsecureTCP()
        return configuration
    }
}

/// The private directory holding a `serve` instance's ipc sockets and lock.
public struct RuntimeDirectory: Sendable {
    public var path: String

    public init(path: String) {
        self.path = path
    }

    /// `$ENLARGER_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/enlarger`, else `/tmp/enlarger-UID`.
    public static var defaultPath: String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["ENLARGER_RUNTIME_DIR"], !explicit.isEmpty { return explicit }
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty { return xdg + "/enlarger" }
        return "/tmp/enlarger-\(getuid())"
    }

    public var clientsSocket: String { path + "/clients.sock" }
    public var workersSocket: String { path + "/workers.sock" }
    public var clientsEndpoint: String { "ipc://" + clientsSocket }
    public var workersEndpoint: String { "ipc://" + workersSocket }

    /// Creates the directory with mode 0700 (an ipc socket takes its mode from the umask, so
    /// privacy comes from the directory), refusing one owned by someone else.
    public func prepare() throws {
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

    /// For a client about to use the directory's sockets: it must be a directory (not a
    /// symbolic link) owned by this user with mode 0700. A directory that does not exist is
    /// left to the missing-socket message.
    public func checkPrivate() throws {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { return }
            throw CLIError("cannot use runtime directory \(path): \(String(cString: strerror(errno)))")
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw CLIError("runtime directory \(path) is not a directory (a symbolic link is not followed); refusing to use it")
        }
        guard info.st_uid == getuid() else {
            throw CLIError("runtime directory \(path) belongs to user \(info.st_uid), not to you (\(getuid())); refusing to use it")
        }
        let mode = info.st_mode & 0o777
        guard mode == 0o700 else {
            throw CLIError("runtime directory \(path) has mode \(String(mode, radix: 8)), not 700: others could replace its sockets; "
                           + "refusing to use it (chmod 700 it if it is yours)")
        }
    }

    /// Holds an exclusive lock for this directory while the returned descriptor is open, so
    /// a second `serve` cannot silently steal the first one's ipc sockets.
    public func lock() throws -> Int32 {
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
public struct CLIError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
