import ArgumentParser
import Foundation
import ZeroMQ

/// How a client or worker authenticates to the broker (CURVE). Each flag can also come from
/// the environment; a flag wins.
public struct PeerAuthOptions: ParsableArguments, Sendable {
    public init() {}

    @Option(help: ArgumentHelp(
        "The broker's public key file (its NAME.pub from `enlarger keygen`). Env: ENLARGER_SERVER_PUBLIC_KEY.",
        valueName: "file"))
    var serverPublicKey: String?

    @Option(help: ArgumentHelp(
        "This peer's key file (NAME.key from `enlarger keygen`, mode 0600). Env: ENLARGER_KEY.", valueName: "file"))
    var key: String?

    @Flag(help: "Connect to a tcp:// broker without authentication (closed test networks only). Env: ENLARGER_INSECURE_TCP=1 (or true).")
    var insecureTcp = false

    /// `--insecure-tcp`, else `ENLARGER_INSECURE_TCP` (`1` or `true`; `0` or `false`), read as
    /// the services read it.
    public func allowsInsecureTCP() throws -> Bool {
        if insecureTcp { return true }
        return try EnvironmentOptions.flag(
            "ENLARGER_INSECURE_TCP", ProcessInfo.processInfo.environment["ENLARGER_INSECURE_TCP"], for: "--insecure-tcp")
    }

    /// The credentials to use toward `endpoint`, `nil` for none. Fails closed: a tcp
    /// endpoint without keys is refused unless insecure tcp is asked for.
    public func credentials(for endpoint: String) throws -> CurveClientCredentials? {
        let environment = ProcessInfo.processInfo.environment
        let serverKeyFile = serverPublicKey ?? environment["ENLARGER_SERVER_PUBLIC_KEY"].nonEmpty
        let keyFile = key ?? environment["ENLARGER_KEY"].nonEmpty
        switch (serverKeyFile, keyFile) {
        case let (serverKeyFile?, keyFile?):
            do {
                return try CurveClientCredentials(keyFile: keyFile, serverPublicKeyFile: serverKeyFile)
            } catch {
                throw CLIError("\(error)")
            }
        case (nil, nil):
            if endpoint.hasPrefix("tcp://"), try !allowsInsecureTCP() {
                throw CLIError(
                    "refusing to connect to \(endpoint) without authentication: give --server-public-key and --key "
                        + "(or ENLARGER_SERVER_PUBLIC_KEY and ENLARGER_KEY; make keys with `enlarger keygen`), "
                        + "or --insecure-tcp (ENLARGER_INSECURE_TCP=1) on a closed network")
            }
            return nil
        default:
            throw CLIError("--server-public-key and --key go together")
        }
    }
}

extension Optional where Wrapped == String {
    /// `nil` for an unset or empty environment variable.
    public var nonEmpty: String? {
        guard let value = self, !value.isEmpty else { return nil }
        return value
    }
}
