import ArgumentParser
import Foundation

/// Every option and flag of a command can also come from the environment: `--queue-limit`
/// from `ENLARGER_QUEUE_LIMIT`, `--insecure-tcp` from `ENLARGER_INSECURE_TCP=1` (or `true`). A flag on
/// the command line wins. The variables are turned into arguments before parsing, so an
/// environment value is checked exactly like the flag it stands for.
public struct EnvironmentOptions {
    /// One argument supplied from the environment.
    public struct Source: Equatable, Sendable {
        public var variable: String
        public var value: String
        public var flag: String
    }

    /// The rule in a sentence, for `--help` discussions and errors.
    public static let rule =
        "Every option can also be set in the environment: --queue-limit as ENLARGER_QUEUE_LIMIT=N, a flag such as "
        + "--insecure-tcp as ENLARGER_INSECURE_TCP=1 (or true); a flag on the command line wins."

    /// `ENLARGER_` and the long name in upper snake case.
    public static func variable(for longName: String) -> String {
        "ENLARGER_" + longName.uppercased().replacingOccurrences(of: "-", with: "_")
    }

    /// `arguments` (a subcommand's, without the subcommand's name) followed by the options of
    /// `command` that the arguments leave unset and the environment sets, and where each came from.
    public static func apply(
        to arguments: [String], command: any ParsableCommand.Type, environment: [String: String]
    ) throws -> (arguments: [String], sources: [Source]) {
        var given = Set<String>()
        for argument in arguments {
            if argument == "--" { break }
            if argument.hasPrefix("--") {
                given.insert(String(argument.dropFirst(2).prefix { $0 != "=" }))
            } else if argument.hasPrefix("-"), argument.count == 2 {
                given.insert(argument)
            }
        }
        var added: [String] = []
        var sources: [Source] = []
        for option in options(of: command) {
            guard !given.contains(option.longName), !option.shortNames.contains(where: given.contains) else { continue }
            let name = variable(for: option.longName)
            guard let value = environment[name], !value.isEmpty else { continue }
            let flag = "--" + option.longName
            if option.isFlag {
                guard try Self.flag(name, value, for: flag) else { continue }
                added.append(flag)
            } else {
                // `=` keeps a value that starts with '-' a value.
                added.append("\(flag)=\(value)")
            }
            sources.append(Source(variable: name, value: value, flag: flag))
        }
        // Before a `--` terminator, if any, so that they stay options.
        var result = arguments
        result.insert(contentsOf: added, at: arguments.firstIndex(of: "--") ?? arguments.endIndex)
        return (result, sources)
    }

    /// A flag's value from the environment: `1`, `true`, `yes` or `on` (any case) set it;
    /// `0`, `false`, `no`, `off` or nothing leave it off; anything else is an error naming
    /// the variable.
    public static func flag(_ variable: String, _ value: String?, for flag: String) throws -> Bool {
        switch value?.trimmingCharacters(in: .whitespaces).lowercased() ?? "" {
        case "1", "true", "yes", "on": return true
        case "", "0", "false", "no", "off": return false
        default: throw CLIError("\(variable)=\(value ?? ""): expected 1 or true (0 or false for off), as for \(flag)")
        }
    }

    /// An error message naming the environment variable behind the flag it is about, if any.
    public static func explain(_ message: String, sources: [Source]) -> String? {
        for source in sources where message.contains("'\(source.flag)") || message.contains("\(source.flag) ")
            || message.contains("\(source.flag)=") || message.hasSuffix(source.flag)
        {
            return "\(source.variable)=\(source.value): \(message)"
        }
        return nil
    }

    struct Option {
        var longName: String
        var shortNames: [String]
        var isFlag: Bool
    }

    /// The visible long-named options and flags of `command`, from ArgumentParser's own
    /// description of it (so a new option needs nothing more to be settable).
    static func options(of command: any ParsableCommand.Type) -> [Option] {
        guard let data = command._dumpHelp().data(using: .utf8),
              let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let info = root["command"] as? [String: Any],
              let arguments = info["arguments"] as? [[String: Any]]
        else { return [] }
        let builtIn: Set<String> = ["help", "version", "experimental-dump-help", "generate-completion-script"]
        return arguments.compactMap { argument in
            guard argument["shouldDisplay"] as? Bool ?? true,
                  let kind = argument["kind"] as? String, kind == "option" || kind == "flag",
                  let names = argument["names"] as? [[String: Any]]
            else { return nil }
            let longNames = names.filter { $0["kind"] as? String == "long" }.compactMap { $0["name"] as? String }
            guard let longName = longNames.first, !builtIn.contains(longName) else { return nil }
            let shortNames = names.filter { $0["kind"] as? String == "short" }.compactMap { ($0["name"] as? String).map { "-" + $0 } }
            return Option(longName: longName, shortNames: shortNames, isFlag: kind == "flag")
        }
    }
}
