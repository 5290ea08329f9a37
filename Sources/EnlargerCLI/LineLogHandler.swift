import Foundation
import Locking
import Logging

/// Writes each message to standard error as one line, readable text or a JSON object
/// (`LogFormat.line`).
///
/// Cheap enough for a line per request at tens of thousands of requests a second: the
/// timestamp is UTC (no time-zone file is consulted per line), its date and time are
/// formatted once a second, and the line goes out in one `write`.
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
        var prefix = ""
    }

    private static let cache = Lock(Cache())
    // Whole lines from concurrent threads.
    private static let output = Lock(())

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the date and time formatted once per second.
    static func now() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let second = Int(now.tv_sec)
        let prefix = cache.withLock { cache in
            if cache.second != second {
                var seconds = now.tv_sec
                var parts = tm()
                gmtime_r(&seconds, &parts)
                cache.second = second
                cache.prefix = pad(Int(parts.tm_year) + 1900, 4) + "-" + pad(Int(parts.tm_mon) + 1, 2) + "-"
                    + pad(Int(parts.tm_mday), 2) + "T" + pad(Int(parts.tm_hour), 2) + ":" + pad(Int(parts.tm_min), 2)
                    + ":" + pad(Int(parts.tm_sec), 2)
            }
            return cache.prefix
        }
        return prefix + "." + pad(now.tv_nsec / 1_000_000, 3) + "Z"
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    /// Writes `line` to standard error in one call (retrying a short write), so lines from
    /// several threads never interleave.
    static func write(_ line: String) {
        var line = line
        output.withLock { _ in
            line.withUTF8 { bytes in
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
}
