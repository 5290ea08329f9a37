import Dispatch
import Fetching
import Imaging
import Synchronization

/// The I/O thread's two signals to one job's thread: stop (the cancellation flag the
/// pipeline polls) and go (memory was admitted for it).
///
/// A job thread prepares its job, reports the estimate, then blocks in `waitForAdmission`
/// until the core admits it or it is cancelled; so a job waiting for memory holds no pixel
/// memory and stays cancellable. A file or URL job is admitted twice: for its source bytes
/// before it reads them (round 1), then for its estimate (round 2).
final class JobControl: Sendable {
    let flag = CancellationFlag()
    /// Stops a URL source's download in flight, with the flag.
    let download = FetchCancellation()
    private let admissions = Atomic<Int>(0)
    // One signal per admit or cancel, so a wait always ends with one of them true.
    private let wakeup = DispatchSemaphore(value: 0)

    func admit() {
        admissions.add(1, ordering: .releasing)
        wakeup.signal()
    }

    /// Idempotent, from any thread.
    func cancel() {
        flag.cancel()
        download.cancel()
        wakeup.signal()
    }

    var isCancelled: Bool { flag.isCancelled }
    var isAdmitted: Bool { admissionCount >= 1 }
    var admissionCount: Int { admissions.load(ordering: .acquiring) }

    /// Blocks until admitted `round` times in all, or cancelled. Returns whether the job may go on.
    func waitForAdmission(round: Int = 1) -> Bool {
        while !isCancelled && admissionCount < round { wakeup.wait() }
        return !isCancelled
    }
}
