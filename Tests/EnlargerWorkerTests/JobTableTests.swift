import Imaging
import XCTest

@testable import EnlargerWorker

/// The worker's per-job decisions, without sockets or threads.
final class JobTableTests: XCTestCase {
    private let key = JobTable.Key(jobID: 1, attempt: 1)

    func testResultsPassUntilTheTerminalOneAndTheEndSendsNothingMore() throws {
        var table = JobTable()
        let (token, _) = try XCTUnwrap(table.start(key))
        XCTAssertEqual(table.admitResult(token, terminal: false), key)
        XCTAssertEqual(table.admitResult(token, terminal: true), key)
        XCTAssertNil(table.admitResult(token, terminal: true), "nothing after the terminal result")
        XCTAssertFalse(table.cancel(key), "a cancel after the terminal result is ignored")
        XCTAssertNil(table.end(token, .completed))
        XCTAssertEqual(table.count, 0)
    }

    func testCancelSetsTheFlagDropsLaterResultsAndEndsWithJobCancelled() throws {
        var table = JobTable()
        let (token, flag) = try XCTUnwrap(table.start(key))
        XCTAssertTrue(table.cancel(key))
        XCTAssertTrue(flag.isCancelled)
        XCTAssertFalse(table.cancel(key), "a second cancel changes nothing")
        XCTAssertNil(table.admitResult(token, terminal: false))
        XCTAssertNil(table.admitResult(token, terminal: true), "even the terminal result is dropped")
        XCTAssertEqual(table.end(token, .completed), .cancelled(key))
    }

    func testCancelledJobThatFailedStillEndsWithJobCancelled() throws {
        var table = JobTable()
        let (token, _) = try XCTUnwrap(table.start(key))
        XCTAssertTrue(table.cancel(key))
        XCTAssertEqual(table.end(token, .failed(ImagingError(.cancelled, "cancelled"))), .cancelled(key))
    }

    func testFailureMapsTheImagingCode() throws {
        var table = JobTable()
        let (token, _) = try XCTUnwrap(table.start(key))
        XCTAssertEqual(table.end(token, .failed(ImagingError(.truncated, "short"))), .failed(key, .truncated, "short"))
    }

    func testAbandonedJobsAreForgottenSilently() throws {
        var table = JobTable()
        let (token, flag) = try XCTUnwrap(table.start(key))
        table.abandonAll()
        XCTAssertTrue(flag.isCancelled)
        XCTAssertNil(table.admitResult(token, terminal: true))
        XCTAssertNil(table.end(token, .failed(ImagingError(.cancelled, "cancelled"))))
        XCTAssertFalse(table.cancel(key))
        // The same ids from a restarted broker are a new job with a new token.
        let (again, _) = try XCTUnwrap(table.start(key))
        XCTAssertNotEqual(again, token)
    }

    func testTheSameJobTwiceIsRefused() throws {
        var table = JobTable()
        XCTAssertNotNil(table.start(key))
        XCTAssertNil(table.start(key))
        XCTAssertNotNil(table.start(JobTable.Key(jobID: 1, attempt: 2)))
    }
}
