import Dispatch

/// Frees large buffers on a background queue. Returning a few hundred megabytes to the
/// kernel costs 20–35 ms (measured for 300 MB), which would otherwise sit between a cancel
/// and the job thread becoming free again.
public enum BufferReaper {
    /// Smaller buffers are freed in place: handing them over costs more than it saves.
    static let threshold = 8 << 20
    private static let queue = DispatchQueue(label: "enlarger.imaging.reaper", qos: .utility)

    /// Takes the buffer out of `buffer` (leaving `nil`) and frees its memory off this thread,
    /// unless another copy still shares it.
    static func release(_ buffer: inout PixelBuffer?) {
        guard let taken = buffer else { return }
        buffer = nil
        if case .allocated(let memory) = taken.storage { release(memory) }
    }

    /// Drops this reference to `memory`, off this thread when it is large.
    static func release(_ memory: Allocation) {
        guard memory.count >= threshold else { return }
        let doomed = Doomed(memory)
        queue.async { doomed.drop() }
    }

    /// Waits until everything handed over so far has been freed (for measurements).
    static func drain() {
        queue.sync {}
    }

    /// Calls `body` on the reaper's queue once everything handed over so far has been freed:
    /// how a caller that accounts for memory learns that a finished run's buffers are gone.
    public static func afterPendingFrees(_ body: @escaping @Sendable () -> Void) {
        queue.async(execute: body)
    }

    private final class Doomed: @unchecked Sendable {
        // Touched only by the reaper queue after hand-over.
        private var memory: Allocation?
        init(_ memory: Allocation) { self.memory = memory }
        func drop() { memory = nil }
    }
}
