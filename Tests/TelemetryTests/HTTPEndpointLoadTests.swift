import Foundation
import Glibc
import Locking
@testable import Telemetry
import XCTest

/// Probes nobody can block: idle and trickling (slowloris) connections neither delay
/// `/healthz` nor hold the server's descriptors for long.
final class HTTPEndpointLoadTests: XCTestCase {
    func testHealthzAnswersQuicklyBeside200IdleAnd20SlowlorisConnections() throws {
        let endpoint = try HTTPEndpoint(address: "127.0.0.1:0") { path in
            .init(status: path == "/healthz" ? 200 : 404, text: "ok\n")
        }
        endpoint.start()
        defer { endpoint.stop() }
        let attack = Attack(address: endpoint.boundAddress, idle: 200, slowloris: 20)
        attack.start()
        defer { attack.stop() }
        XCTAssertTrue(attack.waitUntilOpened(220, timeout: .seconds(10)), "opened \(attack.opened)")

        let latencies = try HTTPEndpointLoadTests.measureHealthz(endpoint.boundAddress, times: 30)
        let median = latencies.sorted()[latencies.count / 2]
        print("/healthz beside 200 idle + 20 slowloris connections: median \(median), max \(latencies.max()!), "
              + "attack connections opened \(attack.opened)")
        // The promise is 100 ms; the bound here is generous for a shared, noisy machine.
        XCTAssertLessThan(median, .milliseconds(100))
        XCTAssertLessThan(latencies.max()!, .seconds(3))
        XCTAssertGreaterThan(attack.opened, 220, "the server closed attack connections, which were opened again")
    }

    func testAConnectionThatSendsNothingIsClosedWithinItsDeadline() throws {
        let endpoint = try HTTPEndpoint(address: "127.0.0.1:0") { _ in .init(status: 200, text: "ok\n") }
        endpoint.start()
        defer { endpoint.stop() }
        let fd = try Self.connect(endpoint.boundAddress)
        defer { close(fd) }
        let start = ContinuousClock.now
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        XCTAssertEqual(recv(fd, &byte, 1, 0), 0, "closed by the server")
        let took = ContinuousClock.now - start
        XCTAssertGreaterThanOrEqual(took, .milliseconds(900))
        XCTAssertLessThan(took, .seconds(3))
    }

    func testConnectionsBeyondTheLimitCloseTheOldest() throws {
        let endpoint = try HTTPEndpoint(address: "127.0.0.1:0") { _ in .init(status: 200, text: "ok\n") }
        endpoint.start()
        defer { endpoint.stop() }
        let count = HTTPEndpoint.maxConnections + 40
        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        for _ in 0..<count { fds.append(try Self.connect(endpoint.boundAddress)) }
        // Before the 1 s deadline, only evictions can have closed any.
        Thread.sleep(forTimeInterval: 0.4)
        var closed: [Int] = []
        for (index, fd) in fds.enumerated() {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 0) == 1 {
                var byte: UInt8 = 0
                if recv(fd, &byte, 1, Int32(MSG_DONTWAIT)) == 0 { closed.append(index) }
            }
        }
        XCTAssertEqual(closed.count, 40, "the server keeps at most \(HTTPEndpoint.maxConnections) waiting")
        XCTAssertEqual(closed, Array(0..<40), "the oldest went first")
        XCTAssertEqual(try HTTPGet.fetch(endpoint.boundAddress, path: "/", timeout: .seconds(2)).status, 200)
    }

    // MARK: Helpers

    static func measureHealthz(_ address: String, times: Int) throws -> [Duration] {
        var latencies: [Duration] = []
        for _ in 0..<times {
            let start = ContinuousClock.now
            let response = try HTTPGet.fetch(address, path: "/healthz", timeout: .seconds(5))
            latencies.append(ContinuousClock.now - start)
            XCTAssertEqual(response.status, 200)
            Thread.sleep(forTimeInterval: 0.02)
        }
        return latencies
    }

    static func connect(_ address: String) throws -> Int32 {
        let (host, port) = try HTTPEndpoint.split(address)
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, port, &hints, &list) == 0, let info = list else { throw TelemetryError("resolve") }
        defer { freeaddrinfo(list) }
        let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TelemetryError("socket: \(errno)") }
        guard Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            close(fd)
            throw TelemetryError("connect: \(errno)")
        }
        return fd
    }
}

/// Keeps `idle` silent connections and `slowloris` connections that send a request head one
/// byte every 100 ms open against an address, opening each again when the server closes it.
final class Attack: Sendable {
    let address: String
    let idle: Int
    let slowloris: Int
    private let state = Lock((opened: 0, stopped: false))
    private let done = DispatchSemaphore(value: 0)

    init(address: String, idle: Int, slowloris: Int) {
        self.address = address
        self.idle = idle
        self.slowloris = slowloris
    }

    var opened: Int { state.withLock { $0.opened } }

    func start() {
        let thread = Thread { [self] in
            run()
            done.signal()
        }
        thread.start()
    }

    func stop() {
        state.withLock { $0.stopped = true }
        done.wait()
    }

    func waitUntilOpened(_ count: Int, timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while opened < count, ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        return opened >= count
    }

    private func open() -> Int32? {
        guard let fd = try? HTTPEndpointLoadTests.connect(address) else { return nil }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        state.withLock { $0.opened += 1 }
        return fd
    }

    private func run() {
        var sockets: [(fd: Int32, trickles: Bool, sent: Int)] = []
        defer { sockets.forEach { close($0.fd) } }
        let head = Array("GET /healthz HTTP/1.1\r\nX-Slow: ".utf8)
        var nextTrickle = ContinuousClock.now
        while !state.withLock({ $0.stopped }) {
            // Open what is missing.
            let trickling = sockets.filter(\.trickles).count
            while sockets.count - trickling < idle, let fd = open() { sockets.append((fd, false, 0)) }
            while sockets.filter(\.trickles).count < slowloris, let fd = open() { sockets.append((fd, true, 0)) }
            // Drop those the server closed.
            var fds = sockets.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            _ = poll(&fds, nfds_t(fds.count), 20)
            var kept: [(fd: Int32, trickles: Bool, sent: Int)] = []
            for (index, socket) in sockets.enumerated() {
                var byte: UInt8 = 0
                if fds[index].revents != 0, recv(socket.fd, &byte, 1, 0) <= 0 {
                    close(socket.fd)
                } else {
                    kept.append(socket)
                }
            }
            sockets = kept
            // One more byte of the endless head on each slowloris connection, every 100 ms.
            if ContinuousClock.now >= nextTrickle {
                nextTrickle = ContinuousClock.now + .milliseconds(100)
                for index in sockets.indices where sockets[index].trickles {
                    var byte = sockets[index].sent < head.count ? head[sockets[index].sent] : UInt8(ascii: "a")
                    _ = send(sockets[index].fd, &byte, 1, Int32(MSG_NOSIGNAL))
                    sockets[index].sent += 1
                }
            }
        }
    }
}
