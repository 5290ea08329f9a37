import ArgumentParser
import Foundation

/// Checks on ZeroMQ endpoints given on the command line, so that a typo is reported before
/// anything connects, in words rather than as a libzmq error.
public enum Endpoint {
    /// Why `endpoint` is not a ZeroMQ address, with a guess at what was meant; `nil` if it has
    /// a scheme (libzmq judges the rest).
    public static func problem(_ endpoint: String, option: String) -> String? {
        if endpoint.contains("://") { return nil }
        let guess: String
        if endpoint.hasPrefix("/") || endpoint.hasPrefix(".") || endpoint.hasSuffix(".sock") {
            guess = "ipc://" + endpoint
        } else if let colon = endpoint.lastIndex(of: ":"), !endpoint[endpoint.index(after: colon)...].isEmpty,
                  endpoint[endpoint.index(after: colon)...].allSatisfy(\.isNumber) || endpoint.hasSuffix(":*")
        {
            guess = "tcp://" + endpoint
        } else {
            return "\(option) '\(endpoint)' has no scheme: give tcp://HOST:PORT or ipc:///PATH"
        }
        return "\(option) '\(endpoint)' has no scheme: did you mean \(guess)?"
    }

    /// Throws a `ValidationError` for an endpoint without a scheme.
    public static func validate(_ endpoint: String, option: String) throws {
        if let problem = problem(endpoint, option: option) { throw ValidationError(problem) }
    }

    /// For an ipc:// endpoint whose socket file does not exist, why nobody can answer there.
    public static func missingSocket(_ endpoint: String) -> String? {
        guard endpoint.hasPrefix("ipc://") else { return nil }
        let path = String(endpoint.dropFirst("ipc://".count))
        guard !path.hasPrefix("@"), access(path, F_OK) != 0 else { return nil }
        return "no broker at \(endpoint): \(path) does not exist (is `enlarger serve` running?)"
    }
}
