import Foundation
import Locking
import Logging
import Telemetry

/// Writes each message to standard error as one line, readable text or a JSON object
/// (`LogFormat.line`).
///
/// Cheap enough for a line per request at tens of thousands of requests a second: the
/// timestamp is UTC (no time-zone file is consulted per line), its date and time are
/// formatted once a second, and the line goes out in one `write` (the broker's per-request
/// lines, one `write` per pass of its loop: `LogTimestamp.keep`).
struct LineLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    let format: LogFormat
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, logLevel: Logger.Level, format: LogFormat) {
        self.label = label
        self.logLevel = logLevel
        self.format = format
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let provided = metadataProvider?.get() ?? [:]
        let fields: Logger.Metadata
        if metadata.isEmpty && provided.isEmpty {
            // The usual case (a per-request line): the message's own fields, not copied.
            fields = event.metadata ?? [:]
        } else {
            var merged = metadata
            merged.merge(provided) { $1 }
            if let extra = event.metadata { merged.merge(extra) { $1 } }
            fields = merged
        }
        LogTimestamp.write(format.line(event, label: label, fields: fields))
    }
}

/// UTC timestamps for log lines, and whole-line writes to standard error.
enum LogTimestamp {
    private struct Cache {
        var second = -1
        /// `YYYY-MM-DDTHH:MM:SS` of `second`.
        var prefix: [UInt8] = []
    }

    private static let cache = Lock(Cache())

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the date and time formatted once per second.
    static func now() -> String {
        var line = TextLogLine(capacity: 24)
        appendNow(to: &line)
        return String(decoding: line.bytes, as: UTF8.self)
    }

    /// Appends `now()` to `line`.
    static func appendNow(to line: inout TextLogLine) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let second = Int(now.tv_sec)
        cache.withLock { cache in
            if cache.second != second {
                var seconds = now.tv_sec
                var parts = tm()
                gmtime_r(&seconds, &parts)
                var prefix = TextLogLine(capacity: 19)
                prefix.append(digits: Int(parts.tm_year) + 1900, width: 4)
                for (separator, value) in [("-", parts.tm_mon + 1), ("-", parts.tm_mday), ("T", parts.tm_hour),
                                           (":", parts.tm_min), (":", parts.tm_sec)] {
                    prefix.append(separator)
                    prefix.append(digits: Int(value), width: 2)
                }
                cache.second = second
                cache.prefix = prefix.bytes
            }
            line.append(bytes: cache.prefix)
        }
        line.append(".")
        line.append(digits: Int(now.tv_nsec / 1_000_000), width: 3)
        line.append("Z")
    }

    /// `time level label: message`, the start of every text line; the fields follow.
    static func textLine(level: Logger.Level, label: String, message: String, capacity: Int) -> TextLogLine {
        var line = TextLogLine(capacity: capacity)
        appendNow(to: &line)
        line.append(" ")
        line.append(level.rawValue)
        line.append(" ")
        line.append(label)
        line.append(": ")
        line.append(message)
        return line
    }

    /// Lines `keep` holds for the next `write` or `flush`.
    private static let kept = Lock([UInt8]())
    private static let keptLimit = 64 << 10

    /// Writes `line` to standard error in one call (retrying a short write), so lines from
    /// several threads never interleave; what `keep` holds goes first.
    static func write(_ line: [UInt8]) {
        kept.withLock { kept in
            if !kept.isEmpty {
                writeAll(kept)
                kept.removeAll(keepingCapacity: true)
            }
            writeAll(line)
        }
    }

    /// Holds `line` for the next `flush` (or `write`), writing at once past 64 KiB: for a
    /// loop that logs a line per message and flushes once per pass.
    static func keep(_ line: [UInt8]) {
        kept.withLock { kept in
            kept.append(contentsOf: line)
            if kept.count >= keptLimit {
                writeAll(kept)
                kept.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Writes what `keep` holds.
    static func flush() {
        kept.withLock { kept in
            guard !kept.isEmpty else { return }
            writeAll(kept)
            kept.removeAll(keepingCapacity: true)
        }
    }

    private static func writeAll(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(2, bytes.baseAddress! + offset, bytes.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }
}
