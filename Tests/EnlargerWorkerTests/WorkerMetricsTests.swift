@testable import EnlargerWorker
import Foundation
import Telemetry
import XCTest

/// What the worker's metrics say about a job agrees with how the job ended.
final class WorkerMetricsTests: XCTestCase {
    func testOnlyADeliveredResultIsCountedOK() {
        let registry = MetricsRegistry()
        let metrics = WorkerMetrics(registry: registry)
        let outcomes: [JobEnd.Outcome] = [.finished, .failed(.corrupt), .cancelled, .cancelled, .abandoned]
        for (index, outcome) in outcomes.enumerated() {
            metrics.record(.jobEnded(JobEnd(key: JobKey(jobID: UInt64(index), attempt: 1), requestID: "r\(index)",
                                            outcome: outcome, figures: JobFigures())))
        }
        let text = String(decoding: registry.exposition(), as: UTF8.self)
        for line in [#"enlarger_worker_jobs_total{outcome="finished",code="OK"} 1"#,
                     #"enlarger_worker_jobs_total{outcome="failed",code="CORRUPT"} 1"#,
                     #"enlarger_worker_jobs_total{outcome="cancelled",code="CANCELLED"} 2"#,
                     #"enlarger_worker_jobs_total{outcome="abandoned",code="ABANDONED"} 1"#] {
            XCTAssert(text.contains(line), "\(line) in:\n\(text)")
        }
        XCTAssertFalse(text.contains(#"outcome="cancelled",code="OK""#), text)
    }
}
