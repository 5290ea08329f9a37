/// Values as the services' log lines carry them.
public enum LogField {
    /// Milliseconds with a tenth's precision (`duration_ms`, `queue_wait_ms`, …).
    public static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return ((Double(seconds) * 1000 + Double(attoseconds) * 1e-15) * 10).rounded() / 10
    }

    /// Seconds with a millisecond's precision (`silence_s`, …): log fields outside the
    /// per-request lines that are durations.
    public static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return ((Double(seconds) + Double(attoseconds) * 1e-18) * 1000).rounded() / 1000
    }
}
