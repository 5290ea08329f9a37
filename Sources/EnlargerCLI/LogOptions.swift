import ArgumentParser
import EnlargerBroker
import Foundation
import Locking
import Logging
import Telemetry

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
            LoggingSystem.bootstrap { label in LineLogHandler(label: label, logLevel: level, format: .text) }
        case .json:
            LoggingSystem.bootstrap { label in LineLogHandler(label: label, logLevel: level, format: .json) }
        }
    }

    /// The broker's per-request line written straight from its fields, already in order: the
    /// line `LineLogHandler` writes for it, without a dictionary built and sorted per request.
    /// Lines are kept until the broker's loop has finished its pass (`flushRequestLog`), so
    /// that a burst of requests costs one `write`, not one each.
    func requestLog(label: String) -> @Sendable (RequestEnd) -> Void {
        let format = logFormat
        switch format {
        case .text:
            return { end in
                var line = LogTimestamp.textLine(level: .info, label: label, message: "request ended", capacity: 256)
                end.appendFields(to: &line)
                line.end()
                LogTimestamp.keep(line.bytes)
            }
        case .json:
            return { end in
                LogTimestamp.keep(format.line(level: .info, label: label, message: "request ended", sortedFields: end.logFields))
            }
        }
    }

    /// Writes what `requestLog` kept.
    var flushRequestLog: @Sendable () -> Void { { LogTimestamp.flush() } }

    /// The same settings for a child `enlarger` process.
    var arguments: [String] { ["--log-level", logLevel.rawValue, "--log-format", logFormat.rawValue] }
}

extension LogFormat {
    /// One line for a message: the time, level, label, message, then the fields sorted by name.
    func line(_ event: LogEvent, label: String, fields: Logger.Metadata) -> [UInt8] {
        line(level: event.level, label: label, message: "\(event.message)",
             sortedFields: fields.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) })
    }

    /// One line for fields already sorted by name, ending in a newline.
    func line(level: Logger.Level, label: String, message: String,
              sortedFields sorted: [(key: String, value: Logger.MetadataValue)]) -> [UInt8] {
        switch self {
        case .text:
            // `2026-11-27T08:28:43.123Z info enlarger.broker: request ended code=OK duration_ms=4.1 …`
            // Values are quoted where they need it (see `TextLogLine`).
            var line = LogTimestamp.textLine(level: level, label: label, message: message,
                                             capacity: 64 + label.utf8.count + message.utf8.count + 32 * sorted.count)
            for (key, value) in sorted { line.append(key: key, value) }
            line.end()
            return line.bytes
        case .json:
            var line = JSONLine()
            line.add("ts", LogTimestamp.now())
            line.add("level", level.rawValue)
            line.add("label", label)
            line.add("message", message)
            for (key, value) in sorted {
                let name = key.replacingOccurrences(of: "-", with: "_")
                // Numbers stay numbers (a duration, a byte count), everything else is a string.
                switch value {
                case .stringConvertible(let number as Double): line.add(name, number)
                case .stringConvertible(let number as any BinaryInteger): line.add(name, Int(clamping: number))
                default: line.add(name, "\(value)")
                }
            }
            return Array((line.text + "\n").utf8)
        }
    }
}
