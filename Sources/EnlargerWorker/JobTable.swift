import EnlargerProtocol
import Imaging

/// The I/O thread's record of the jobs it has taken from the broker, and the one place the
/// worker decides what may still be sent about a job.
///
/// Two rules live here. **Nothing after cancel:** once a `CancelJob` has reached the I/O
/// thread, every result the job thread posts afterwards is dropped, and the job ends with
/// `JobCancelled` when its thread returns. **Exactly one terminal frame per job:** a terminal
/// `JobResult`, a `JobFailed` or a `JobCancelled`, whichever comes first; a `CancelJob` that
/// arrives after the terminal result was sent is ignored.
///
/// Jobs are keyed by a local token rather than by `(job_id, attempt)`, so a job abandoned on
/// a lost connection can never be confused with a job of the same ids from a restarted broker.
struct JobTable {
    struct Key: Hashable, CustomStringConvertible {
        var jobID: UInt64
        var attempt: UInt32

        var description: String { "job \(jobID) attempt \(attempt)" }
    }

    typealias Token = UInt64

    /// What to tell the broker once a job thread has returned.
    enum Ending: Equatable {
        case cancelled(Key)
        case failed(Key, Enlarger_V1_ErrorCode, String)
    }

    /// How a job thread's run of the pipeline ended.
    enum Outcome: Sendable {
        /// The pipeline returned after emitting its terminal result.
        case completed
        case failed(ImagingError)
    }

    private enum Phase {
        case running
        /// `CancelJob` arrived; nothing more is sent until `JobCancelled`.
        case cancelling
        /// The terminal result went out; the job thread is finishing.
        case terminalSent
    }

    private struct Entry {
        let key: Key
        let flag: CancellationFlag
        var phase: Phase
    }

    private var entries: [Token: Entry] = [:]
    private var tokens: [Key: Token] = [:]
    private var lastToken: Token = 0

    /// Jobs whose thread has not returned yet.
    var count: Int { entries.count }

    /// Records a new job. Returns `nil` when a job with the same key is still running, which
    /// a correct broker never causes.
    mutating func start(_ key: Key) -> (token: Token, flag: CancellationFlag)? {
        guard tokens[key] == nil else { return nil }
        lastToken += 1
        let flag = CancellationFlag()
        entries[lastToken] = Entry(key: key, flag: flag, phase: .running)
        tokens[key] = lastToken
        return (lastToken, flag)
    }

    /// Handles `CancelJob`: sets the job's flag and suppresses everything but `JobCancelled`.
    /// Returns `false` (and changes nothing) for a job that is unknown, already cancelling or
    /// whose terminal result was sent.
    mutating func cancel(_ key: Key) -> Bool {
        guard let token = tokens[key], entries[token]?.phase == .running else { return false }
        entries[token]!.phase = .cancelling
        entries[token]!.flag.cancel()
        return true
    }

    /// Whether a result the job thread posted may be sent; the key to send it with, or `nil`
    /// to drop it. Records the terminal result.
    mutating func admitResult(_ token: Token, terminal: Bool) -> Key? {
        guard let entry = entries[token], entry.phase == .running else { return nil }
        if terminal { entries[token]!.phase = .terminalSent }
        return entry.key
    }

    /// The job thread returned: forgets the job and says which terminal frame to send, if any.
    mutating func end(_ token: Token, _ outcome: Outcome) -> Ending? {
        guard let entry = entries.removeValue(forKey: token) else { return nil }
        tokens[entry.key] = nil
        switch (entry.phase, outcome) {
        case (.terminalSent, _):
            return nil
        case (.cancelling, _):
            return .cancelled(entry.key)
        case (.running, .failed(let error)):
            return .failed(entry.key, Enlarger_V1_ErrorCode(error.code), error.message)
        case (.running, .completed):
            return .failed(entry.key, .internal, "the pipeline ended without a terminal result")
        }
    }

    /// Stops every job without telling the broker (which is gone, or has forgotten this
    /// worker): sets each flag and forgets the job, so whatever its thread posts is dropped.
    mutating func abandonAll() {
        for entry in entries.values { entry.flag.cancel() }
        entries.removeAll()
        tokens.removeAll()
    }
}
