import Enlarger
import EnlargerBroker
import EnlargerWorker
import Foundation
import Logging
import Telemetry
import TestSupport
import XCTest

/// The operator's view over real sockets: what `/metrics` counts is what the clients were
/// told, `/readyz` follows the workers, and the gauges show the queue as it is.
final class MetricsEndToEndTests: XCTestCase {
    func testMetricsCountWhatClientsWereToldAndReadinessFollowsWorkers() async throws {
        let cluster = try Cluster(self) { $0.metricsAddress = "127.0.0.1:0" }
        let brokerMetrics = try XCTUnwrap(cluster.metricsAddress)
        let client = try cluster.client()

        // No worker yet: alive, not ready; requests wait in the queue.
        XCTAssertEqual(try HTTPGet.fetch(brokerMetrics, path: "/healthz").status, 200)
        let notReady = try HTTPGet.fetch(brokerMetrics, path: "/readyz")
        XCTAssertEqual(notReady.status, 503)
        XCTAssert(notReady.body.contains("no worker"), notReady.body)

        let small = ["jpegdecoder_jpg-size-33x33.jpg", "exifsamples_kodak-dc240.jpg", "gofuzz_video-001.q50.420.progressive.jpeg",
                     "exifsamples_nikon-e950.jpg", "jpegdecoder_grayscale_long.jpg"]
        let bad = ["sharp_truncated.jpg", "thumbor_image_invalid.jpg"]
        var inputs: [(id: String, bytes: [UInt8])] = []
        for (index, name) in small.enumerated() { inputs.append(("good-\(index)", try Corpus.good(name))) }
        for (index, name) in bad.enumerated() { inputs.append(("bad-\(index)", try Corpus.bad(name))) }
        let options = ResizeOptions(width: 64)

        // Two queued requests: one to cancel, one to reach its deadline.
        let doomed = client.submit(ResizeRequest(id: "to-cancel", image: inputs[0].bytes, options: options))
        let late = client.submit(ResizeRequest(id: "too-late", image: inputs[0].bytes, options: options,
                                               timeout: .milliseconds(300)))
        let waiting = try await scrape(brokerMetrics, until: { $0["enlarger_queue_depth"] == 2 })
        XCTAssertEqual(waiting["enlarger_workers"], 0)
        _ = try await client.cancel("to-cancel")
        _ = await Self.outcome(of: doomed)
        let lateOutcome = await Self.outcome(of: late)
        XCTAssertEqual(lateOutcome, "failed deadlineExceeded")

        // A worker with its own port: not ready until the broker has answered it.
        var logger = Logger(label: "test.worker")
        logger.logLevel = .error
        var configuration = WorkerConfiguration(brokerEndpoint: cluster.workersEndpoint, concurrency: 2,
                                                heartbeatInterval: cluster.heartbeat, name: "metrics-worker",
                                                memoryBudget: 512 << 20, logger: logger)
        configuration.metricsAddress = "127.0.0.1:0"
        let service = try WorkerService(configuration: configuration)
        let workerMetrics = try XCTUnwrap(service.metricsAddress)
        let worker = service.start()
        defer { try? worker.stop() }
        try await waitFor { (try? HTTPGet.fetch(workerMetrics, path: "/readyz").status) == 200 }
        try await waitFor { (try? HTTPGet.fetch(brokerMetrics, path: "/readyz").status) == 200 }

        // Every other request: some finish, the bad ones fail with their codes.
        var told: [String: Int] = [:]
        try await withThrowingTaskGroup(of: String.self) { group in
            for input in inputs {
                group.addTask {
                    await Self.outcome(of: client.submit(ResizeRequest(id: input.id, image: input.bytes, options: options)))
                }
            }
            for try await outcome in group { told[outcome, default: 0] += 1 }
        }
        XCTAssertEqual(told["finished OK"], small.count, "\(told)")

        let broker = try await scrape(brokerMetrics, until: { $0["enlarger_requests_in_flight"] == 0 })
        XCTAssertEqual(broker[#"enlarger_requests_total{outcome="finished",code="OK"}"#], Double(small.count))
        XCTAssertEqual(broker[#"enlarger_requests_total{outcome="cancelled",code="CANCELLED"}"#], 1)
        XCTAssertEqual(broker[#"enlarger_requests_total{outcome="failed",code="DEADLINE_EXCEEDED"}"#], 1)
        XCTAssertEqual(told["failed truncated"], 1, "\(told)")
        XCTAssertEqual(broker[#"enlarger_requests_total{outcome="failed",code="TRUNCATED"}"#], 1)
        let failedBad = broker.filter { $0.key.hasPrefix(#"enlarger_requests_total{outcome="failed""#) }.values.reduce(0, +)
        XCTAssertEqual(failedBad, Double(bad.count + 1), "\(broker)")
        let ended = Double(inputs.count + 2)
        XCTAssertEqual(broker["enlarger_accepted_total"], ended)
        let timed = broker.filter { $0.key.hasPrefix("enlarger_request_duration_seconds_count") }.values.reduce(0, +)
        XCTAssertEqual(timed, ended)
        XCTAssertEqual(broker["enlarger_request_queue_wait_seconds_count"], Double(inputs.count), "only dispatched requests waited")
        XCTAssertEqual(broker["enlarger_input_bytes_total"], Double(inputs.map(\.bytes.count).reduce(0, +) + 2 * inputs[0].bytes.count))
        XCTAssertGreaterThan(broker["enlarger_output_bytes_total"] ?? 0, 0)
        XCTAssertEqual(broker["enlarger_queue_depth"], 0)
        XCTAssertEqual(broker["enlarger_workers"], 1)
        XCTAssertEqual(broker["enlarger_worker_capacity"], 2)
        XCTAssertEqual(broker["enlarger_deadlines_exceeded_total"], 1)

        let jobs = try await scrape(workerMetrics, until: { $0["enlarger_worker_jobs"] == 0 })
        XCTAssertEqual(jobs[#"enlarger_worker_jobs_total{outcome="finished",code="OK"}"#], Double(small.count))
        XCTAssertEqual(jobs[#"enlarger_worker_jobs_total{outcome="failed",code="TRUNCATED"}"#], 1)
        // One observation per job that produced results (its degraded and final encodes summed).
        XCTAssertEqual(jobs[#"enlarger_worker_stage_seconds_count{stage="encode"}"#], Double(small.count))
        XCTAssertEqual(jobs[#"enlarger_worker_stage_seconds_count{stage="decode"}"#], Double(small.count))
        XCTAssertEqual(jobs["enlarger_worker_registered"], 1)
        XCTAssertEqual(jobs["enlarger_worker_memory_budget_bytes"], Double(512 << 20))
        XCTAssertEqual(jobs["enlarger_worker_memory_in_use_bytes"], 0)
        XCTAssertEqual(jobs["enlarger_worker_threads"], 2)
        XCTAssertEqual(jobs["enlarger_worker_output_bytes_total"], broker["enlarger_output_bytes_total"])
        await client.close()
    }

    /// A worker whose broker is not there is alive but not ready, and says why.
    func testAWorkerWithoutItsBrokerIsNotReady() async throws {
        var configuration = WorkerConfiguration(brokerEndpoint: try TemporaryEndpoints(self).ipc("nobody-here"), concurrency: 1,
                                                heartbeatInterval: .milliseconds(200), name: "alone")
        configuration.metricsAddress = "127.0.0.1:0"
        let service = try WorkerService(configuration: configuration)
        let address = try XCTUnwrap(service.metricsAddress)
        let worker = service.start()
        defer { try? worker.stop() }
        XCTAssertEqual(try HTTPGet.fetch(address, path: "/healthz").status, 200)
        let ready = try HTTPGet.fetch(address, path: "/readyz")
        XCTAssertEqual(ready.status, 503)
        XCTAssert(ready.body.contains("not registered"), ready.body)
        XCTAssertEqual(try parse(HTTPGet.fetch(address, path: "/metrics").body)["enlarger_worker_registered"], 0)
    }

    // MARK: Helpers

    /// "finished OK", "failed CODE", or what else ended the request.
    private static func outcome(of events: RequestEvents) async -> String {
        do {
            for try await _ in events {}
            return "finished OK"
        } catch {
            if case .failed(let code, _) = error { return "failed \(code)" }
            return "other \(error)"
        }
    }

    /// Scrapes until `condition` holds (at most 10 s) and returns the samples by series.
    private func scrape(_ address: String, until condition: ([String: Double]) -> Bool) async throws -> [String: Double] {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let response = try HTTPGet.fetch(address, path: "/metrics")
            XCTAssertEqual(response.status, 200)
            let samples = parse(response.body)
            if condition(samples) || ContinuousClock.now > deadline { return samples }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    private func waitFor(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else { return XCTFail("condition not met within 10 s") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    private func parse(_ text: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return samples
    }
}
