import ArgumentParser
import Foundation
import Locking
import Logging

extension Logger.Level: @retroactive ExpressibleByArgument {}

enum LogFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json
}

/// `--log-level` and `--log-format` of the long-running commands (broker, worker, serve).
struct LogOptions: ParsableArguments {
    @Option(help: "Least severe messages logged: trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .info

    @Option(help: ArgumentHelp(
        "text (readable lines), or json: one JSON object per line (ts, level, label, message, then "
            + "the message's fields, such as request_id, stage, code and duration_ms)."))
    var logFormat: LogFormat = .text

    /// Installs the process's log handler; call once, before the first logger is made.
    func bootstrap() {
        let level = logLevel
        switch logFormat {
        case .text:
            LoggingSystem.bootstrap { label in TextLogHandler(label: label, logLevel: level) }
        case .json:
            LoggingSystem.bootstrap { label in JSONLogHandler(label: label, logLevel: level) }
        }
    }

    /// The same settings for a child `enlarger` process.
    var arguments: [String] { ["--log-level", logLevel.rawValue, "--log-format", logFormat.rawValue] }
}

/// Writes each message to standard error as one JSON object on one line.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, logLevel: Logger.Level) {
        self.label = label
        self.logLevel = logLevel
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields = metadata
        if let provided = metadataProvider?.get() { fields.merge(provided) { $1 } }
        if let extra = event.metadata { fields.merge(extra) { $1 } }
        var line = JSONLine()
        line.add("ts", LogTimestamp.now())
        line.add("level", event.level.rawValue)
        line.add("label", label)
        line.add("message", "\(event.message)")
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            let name = key.replacingOccurrences(of: "-", with: "_")
            // Numbers stay numbers (a duration, a byte count), everything else is a string.
            switch value {
            case .stringConvertible(let number as Double): line.add(name, number)
            case .stringConvertible(let number as any BinaryInteger): line.add(name, Int(clamping: number))
            default: line.add(name, "\(value)")
            }
        }
        LogTimestamp.write(line.text + "\n")
    }
}
