/// Decides which body chunks are reported as progress: the first one, then one whenever at
/// least `interval` has passed since the last report. Time, not chunk count, bounds the rate,
/// so a fast download of many small chunks reports as seldom as a slow one.
struct ProgressThrottle {
    let interval: Duration
    private var lastReport: ContinuousClock.Instant? = nil

    init(interval: Duration) {
        self.interval = interval
    }

    mutating func shouldReport(at now: ContinuousClock.Instant) -> Bool {
        if let lastReport, now - lastReport < interval { return false }
        lastReport = now
        return true
    }
}
