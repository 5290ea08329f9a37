import ArgumentParser
import Foundation

/// Finds long options a command does not have, before ArgumentParser runs the command's
/// `validate()`: ArgumentParser reports an unknown option only after validation, so
/// `submit x.jpg --widht 10` was refused as "a target width or height is required" (the
/// misspelt flag ignored, its value taken for an input).
public enum UnknownOptions {
    /// The first `--name` (or `--name=value`) in `arguments`, before a `--` terminator, that
    /// `command` does not have, and the message for it: ArgumentParser's own wording, with
    /// the closest known name when one is near.
    public static func problem(in arguments: [String], of command: any ParsableCommand.Type) -> String? {
        let known = longNames(of: command)
        guard !known.isEmpty else { return nil }
        for argument in arguments {
            if argument == "--" { break }
            guard argument.hasPrefix("--"), argument.count > 2 else { continue }
            let name = String(argument.dropFirst(2).prefix { $0 != "=" })
            if known.contains(name) { continue }
            var message = "Unknown option '--\(name)'."
            if let guess = closest(to: name, among: known) { message += " Did you mean '--\(guess)'?" }
            return message
        }
        return nil
    }

    /// Every long name of `command`'s options and flags, hidden ones and ArgumentParser's own
    /// (`--help`, `--version`, …) included.
    static func longNames(of command: any ParsableCommand.Type) -> Set<String> {
        guard let data = command._dumpHelp().data(using: .utf8),
              let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let info = root["command"] as? [String: Any],
              let arguments = info["arguments"] as? [[String: Any]]
        else { return [] }
        var names: Set<String> = ["help", "version", "experimental-dump-help", "generate-completion-script"]
        for argument in arguments {
            for name in argument["names"] as? [[String: Any]] ?? [] where name["kind"] as? String == "long" {
                if let text = name["name"] as? String { names.insert(text) }
            }
        }
        return names
    }

    /// The name within two edits of `name` (the nearest, then the first in order), if any.
    static func closest(to name: String, among names: Set<String>) -> String? {
        let scored = names.filter { !["experimental-dump-help", "generate-completion-script"].contains($0) }
            .map { (name: $0, distance: editDistance(name, $0)) }
            .filter { $0.distance <= 2 }
        return scored.min { ($0.distance, $0.name) < ($1.distance, $1.name) }?.name
    }

    /// Levenshtein distance, with a swap of two neighbours counting as one edit.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var distances = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { distances[i][0] = i }
        for j in 0...b.count { distances[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                distances[i][j] = min(distances[i - 1][j] + 1, distances[i][j - 1] + 1, distances[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    distances[i][j] = min(distances[i][j], distances[i - 2][j - 2] + 1)
                }
            }
        }
        return distances[a.count][b.count]
    }
}
