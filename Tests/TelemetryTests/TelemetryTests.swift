import Foundation
import Glibc
@testable import Telemetry
import XCTest

final class HTTPEndpointTests: XCTestCase {
    func testAddressForms() throws {
        XCTAssertEqual(try HTTPEndpoint.split("127.0.0.1:9570").host, "127.0.0.1")
        XCTAssertEqual(try HTTPEndpoint.split("127.0.0.1:9570").port, "9570")
        XCTAssertNil(try HTTPEndpoint.split("*:9570").host)
        XCTAssertEqual(try HTTPEndpoint.split("[::1]:0").host, "::1")
        XCTAssertEqual(try HTTPEndpoint.split("localhost:80").host, "localhost")
        for bad in ["9570", ":9570", "host:", "host:port", "host:70000", "::1:9570", "host:-1"] {
            XCTAssertThrowsError(try HTTPEndpoint.split(bad), bad) { error in
                XCTAssert("\(error)".contains("HOST:PORT"), "\(bad): \(error)")
            }
        }
    }

    func testItAnswersGetAndHeadAndRefusesTheRest() throws {
        let endpoint = try HTTPEndpoint(address: "127.0.0.1:0") { path in
            .init(status: path == "/here" ? 200 : 404, text: "path \(path)\n")
        }
        endpoint.start()
        defer { endpoint.stop() }
        XCTAssert(endpoint.boundAddress.hasPrefix("127.0.0.1:"), endpoint.boundAddress)
        XCTAssertNotEqual(endpoint.boundAddress, "127.0.0.1:0")

        let found = try HTTPGet.fetch(endpoint.boundAddress, path: "/here?x=1")
        XCTAssertEqual(found.status, 200)
        XCTAssertEqual(found.body, "path /here\n")
        XCTAssertEqual(found.headers["content-length"], "11")
        XCTAssertEqual(found.headers["connection"], "close")
        XCTAssertEqual(try HTTPGet.fetch(endpoint.boundAddress, path: "/elsewhere").status, 404)

        XCTAssert(try raw(endpoint.boundAddress, "HEAD /here HTTP/1.1\r\n\r\n").hasSuffix("\r\n\r\n"), "HEAD has no body")
        XCTAssert(try raw(endpoint.boundAddress, "POST /here HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 405 "))
        XCTAssert(try raw(endpoint.boundAddress, "nonsense\r\n\r\n").hasPrefix("HTTP/1.1 400 "))
        let huge = "GET /here HTTP/1.1\r\n" + String(repeating: "X-Filler: 0123456789\r\n", count: 600) + "\r\n"
        XCTAssert(try raw(endpoint.boundAddress, huge).hasPrefix("HTTP/1.1 431 "))
    }

    /// A client that connects and says nothing does not hold up another (see
    /// HTTPEndpointLoadTests for 200 of them).
    func testASilentClientDelaysOthersOnlyBriefly() throws {
        let endpoint = try HTTPEndpoint(address: "127.0.0.1:0") { _ in .init(status: 200, text: "ok\n") }
        endpoint.start()
        defer { endpoint.stop() }
        let silent = try connectRaw(endpoint.boundAddress)
        defer { close(silent) }
        let start = ContinuousClock.now
        XCTAssertEqual(try HTTPGet.fetch(endpoint.boundAddress, path: "/", timeout: .seconds(10)).status, 200)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(5))
    }

    func testBindErrorsNameTheAddress() throws {
        let first = try HTTPEndpoint(address: "127.0.0.1:0") { _ in .init(status: 200, text: "") }
        XCTAssertThrowsError(try HTTPEndpoint(address: first.boundAddress) { _ in .init(status: 200, text: "") }) { error in
            XCTAssert("\(error)".contains(first.boundAddress), "\(error)")
        }
        XCTAssertThrowsError(try HTTPGet.fetch(first.boundAddress.replacingOccurrences(of: ":", with: ":1"), path: "/"))
    }

    // MARK: Helpers

    private func connectRaw(_ address: String) throws -> Int32 {
        let (host, port) = try HTTPEndpoint.split(address)
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        XCTAssertEqual(getaddrinfo(host, port, &hints, &list), 0)
        defer { freeaddrinfo(list) }
        let fd = socket(list!.pointee.ai_family, list!.pointee.ai_socktype, 0)
        XCTAssertEqual(connect(fd, list!.pointee.ai_addr, list!.pointee.ai_addrlen), 0)
        return fd
    }

    /// Sends `request` as is and returns the whole response.
    private func raw(_ address: String, _ request: String) throws -> String {
        let fd = try connectRaw(address)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let bytes = Array(request.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            response += chunk[..<count]
        }
        return String(decoding: response, as: UTF8.self)
    }
}

final class LoopProbeTests: XCTestCase {
    func testAnUnansweredQuestionTimesOut() {
        let probe = LoopProbe(wake: {})
        let start = ContinuousClock.now
        XCTAssertFalse(probe.ask(timeout: .milliseconds(100)))
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - start, .milliseconds(100))
    }

    /// The loop answers on its own thread, and what it published in its answer is newer than
    /// the question: the asker always reads a value set after it asked.
    func testAnswersAreNewerThanTheQuestions() {
        let published = ManagedCounter()
        let loopValue = ManagedCounter()
        let wakeups = DispatchSemaphore(value: 0)
        let probe = LoopProbe(wake: { wakeups.signal() })
        let stop = ManagedCounter()
        let loop = Thread {
            while stop.value == 0 {
                _ = wakeups.wait(timeout: .now() + .milliseconds(5))
                loopValue.increment()
                probe.answer { published.set(loopValue.value) }
            }
        }
        loop.start()
        defer { stop.set(1) }
        for _ in 0..<200 {
            let before = loopValue.value
            XCTAssertTrue(probe.ask(timeout: .seconds(5)))
            XCTAssertGreaterThan(published.value, before)
        }
    }
}

final class MetricsRegistryTests: XCTestCase {
    func testExpositionFollowsPrometheusConventions() {
        let registry = MetricsRegistry()
        let counter = registry.counter("enlarger_things_total", help: "Things.", labels: [("code", "OK")])
        counter.increment(by: 3)
        registry.gauge("enlarger_depth", help: "Depth.").set(7)
        let timer = registry.timer("enlarger_wait_seconds", help: "Waits.")
        timer.record(.milliseconds(3))
        timer.record(.seconds(3))
        let text = String(decoding: registry.exposition(), as: UTF8.self)
        for line in [
            "# HELP enlarger_things_total Things.", "# TYPE enlarger_things_total counter",
            "enlarger_things_total{code=\"OK\"} 3", "# TYPE enlarger_depth gauge", "enlarger_depth 7.0",
            "# TYPE enlarger_wait_seconds histogram", "enlarger_wait_seconds_bucket{le=\"0.001\"} 0",
            "enlarger_wait_seconds_bucket{le=\"0.005\"} 1", "enlarger_wait_seconds_bucket{le=\"5.0\"} 2",
            "enlarger_wait_seconds_bucket{le=\"+Inf\"} 2", "enlarger_wait_seconds_count 2", "enlarger_wait_seconds_sum 3.003",
        ] {
            XCTAssert(text.split(separator: "\n").contains(Substring(line)), "missing \(line) in\n\(text)")
        }
    }
}

extension MetricsRegistryTests {
    /// A family hands out one metric per label values, made once.
    func testFamiliesMakeOneSeriesPerLabelValues() {
        let registry = MetricsRegistry()
        let requests = registry.counters("enlarger_things_total", help: "Things.", labels: ["outcome", "code"])
        requests("failed", "TRUNCATED").increment()
        requests("failed", "TRUNCATED").increment()
        requests("finished", "OK").increment()
        let text = String(decoding: registry.exposition(), as: UTF8.self)
        XCTAssert(text.contains(#"enlarger_things_total{outcome="failed",code="TRUNCATED"} 2"#), text)
        XCTAssert(text.contains(#"enlarger_things_total{outcome="finished",code="OK"} 1"#), text)
        XCTAssertEqual(text.components(separatedBy: "# HELP enlarger_things_total").count, 2, "one HELP line")
    }
}

final class TelemetryServerTests: XCTestCase {
    func testRoutesReflectTheLoop() throws {
        let registry = MetricsRegistry()
        let gauge = registry.gauge("enlarger_turns", help: "Turns.")
        let reason = ManagedText("no worker is registered")
        let answering = ManagedCounter()
        let wakeups = DispatchSemaphore(value: 0)
        let probe = LoopProbe(wake: { wakeups.signal() })
        let server = try TelemetryServer(address: "127.0.0.1:0", registry: registry, probe: probe,
                                         isReady: { reason.value }, patience: .milliseconds(300))
        server.start()
        defer { server.stop() }

        // No loop answers yet: not alive.
        let dead = try HTTPGet.fetch(server.address, path: "/healthz")
        XCTAssertEqual(dead.status, 503)
        XCTAssert(dead.body.contains("did not answer"), dead.body)
        XCTAssertEqual(try HTTPGet.fetch(server.address, path: "/metrics").status, 503)

        answering.set(1)
        let loop = Thread {
            var turns = 0
            while answering.value == 1 {
                _ = wakeups.wait(timeout: .now() + .milliseconds(5))
                turns += 1
                probe.answer { gauge.set(turns) }
            }
        }
        loop.start()
        defer { answering.set(0) }
        XCTAssertEqual(try HTTPGet.fetch(server.address, path: "/healthz").status, 200)
        let notReady = try HTTPGet.fetch(server.address, path: "/readyz")
        XCTAssertEqual(notReady.status, 503)
        XCTAssertEqual(notReady.body, "not ready: no worker is registered\n")
        reason.set(nil)
        XCTAssertEqual(try HTTPGet.fetch(server.address, path: "/readyz").status, 200)
        let metrics = try HTTPGet.fetch(server.address, path: "/metrics")
        XCTAssertEqual(metrics.status, 200)
        XCTAssertEqual(metrics.headers["content-type"], MetricsRegistry.contentType)
        XCTAssert(metrics.body.contains("enlarger_turns "), metrics.body)
        XCTAssertEqual(try HTTPGet.fetch(server.address, path: "/nothing").status, 404)
    }
}

/// Small thread-safe boxes for the tests' threads.
final class ManagedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = 0
    var value: Int { lock.withLock { stored } }
    func set(_ value: Int) { lock.withLock { stored = value } }
    func increment() { lock.withLock { stored += 1 } }
}

final class ManagedText: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: String?
    init(_ value: String?) { stored = value }
    var value: String? { lock.withLock { stored } }
    func set(_ value: String?) { lock.withLock { stored = value } }
}
