@testable import Fetching
import Foundation
import Locking
import TestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Whole fetches against local servers the tests start. The policy allows `127.0.0.1/32`
/// (and nothing else private), so redirects and names pointing elsewhere are still refused.
final class URLFetcherTests: XCTestCase {
    static let body: [UInt8] = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
    /// 8 MiB: a 64 KiB pattern doubled (built by copying, which a debug build does quickly).
    static let big: [UInt8] = {
        var bytes = (0..<(64 << 10)).map { UInt8(truncatingIfNeeded: $0 >> 3) }
        while bytes.count < 8 << 20 { bytes += bytes }
        return bytes
    }()

    // MARK: Downloads and events

    func testBodyWithContentLengthAndEvents() throws {
        let server = try serve([
            "/image.jpg": TestHTTPServer.ok(Self.body, headers: [("ETag", "\"v1\""), ("Last-Modified", "Tue, 01 Apr 2025 10:00:00 GMT")]),
        ])
        let log = EventLog()
        let result = try fetcher().fetch(server.url("/image.jpg"), cancellation: .init(), events: log.sink)

        XCTAssertEqual(result.bytes, Self.body)
        XCTAssertTrue(result.complete)
        XCTAssertEqual(result.head.finalURL.description, server.url("/image.jpg"))
        XCTAssertEqual(result.head.validator, "etag:\"v1\"", "an ETag is preferred over Last-Modified")
        XCTAssertEqual(result.head.expectedBytes, Self.body.count)
        let events = log.events
        XCTAssertEqual(events.first, .started(result.head))
        XCTAssertEqual(events.last, .finished(bytes: Self.body.count))
        XCTAssertEqual(events.filter { if case .started = $0 { true } else { false } }.count, 1)
        for case .progress(let bytes, let expected) in events {
            XCTAssertEqual(expected, Self.body.count)
            XCTAssertLessThanOrEqual(bytes, Self.body.count)
        }
    }

    func testValidatorFallsBackToLastModifiedThenNone() throws {
        let server = try serve([
            "/modified": TestHTTPServer.ok([1, 2, 3], headers: [("Last-Modified", "Tue, 01 Apr 2025 10:00:00 GMT"),
                                                                ("Date", "Tue, 01 Apr 2025 10:00:01 GMT")]),
            // Modified within the second the response names: the same date could name the next
            // version too (RFC 9110 §8.8.2.2), so it names none.
            "/same-second": TestHTTPServer.ok([1, 2, 3], headers: [("Last-Modified", "Tue, 01 Apr 2025 10:00:00 GMT"),
                                                                   ("Date", "Tue, 01 Apr 2025 10:00:00 GMT")]),
            "/no-date": TestHTTPServer.ok([1, 2, 3], headers: [("Last-Modified", "Tue, 01 Apr 2025 10:00:00 GMT")]),
            "/plain": TestHTTPServer.ok([1, 2, 3]),
            "/weak": TestHTTPServer.ok([1, 2, 3], headers: [("ETag", "W/\"v1\""),
                                                            ("Last-Modified", "Tue, 01 Apr 2025 10:00:00 GMT"),
                                                            ("Date", "Wed, 02 Apr 2025 10:00:00 GMT")]),
            "/strong": TestHTTPServer.ok([1, 2, 3], headers: [("ETag", "\"v1\""),
                                                              ("Last-Modified", "Tue, 01 Apr 2025 10:00:00 GMT")]),
        ])
        let fetcher = fetcher()
        let strong = try fetcher.fetch(server.url("/strong"), cancellation: .init(), events: { _ in })
        XCTAssertEqual(strong.head.validator, "etag:\"v1\"")
        let weak = try fetcher.fetch(server.url("/weak"), cancellation: .init(), events: { _ in })
        XCTAssertEqual(weak.head.validator, "last-modified:Tue, 01 Apr 2025 10:00:00 GMT",
                       "a weak ETag does not name the bytes")
        let modified = try fetcher.fetch(server.url("/modified"), cancellation: .init(), events: { _ in })
        XCTAssertEqual(modified.head.validator, "last-modified:Tue, 01 Apr 2025 10:00:00 GMT")
        for path in ["/same-second", "/no-date"] {
            let weakDate = try fetcher.fetch(server.url(path), cancellation: .init(), events: { _ in })
            XCTAssertNil(weakDate.head.validator, "\(path): a Last-Modified that is not strong names no version")
        }
        let plain = try fetcher.fetch(server.url("/plain"), cancellation: .init(), events: { _ in })
        XCTAssertNil(plain.head.validator)
        XCTAssertEqual(plain.bytes, [1, 2, 3])
    }

    /// IMF-fixdate, checked against dates whose epoch seconds are known; other forms are not read.
    func testHTTPDatesAreReadExactly() {
        XCTAssertEqual(HTTPDate.seconds("Thu, 01 Jan 1970 00:00:00 GMT"), 0)
        XCTAssertEqual(HTTPDate.seconds("Sun, 06 Nov 1994 08:49:37 GMT"), 784_111_777)
        XCTAssertEqual(HTTPDate.seconds("Tue, 29 Feb 2028 23:59:59 GMT"), 1_835_481_599)
        XCTAssertEqual(HTTPDate.seconds("Tue, 01 Apr 2025 10:00:01 GMT"), 1_743_501_601)
        for bad in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 UTC",
                    "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", ""] {
            XCTAssertNil(HTTPDate.seconds(bad), bad)
        }
    }

    func testChunkedBodyWithoutLength() throws {
        let server = try serve(["/chunked": TestHTTPServer.ok(Self.body, chunked: true, piece: 7000)])
        let log = EventLog()
        let result = try fetcher().fetch(server.url("/chunked"), cancellation: .init(), events: log.sink)
        XCTAssertEqual(result.bytes, Self.body)
        XCTAssertNil(result.head.expectedBytes)
        XCTAssertEqual(log.events.last, .finished(bytes: Self.body.count))
        for case .progress(_, let expected) in log.events { XCTAssertNil(expected) }
    }

    func testProgressIsThrottledByTime() throws {
        // 150 pieces of 1 KiB, one every 10 ms: about 1.5 s of steady trickle.
        let body = Array(Self.big.prefix(150 * 1024))
        let server = try serve(["/trickle": TestHTTPServer.ok(body, piece: 1024, pause: .milliseconds(10))])
        let log = EventLog()
        let start = ContinuousClock.now
        let result = try fetcher().fetch(server.url("/trickle"), cancellation: .init(), events: log.sink)
        let elapsed = ContinuousClock.now - start
        XCTAssertEqual(result.bytes.count, body.count)

        let progress = log.entries.filter { if case .progress = $0.1 { true } else { false } }
        let allowed = Int(elapsed / .milliseconds(250)) + 1
        XCTAssertGreaterThanOrEqual(progress.count, 3, "a 1.5 s download reports progress")
        XCTAssertLessThanOrEqual(progress.count, allowed, "at most 4 reports a second over \(elapsed)")
        for (earlier, later) in zip(progress, progress.dropFirst()) {
            // 250 ms apart when decided; the slack is for the recording thread being late once.
            XCTAssertGreaterThanOrEqual(later.0 - earlier.0, .milliseconds(200))
        }
    }

    // MARK: Size limit and `enough`

    func testDeclaredLengthOverTheLimitIsRefusedBeforeTheBody() throws {
        let server = try serve(["/big": TestHTTPServer.ok(Self.big, piece: 16384, pause: .milliseconds(1))])
        let log = EventLog()
        let error = fetchError(try fetcher { $0.maxBytes = 1 << 20 }.fetch(server.url("/big"), cancellation: .init(), events: log.sink))
        XCTAssertEqual(error, .tooLarge(limit: 1 << 20))
        XCTAssertEqual(log.events, [], "no event for a body that is refused by its head")
        XCTAssertTrue(server.waitUntilIdle(timeout: .seconds(2)))
        XCTAssertLessThan(server.bodyBytesSent, 1 << 20, "the server was stopped early")
    }

    func testStreamedBodyOverTheLimitIsStopped() throws {
        let server = try serve(["/big": TestHTTPServer.ok(Self.big, chunked: true, piece: 16384, pause: .milliseconds(1))])
        let log = EventLog()
        let error = fetchError(try fetcher { $0.maxBytes = 1 << 20 }.fetch(server.url("/big"), cancellation: .init(), events: log.sink))
        XCTAssertEqual(error, .tooLarge(limit: 1 << 20))
        XCTAssertFalse(log.events.contains { if case .finished = $0 { true } else { false } })
        XCTAssertTrue(server.waitUntilIdle(timeout: .seconds(2)))
        XCTAssertGreaterThanOrEqual(server.peerClosures, 1)
        XCTAssertLessThan(server.bodyBytesSent, 3 << 20, "the server stopped well before its 8 MiB")
    }

    func testEnoughStopsTheDownloadEarly() throws {
        let server = try serve(["/big": TestHTTPServer.ok(Self.big, piece: 16384, pause: .milliseconds(1))])
        let log = EventLog()
        let result = try fetcher().fetch(
            server.url("/big"), cancellation: .init(), events: log.sink, enough: { $0.count >= 64 << 10 }
        )
        XCTAssertFalse(result.complete)
        XCTAssertGreaterThanOrEqual(result.bytes.count, 64 << 10)
        XCTAssertEqual(result.bytes, Array(Self.big.prefix(result.bytes.count)))
        XCTAssertEqual(result.head.expectedBytes, Self.big.count)
        XCTAssertFalse(log.events.contains { if case .finished = $0 { true } else { false } })
        XCTAssertTrue(server.waitUntilIdle(timeout: .seconds(2)))
        XCTAssertGreaterThanOrEqual(server.peerClosures, 1)
        XCTAssertLessThan(server.bodyBytesSent, 1 << 20, "sent \(server.bodyBytesSent) of \(Self.big.count) bytes")
    }

    // MARK: Cancellation

    func testCancelStopsTheDownload() throws {
        let server = try serve(["/slow": TestHTTPServer.ok(Self.body, piece: 512, pause: .milliseconds(20))])
        let cancellation = FetchCancellation()
        let cancelledAt = Lock<ContinuousClock.Instant?>(nil)
        let log = EventLog()
        Thread.detachNewThread {
            sleepFor(.milliseconds(300))
            cancelledAt.withLock { $0 = .now }
            cancellation.cancel()
        }
        let error = fetchError(try fetcher().fetch(server.url("/slow"), cancellation: cancellation, events: log.sink))
        let returned = ContinuousClock.now
        XCTAssertEqual(error, .cancelled)
        let cancelled = try XCTUnwrap(cancelledAt.withLock { $0 })
        XCTAssertLessThan(returned - cancelled, .milliseconds(1500))
        XCTAssertTrue(log.events.contains { if case .started = $0 { true } else { false } }, "it was mid-download")
        XCTAssertTrue(server.waitUntilIdle(timeout: .seconds(1)), "the server saw the connection closed")
        XCTAssertGreaterThanOrEqual(server.peerClosures, 1)
        XCTAssertLessThan(server.bodyBytesSent, Self.body.count / 2)
    }

    func testCancelledBeforehandConnectsNowhere() throws {
        let server = try serve(["/image.jpg": TestHTTPServer.ok(Self.body)])
        let cancellation = FetchCancellation()
        cancellation.cancel()
        XCTAssertEqual(fetchError(try fetcher().fetch(server.url("/image.jpg"), cancellation: cancellation, events: { _ in })), .cancelled)
        XCTAssertEqual(server.requests.count, 0)
    }

    // MARK: Timeouts

    func testReadTimeoutWhenTheBodyStalls() throws {
        let server = try serve(["/stall": TestHTTPServer.stallAfterHead()])
        let start = ContinuousClock.now
        let error = fetchError(try fetcher { $0.readTimeout = .milliseconds(300) }.fetch(server.url("/stall"), cancellation: .init(), events: { _ in }))
        guard case .timedOut(let which) = error else { return XCTFail("\(String(describing: error))") }
        XCTAssertTrue(which.hasPrefix("read timeout"), which)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2))
    }

    func testReadTimeoutWhenTheHeadNeverEnds() throws {
        let server = try serve(["/endless": TestHTTPServer.endlessHead()])
        let start = ContinuousClock.now
        let error = fetchError(try fetcher { $0.readTimeout = .milliseconds(300) }.fetch(server.url("/endless"), cancellation: .init(), events: { _ in }))
        guard case .timedOut(let which) = error else { return XCTFail("\(String(describing: error))") }
        XCTAssertTrue(which.hasPrefix("read timeout"), which)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2))
    }

    func testTotalTimeoutOverASteadyTrickle() throws {
        // Never silent for long (a piece every 50 ms), but far longer than the total allows.
        let server = try serve(["/trickle": TestHTTPServer.ok(Self.body, piece: 100, pause: .milliseconds(50))])
        let start = ContinuousClock.now
        let error = fetchError(try fetcher {
            $0.readTimeout = .seconds(1)
            $0.totalTimeout = .milliseconds(800)
        }.fetch(server.url("/trickle"), cancellation: .init(), events: { _ in }))
        let elapsed = ContinuousClock.now - start
        guard case .timedOut(let which) = error else { return XCTFail("\(String(describing: error))") }
        XCTAssertTrue(which.hasPrefix("total timeout"), which)
        XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(750))
        XCTAssertLessThan(elapsed, .seconds(2))
        XCTAssertTrue(server.waitUntilIdle(timeout: .seconds(1)))
    }

    func testConnectTimeout() throws {
        // A listener whose one-place accept queue is already taken: Linux drops further SYNs,
        // so a connection attempt hangs until the client gives up.
        let listener = try FullListener()
        defer { listener.close() }
        let start = ContinuousClock.now
        let error = fetchError(try fetcher { $0.connectTimeout = .milliseconds(300) }.fetch(
            "http://127.0.0.1:\(listener.port)/", cancellation: .init(), events: { _ in }))
        guard case .timedOut(let which) = error else { return XCTFail("\(String(describing: error))") }
        XCTAssertTrue(which.hasPrefix("connect timeout"), which)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2))
    }

    // MARK: Unavailable sources

    func testErrorStatusesAreUnavailable() throws {
        let server = try serve([
            "/missing": TestHTTPServer.status(404, "Not Found"),
            "/broken": TestHTTPServer.status(500, "Internal Server Error"),
            "/redirect-nowhere": { _, connection in
                _ = connection.send(head: 302, reason: "Found", headers: [("Content-Length", "0")])
            },
        ])
        let fetcher = fetcher()
        XCTAssertEqual(fetchError(try fetcher.fetch(server.url("/missing"), cancellation: .init(), events: { _ in })),
                       .unavailable("HTTP 404 Not Found from \(server.url("/missing"))"))
        XCTAssertEqual(fetchError(try fetcher.fetch(server.url("/broken"), cancellation: .init(), events: { _ in })),
                       .unavailable("HTTP 500 Internal Server Error from \(server.url("/broken"))"))
        guard case .unavailable(let reason) = fetchError(try fetcher.fetch(server.url("/redirect-nowhere"), cancellation: .init(), events: { _ in }))
        else { return XCTFail() }
        XCTAssertTrue(reason.contains("without a Location"), reason)
    }

    func testBodyCutShortIsUnavailableNotTruncated() throws {
        let server = try serve(["/short": { _, connection in
            guard connection.send(head: 200, reason: "OK", headers: [("Content-Length", "1000")]) else { return }
            _ = connection.send(body: Self.body.prefix(500))
        }])
        let log = EventLog()
        guard case .unavailable = fetchError(try fetcher().fetch(server.url("/short"), cancellation: .init(), events: log.sink))
        else { return XCTFail() }
        XCTAssertFalse(log.events.contains { if case .finished = $0 { true } else { false } })
    }

    func testConnectionRefusedIsUnavailable() throws {
        let port = try FullListener.unusedPort()
        let start = ContinuousClock.now
        let error = fetchError(try fetcher().fetch("http://127.0.0.1:\(port)/", cancellation: .init(), events: { _ in }))
        guard case .unavailable(let reason) = error else { return XCTFail("\(String(describing: error))") }
        XCTAssertTrue(reason.contains("127.0.0.1"), reason)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(1), "no retries until the connect timeout")
    }

    func testHTTPSToAPlainServerIsUnavailable() throws {
        let server = try serve(["/": TestHTTPServer.ok([1])])
        let error = fetchError(try fetcher().fetch("https://127.0.0.1:\(server.port)/", cancellation: .init(), events: { _ in }))
        guard case .unavailable(let reason) = error else { return XCTFail("\(String(describing: error))") }
        XCTAssertTrue(reason.hasPrefix("https://127.0.0.1:\(server.port) (127.0.0.1): "), reason)
    }

    func testNameResolutionFailureIsUnavailable() {
        let lookup = NameLookup { name throws(FetchError) in throw .unavailable("cannot resolve \(name): no such host") }
        XCTAssertEqual(fetchError(try fetcher(lookup: lookup).fetch("http://nowhere.example/", cancellation: .init(), events: { _ in })),
                       .unavailable("cannot resolve nowhere.example: no such host"))
    }

    func testSystemLookupOfLocalhostIsRefusedByDefault() {
        let fetcher = URLFetcher()
        defer { fetcher.shutdown() }
        guard case .refused(let reason) = fetchError(try fetcher.fetch("http://localhost/", cancellation: .init(), events: { _ in }))
        else { return XCTFail() }
        XCTAssertTrue(reason.hasPrefix("localhost resolves to "), reason)
        XCTAssertTrue(reason.hasSuffix("a loopback address"), reason)
    }

    // MARK: Redirects

    func testRedirectsIntoPrivateSpaceAreRefused() throws {
        let lookup = NameLookup { name throws(FetchError) in
            name == "internal.example" ? [IPAddress("10.1.2.3")!] : [IPAddress("127.0.0.1")!]
        }
        let server = try serve([
            "/to-private": TestHTTPServer.redirect(to: "http://10.0.0.1/"),
            "/to-v6-loopback": TestHTTPServer.redirect(307, to: "http://[::1]:1/"),
            "/to-metadata": TestHTTPServer.redirect(301, to: "http://169.254.169.254/latest/meta-data/"),
            "/to-decimal": TestHTTPServer.redirect(308, to: "http://2130706434/"),
            "/to-name": TestHTTPServer.redirect(303, to: "http://internal.example/secret"),
            "/to-userinfo": TestHTTPServer.redirect(to: "http://user@127.0.0.1/"),
            "/to-file": TestHTTPServer.redirect(to: "file:///etc/passwd"),
        ])
        let fetcher = fetcher(lookup: lookup)
        let expected: [(String, FetchError)] = [
            ("/to-private", .refused("10.0.0.1 is a private-use address")),
            ("/to-v6-loopback", .refused("[::1] is a loopback address")),
            ("/to-metadata", .refused("169.254.169.254 is a cloud metadata address")),
            ("/to-decimal", .refused("127.0.0.2 is a loopback address")),
            ("/to-name", .refused("internal.example resolves to 10.1.2.3, a private-use address")),
            ("/to-userinfo", .badURL("userinfo (user@host) is not accepted")),
            ("/to-file", .badURL("scheme file is not http or https")),
        ]
        for (path, error) in expected {
            XCTAssertEqual(fetchError(try fetcher.fetch(server.url(path), cancellation: .init(), events: { _ in })), error, path)
        }
        // One request per fetch: the redirect's target was refused before any connection.
        XCTAssertEqual(server.requests.map(\.path), expected.map(\.0))
    }

    func testRedirectChainLongerThanTheLimitIsRefused() throws {
        var routes: [String: TestHTTPServer.Route] = [:]
        for hop in 0..<10 { routes["/hop/\(hop)"] = TestHTTPServer.redirect(to: "/hop/\(hop + 1)") }
        let server = try serve(routes)
        let error = fetchError(try fetcher { $0.maxRedirects = 3 }.fetch(server.url("/hop/0"), cancellation: .init(), events: { _ in }))
        XCTAssertEqual(error, .refused("more than 3 redirects (HTTP 302 from \(server.url("/hop/3")))"))
        XCTAssertEqual(server.requests.map(\.path), ["/hop/0", "/hop/1", "/hop/2", "/hop/3"])
    }

    func testRelativeRedirectIsFollowed() throws {
        let server = try serve([
            "/images/old/a.jpg": TestHTTPServer.redirect(301, to: "../new/a.jpg?v=2"),
            "/images/new/a.jpg": TestHTTPServer.ok(Self.body),
        ])
        let log = EventLog()
        let result = try fetcher().fetch(server.url("/images/old/a.jpg"), cancellation: .init(), events: log.sink)
        XCTAssertEqual(result.bytes, Self.body)
        XCTAssertEqual(result.head.finalURL.description, server.url("/images/new/a.jpg?v=2"))
        XCTAssertEqual(server.requests.map(\.target), ["/images/old/a.jpg", "/images/new/a.jpg?v=2"])
        XCTAssertEqual(log.events.filter { if case .started = $0 { true } else { false } }.count, 1, "started only for the final head")
    }

    func testNoRebinding() throws {
        // The first answer is checked and used; any later answer would point elsewhere.
        let answers = Lock<[String]>([])
        let lookup = NameLookup { name throws(FetchError) in
            let count = answers.withLock { $0.append(name); return $0.filter { $0 == name }.count }
            return [IPAddress(count == 1 ? "127.0.0.1" : "10.9.9.9")!]
        }
        let server = try serve([
            "/first": TestHTTPServer.redirect(to: "/second"),
            "/second": { request, connection in
                // Back to the same host by its absolute URL, then on to another name.
                TestHTTPServer.redirect(to: "http://images.example:\(connection.server.port)/third")(request, connection)
            },
            "/third": { request, connection in
                TestHTTPServer.redirect(to: "http://cdn.example:\(connection.server.port)/final")(request, connection)
            },
            "/final": TestHTTPServer.ok(Self.body),
        ])
        let result = try fetcher(lookup: lookup).fetch(
            "http://Images.Example:\(server.port)/first", cancellation: .init(), events: { _ in })
        XCTAssertEqual(result.bytes, Self.body)
        XCTAssertEqual(answers.withLock { $0 }, ["images.example", "cdn.example"], "one lookup per host per fetch")
        XCTAssertEqual(server.requests.map(\.path), ["/first", "/second", "/third", "/final"])
        XCTAssertEqual(server.requests.map { $0.header("Host") ?? "" }, [
            "images.example:\(server.port)", "images.example:\(server.port)", "images.example:\(server.port)",
            "cdn.example:\(server.port)",
        ])

        // A second fetch looks up again: the answer is per fetch, and this one is refused.
        XCTAssertEqual(fetchError(try fetcher(lookup: lookup).fetch("http://images.example:\(server.port)/first", cancellation: .init(), events: { _ in })),
                       .refused("images.example resolves to 10.9.9.9, a private-use address"))
    }

    func testFetcherShutdownIsIdempotent() {
        let fetcher = URLFetcher()
        fetcher.shutdown()
        fetcher.shutdown()
        XCTAssertEqual(fetchError(try fetcher.fetch("http://example.com/", cancellation: .init(), events: { _ in })),
                       .unavailable("the fetcher has been shut down"))
    }

    // MARK: Helpers

    func fetcher(lookup: NameLookup = .system, _ configure: (inout URLSourcePolicy) -> Void = { _ in }) -> URLFetcher {
        var policy = URLSourcePolicy()
        policy.addresses = AddressPolicy(allowed: [IPNetwork("127.0.0.1/32")!])
        policy.connectTimeout = .seconds(2)
        policy.readTimeout = .seconds(5)
        policy.totalTimeout = .seconds(10)
        configure(&policy)
        let fetcher = URLFetcher(policy: policy, lookup: lookup)
        addTeardownBlock { fetcher.shutdown() }
        return fetcher
    }

    func serve(_ routes: [String: TestHTTPServer.Route]) throws -> TestHTTPServer {
        let server = try TestHTTPServer(routes: routes)
        addTeardownBlock { server.stop() }
        return server
    }

    func fetchError(_ body: @autoclosure () throws(FetchError) -> FetchedBody) -> FetchError? {
        do {
            _ = try body()
            return nil
        } catch {
            return error
        }
    }
}

/// Events with the time they arrived.
final class EventLog: Sendable {
    private let state = Lock<[(ContinuousClock.Instant, FetchEvent)]>([])

    var sink: @Sendable (FetchEvent) -> Void {
        { [state] event in state.withLock { $0.append((.now, event)) } }
    }

    var entries: [(ContinuousClock.Instant, FetchEvent)] { state.withLock { $0 } }
    var events: [FetchEvent] { entries.map(\.1) }
}

/// A listening socket that accepts nothing and whose accept queue (one place) is taken.
struct FullListener {
    let port: Int
    private let sockets: [Int32]

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard listener >= 0, bound == 0, listen(listener, 0) == 0 else { throw SocketError(errno: errno, "listen") }
        port = TestHTTPServer.localPort(listener)
        let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var target = sockaddr_in.loopback(port: UInt16(port))
        let connected = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw SocketError(errno: errno, "connect") }
        sockets = [listener, filler]
    }

    func close() {
        for fd in sockets { _ = Glibc.close(fd) }
    }

    /// A port on 127.0.0.1 that nothing listens on (bound, then released).
    static func unusedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { _ = Glibc.close(fd) }
        var address = sockaddr_in.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw SocketError(errno: errno, "bind") }
        return TestHTTPServer.localPort(fd)
    }
}
