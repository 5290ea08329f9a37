import Dispatch
import Fetching
import Imaging
import Synchronization

/// The I/O thread's two signals to one job's thread: stop (the cancellation flag the
/// pipeline polls) and go (memory was admitted for it).
///
/// A job thread prepares its job, reports the estimate, then blocks in `waitForAdmission`
/// until the core admits it or it is cancelled; so a job waiting for memory holds no pixel
/// memory and stays cancellable.
final class JobControl: Sendable {
    let flag = CancellationFlag()
    /// Stops a URL source's download in flight, with the flag.
    let download = FetchCancellation()
    private let admitted = Atomic<Bool>(false)
    // One signal per admit or cancel, so a wait always ends with one of them true.
    private let wakeup = DispatchSemaphore(value: 0)

    func admit() {
        admitted.store(true, ordering: .releasing)
        wakeup.signal()
    }

    /// Idempotent, from any thread.
    func cancel() {
        flag.cancel()
        download.cancel()
        wakeup.signal()
    }

    var isCancelled: Bool { flag.isCancelled }
    var isAdmitted: Bool { admitted.load(ordering: .acquiring) }

    /// Blocks until admitted or cancelled. Returns whether the job may run.
    func waitForAdmission() -> Bool {
        while !isCancelled && !isAdmitted { wakeup.wait() }
        return !isCancelled
    }
}
