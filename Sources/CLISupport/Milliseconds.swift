/// A duration in (fractional) milliseconds, as the commands print and report timings.
public func milliseconds(_ d: Duration) -> Double {
    let (s, a) = d.components
    return Double(s) * 1e3 + Double(a) * 1e-15
}
