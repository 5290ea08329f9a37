#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A point on a monotonic clock, in nanoseconds from an arbitrary origin. The broker core
/// never reads a clock itself: every event carries `now`, so tests drive time by hand.
public struct MonotonicInstant: Comparable, Hashable, Sendable {
    public var nanoseconds: UInt64

    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    /// The system's monotonic clock (`CLOCK_MONOTONIC`), for the I/O loop.
    public static func now() -> MonotonicInstant {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return MonotonicInstant(nanoseconds: UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec))
    }

    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    public static func + (instant: MonotonicInstant, duration: Duration) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: instant.nanoseconds &+ duration.nanoseconds)
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    public func duration(since earlier: MonotonicInstant) -> Duration {
        nanoseconds > earlier.nanoseconds ? .nanoseconds(Int64(nanoseconds - earlier.nanoseconds)) : .zero
    }
}

extension Duration {
    /// Whole nanoseconds, clamped to zero for negative durations.
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(max(attoseconds, 0) / 1_000_000_000)
    }

    var milliseconds: UInt64 { nanoseconds / 1_000_000 }
}
