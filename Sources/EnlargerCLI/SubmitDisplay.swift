import CLISupport
import Foundation
import Locking

/// How one submitted input ended.
enum SubmitOutcome: Sendable {
    /// Its final result (or, for `--delivery degraded`, its degraded one) was written.
    case done(queued: Duration, processing: Duration)
    case failed(code: String)
    case cancelled
    /// No broker answered: reported once for the whole run, not per input.
    case unreachable
    /// Never sent: the run stopped first (Ctrl-C, or an unreachable broker).
    case notSent
}

/// What `submit` prints as it goes: result lines on standard output, problems on standard
/// error, and, on a terminal, a progress bar on the last line of standard error.
///
/// Every write goes through one lock, and the bar is erased before and drawn again after
/// each line, so no line is ever printed after a partial bar.
final class SubmitDisplay: Sendable {
    private struct State {
        var done = 0
        var failed = 0
        var cancelled = 0
        var finished = 0
        var barShown = false
    }

    let total: Int
    let showsProgress: Bool
    private let start = ContinuousClock.now
    private let state = Lock(State())

    init(total: Int, showsProgress: Bool) {
        self.total = total
        self.showsProgress = showsProgress
    }

    /// A result line, on standard output.
    func line(_ text: String) { write(text, to: STDOUT_FILENO) }

    /// A problem, on standard error.
    func error(_ text: String) { write(text, to: STDERR_FILENO) }

    func finished(_ outcome: SubmitOutcome) {
        state.withLock { state in
            state.finished += 1
            switch outcome {
            case .done: state.done += 1
            case .failed, .unreachable: state.failed += 1
            case .cancelled, .notSent: state.cancelled += 1
            }
            if showsProgress { Self.put(Self.erase + bar(state), to: STDERR_FILENO) }
            if showsProgress { state.barShown = true }
        }
    }

    /// Erases the bar for good (before the summary).
    func endProgress() {
        state.withLock { state in
            if state.barShown { Self.put(Self.erase, to: STDERR_FILENO) }
            state.barShown = false
        }
    }

    private func write(_ text: String, to fd: Int32) {
        state.withLock { state in
            if state.barShown { Self.put(Self.erase, to: STDERR_FILENO) }
            Self.put(text + "\n", to: fd)
            if state.barShown { Self.put(bar(state), to: STDERR_FILENO) }
        }
    }

    private static let erase = "\r\u{1B}[K"

    /// `[=====>     ] 12/40  1 failed  0 cancelled  3.4/s`, cut to the terminal's width so
    /// that it never wraps (a wrapped bar could not be erased with `\r`).
    private func bar(_ state: State) -> String {
        let elapsed = ContinuousClock.now - start
        let rate = Double(state.done) / max(milliseconds(elapsed) / 1000, 0.001)
        let counts = " \(state.finished)/\(total)  \(state.failed) failed  \(state.cancelled) cancelled  "
            + String(format: "%.1f/s", rate)
        let columns = Self.terminalColumns()
        let width = max(0, min(40, columns - 1 - counts.count - 2))
        let filled = total == 0 ? width : width * state.finished / total
        let text = width >= 10
            ? "[" + String(repeating: "=", count: filled) + String(repeating: " ", count: width - filled) + "]" + counts
            : counts
        return String(text.prefix(max(0, columns - 1)))
    }

    private static func terminalColumns() -> Int {
        var size = winsize()
        if ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return 80
    }

    private static func put(_ text: String, to fd: Int32) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return
            }
            bytes = bytes.dropFirst(n)
        }
    }
}

/// The counts `submit` ends with.
struct SubmitSummary {
    var done = 0
    var failedByCode: [String: Int] = [:]
    var cancelled = 0
    var notSent = 0
    var unreachable = 0
    var queued: Duration = .zero
    var processing: Duration = .zero

    mutating func add(_ outcome: SubmitOutcome) {
        switch outcome {
        case .done(let queued, let processing):
            done += 1
            self.queued += queued
            self.processing += processing
        case .failed(let code): failedByCode[code, default: 0] += 1
        case .cancelled: cancelled += 1
        case .unreachable: unreachable += 1
        case .notSent: notSent += 1
        }
    }

    var failed: Int { failedByCode.values.reduce(0, +) + unreachable }

    /// `12 done, 2 failed (CORRUPT 1, UNKNOWN_FORMAT 1), 1 cancelled in 3.4 s (3.5 images/s); ...`
    func text(wall: Duration) -> String {
        let seconds = milliseconds(wall) / 1000
        var parts = ["\(done) done"]
        var codes = failedByCode
        if unreachable > 0 { codes["BROKER_UNREACHABLE"] = unreachable }
        if failed > 0 {
            parts.append("\(failed) failed (" + codes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")")
        } else {
            parts.append("0 failed")
        }
        parts.append("\(cancelled) cancelled")
        if notSent > 0 { parts.append("\(notSent) not sent") }
        var text = parts.joined(separator: ", ")
            + String(format: " in %.1f s (%.1f images/s)", seconds, Double(done) / max(seconds, 0.001))
        if done > 0 {
            text += String(format: "; per image: %.0f ms queued, %.0f ms processing",
                           milliseconds(queued) / Double(done), milliseconds(processing) / Double(done))
        }
        return text
    }

    func json(wall: Duration) -> JSONLine {
        var line = JSONLine()
        line.add("event", "summary")
        line.add("done", done)
        line.add("failed", failed)
        var codes = JSONLine()
        for (code, count) in failedByCode.sorted(by: { $0.key < $1.key }) { codes.add(code, count) }
        if unreachable > 0 { codes.add("BROKER_UNREACHABLE", unreachable) }
        line.add("failed_by_code", object: codes)
        line.add("cancelled", cancelled)
        line.add("not_sent", notSent)
        line.add("wall_ms", milliseconds(wall))
        line.add("images_per_s", Double(done) / max(milliseconds(wall) / 1000, 0.001))
        if done > 0 {
            line.add("mean_queue_ms", milliseconds(queued) / Double(done))
            line.add("mean_processing_ms", milliseconds(processing) / Double(done))
        }
        return line
    }
}
