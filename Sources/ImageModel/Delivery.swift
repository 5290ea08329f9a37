/// Which results a request wants.
public enum Delivery: String, Sendable, CaseIterable {
    /// A quick degraded result, then the final one (the default of the service).
    case progressive
    /// Only the final result.
    case final
    /// Only the degraded result (which is then the terminal one).
    case degraded
}

/// A result's stage: the quick approximation or the high-quality one.
public enum Stage: String, Sendable {
    case degraded
    case final
}
