import Enlarger
import EnlargerWorker
import Foundation
import ImageModel
import Imaging
import Locking
import TestSupport
import XCTest

/// Honest credit, end to end: a request cancelled while the AV1 encoder runs (which cannot
/// be interrupted) is told Cancelled at once; its thread's credit comes back only when the
/// encode is over, so the next request waits for the thread rather than landing on a busy
/// worker; and the worker, which keeps saying the thread is at work, is never retired, although
/// the encode outlasts the broker's cancel-ack timeout several times.
final class UninterruptibleCancelTests: XCTestCase {
    func testCancellingAnAV1EncodeNeitherOverbooksNorRetiresTheWorker() async throws {
        let cancelAckTimeout = Duration.milliseconds(300)
        let cluster = try Cluster(self, heartbeat: .milliseconds(100)) {
            $0.broker.cancelAckTimeout = cancelAckTimeout
        }
        try cluster.startThreadWorkers(1, concurrency: 1)
        let client = try cluster.client()
        try await cluster.waitForWorkers(1, client: client)
        let photo = try Corpus.good("bimg_vertical.jpg")
        // About 16 MP of AVIF: seconds of an encode nobody can stop (the default limit).
        var avif = ResizeOptions(height: 4898, enlarge: true)
        avif.accept = [.avif]
        let small = ResizeOptions(width: 64)

        // The cancel must land inside the encode, after the resize (which stops at once). When
        // the encode runs after the degraded result depends on the machine, so the same request
        // runs whole twice first: once written as JPEG (whose encode takes milliseconds), once
        // as AVIF. The AVIF encode runs between the two finals' times; cancels aim inside that
        // window, its middle first.
        func degradedToFinal(_ id: String, _ options: ResizeOptions) async throws -> Double {
            let whole = client.submit(ResizeRequest(id: id, image: photo, options: options, delivery: .progressive,
                                                    sharesResults: false))
            var degradedAt: ContinuousClock.Instant?
            var finalAt: ContinuousClock.Instant?
            for try await event in whole {
                if case .degraded = event { degradedAt = .now }
                if case .final = event { finalAt = .now }
            }
            let rest = try XCTUnwrap(finalAt) - XCTUnwrap(degradedAt)
            return Double(rest.components.seconds) + Double(rest.components.attoseconds) / 1e18
        }
        var jpeg = avif
        jpeg.accept = [.jpeg]
        let resized = try await degradedToFinal("whole-jpeg", jpeg)
        let encoded = try await degradedToFinal("whole-avif", avif)
        let window = encoded - resized
        print("degraded result to final: \(resized) s as JPEG, \(encoded) s as AVIF")
        XCTAssertGreaterThan(window, 0.5, "the AVIF encode takes a while")
        var caught = false
        for (round, fraction) in [0.5, 0.3, 0.7, 0.15].enumerated() where !caught {
            let delay = resized + window * fraction
            let big = client.submit(ResizeRequest(id: "encode-\(round)", image: photo, options: avif, delivery: .progressive,
                                                  sharesResults: false))
            var sawDegraded = false
            for try await event in big {
                if case .degraded = event { sawDegraded = true; break }
            }
            XCTAssertTrue(sawDegraded)
            try await Task.sleep(for: .seconds(delay))
            let cancelledAt = ContinuousClock.now
            let answer = try await client.cancel("encode-\(round)")
            let answeredIn = ContinuousClock.now - cancelledAt
            // Finished: the final was out before the cancel (the aim was late); any other
            // answer is wrong.
            XCTAssertTrue(["cancelled", "finished"].contains("\(answer)"), "\(answer)")
            XCTAssertLessThan(answeredIn, .seconds(1), "the client hears Cancelled at once, not when the encode ends")

            // The next request waits for the thread, and the broker sees no more than one job on it.
            let next = client.submit(ResizeRequest(id: "next-\(round)", image: photo, options: small, delivery: .final,
                                                   sharesResults: false))
            let startedAt = Lock<ContinuousClock.Instant?>(nil)
            let consumer = Task.detached { () -> Bool in
                var final = false
                for try await event in next {
                    if case .started = event { startedAt.withLock { $0 = $0 ?? .now } }
                    if case .final = event { final = true }
                }
                return final
            }
            var maxInFlight = 0
            while startedAt.withLock({ $0 }) == nil, ContinuousClock.now - cancelledAt < .seconds(20) {
                let status = try await client.status()
                XCTAssertEqual(status.workers.count, 1, "the worker is never retired")
                maxInFlight = max(maxInFlight, status.workers.first?.inFlight ?? 0)
                try await Task.sleep(for: .milliseconds(50))
            }
            let finished = try await consumer.value
            XCTAssertTrue(finished)
            let freedIn = try XCTUnwrap(startedAt.withLock { $0 }) - cancelledAt
            XCTAssertLessThanOrEqual(maxInFlight, 1, "capacity 1: never overbooked")
            print("round \(round): cancel after the degraded result + \(delay) s; answered \(answer) in \(answeredIn); "
                  + "the thread was free for the next request after \(freedIn)")
            // A cancel answered by the thread at once landed before the encode (or the encode
            // was over): try another moment. Twice the cancel-ack timeout is twice what the
            // broker used to allow before retiring the worker.
            caught = "\(answer)" == "cancelled" && freedIn > cancelAckTimeout * 2
        }
        XCTAssertTrue(caught, "no cancel landed inside the encode")
        let status = try await client.status()
        XCTAssertEqual(status.totals.workersLost, 0)
        XCTAssertEqual(status.totals.cancelAcksTimedOut, 0)
        XCTAssertEqual(status.workers.count, 1)
        await client.close()
    }
}
