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
    private let yields = Atomic<Int>(0)
    // One signal per admit or cancel, so a wait always ends with one of them true.
    private let wakeup = DispatchSemaphore(value: 0)

    func admit() {
        admissions.add(1, ordering: .releasing)
        wakeup.signal()
    }

    /// Tells a file or URL job waiting to grow its reservation to drop its bytes and ask again.
    func yieldSource() {
        yields.add(1, ordering: .releasing)
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
        awaitAdmission(round: round, yieldsSeen: .max) == .admitted
    }

    enum Admission: Equatable {
        case admitted
        case cancelled
        /// Told to drop its source bytes and ask for them again.
        case yielded
    }

    /// Blocks until admitted `round` times in all, told to yield more than `yieldsSeen` times
    /// in all, or cancelled.
    func awaitAdmission(round: Int, yieldsSeen: Int) -> Admission {
        while true {
            if isCancelled { return .cancelled }
            if admissionCount >= round { return .admitted }
            if yields.load(ordering: .acquiring) > yieldsSeen { return .yielded }
            wakeup.wait()
        }
    }
}
