import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A scripted HTTP/1.1 server on 127.0.0.1 (an ephemeral port) for the tests of URL sources.
///
/// Each connection gets a thread that reads one request head and hands it to the route
/// named by its path; routes write raw bytes, so a test can send exactly what it needs:
/// a trickle, a head that never ends, a stall. The server counts the body bytes the kernel
/// accepted and the connections the peer closed under it, so a test can show that the client
/// stopped a download, not only that it stopped reading. Send buffers are kept small so the
/// count tracks what the client took in.
public final class TestHTTPServer: Sendable {
    public struct Request: Sendable {
        public var method: String
        public var target: String
        public var headers: [(name: String, value: String)]

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }

        public var path: String { String(target.prefix { $0 != "?" }) }
    }

    public typealias Route = @Sendable (Request, Connection) -> Void

    private struct State {
        var requests: [Request] = []
        var bodyBytesSent = 0
        var peerClosures = 0
        var activeConnections = 0
        var stopping = false
    }

    public let port: Int
    private let listener: Int32
    private let routes: [String: Route]
    private let state = Lock(State())
    private let acceptLoopEnded = DispatchSemaphore(value: 0)

    public init(routes: [String: Route]) throws {
        self.routes = routes
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SocketError(errno: errno, "socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            let error = SocketError(errno: errno, "bind/listen")
            close(fd)
            throw error
        }
        listener = fd
        port = Self.localPort(listener)
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "test-http-accept"
        thread.start()
    }

    /// Stops accepting, waits up to `timeout` for the open connections' routes to end (they
    /// end when the client goes away), and closes the listening socket.
    public func stop(timeout: Duration = .seconds(3)) {
        state.withLock { $0.stopping = true }
        acceptLoopEnded.wait()
        close(listener)
        _ = waitUntilIdle(timeout: timeout)
    }

    /// Waits until no route is running; false if one still is after `timeout`.
    public func waitUntilIdle(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if state.withLock({ $0.activeConnections == 0 }) { return true }
            usleep(5_000)
        }
        return false
    }

    public var requests: [Request] { state.withLock { $0.requests } }
    public var bodyBytesSent: Int { state.withLock { $0.bodyBytesSent } }
    /// Connections on which a write failed or a read saw the end because the client closed.
    public var peerClosures: Int { state.withLock { $0.peerClosures } }
    public var isStopping: Bool { state.withLock { $0.stopping } }

    public func url(_ path: String, host: String = "127.0.0.1") -> String {
        "http://\(host):\(port)\(path)"
    }

    private func acceptLoop() {
        defer { acceptLoopEnded.signal() }
        while !isStopping {
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 20) > 0 else { continue }
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { continue }
            var sendBuffer: Int32 = 8192
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sendBuffer, socklen_t(MemoryLayout<Int32>.size))
            state.withLock { $0.activeConnections += 1 }
            let thread = Thread { [self] in
                serve(Connection(fd: fd, server: self))
                close(fd)
                state.withLock { $0.activeConnections -= 1 }
            }
            thread.name = "test-http-connection"
            thread.start()
        }
    }

    private func serve(_ connection: Connection) {
        guard let request = connection.readRequestHead() else { return }
        state.withLock { $0.requests.append(request) }
        if let route = routes[request.target] ?? routes[request.path] {
            route(request, connection)
        } else {
            _ = connection.send(head: 404, headers: [("Content-Length", "0")])
        }
    }

    fileprivate func countBody(_ count: Int) { state.withLock { $0.bodyBytesSent += count } }
    fileprivate func countPeerClosure() { state.withLock { $0.peerClosures += 1 } }

    public static func localPort(_ fd: Int32) -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// One accepted connection, as a route sees it. Every write reports whether the client was
/// still there; a route stops at the first `false`.
public final class Connection: Sendable {
    public let fd: Int32
    public let server: TestHTTPServer

    init(fd: Int32, server: TestHTTPServer) {
        self.fd = fd
        self.server = server
    }

    fileprivate func readRequestHead() -> TestHTTPServer.Request? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        let deadline = ContinuousClock.now + .seconds(5)
        while received.count < 65536, ContinuousClock.now < deadline {
            // A TLS ClientHello on this plain port: answer in plain HTTP, as servers do.
            if received.first == 0x16 {
                _ = send(Array("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n".utf8))
                return nil
            }
            if let range = received.firstRange(of: end) {
                let text = String(decoding: received[..<range.lowerBound], as: UTF8.self)
                var lines = text.components(separatedBy: "\r\n")
                let requestLine = lines.removeFirst().split(separator: " ")
                guard requestLine.count == 3 else { return nil }
                let headers = lines.compactMap { line -> (name: String, value: String)? in
                    guard let colon = line.firstIndex(of: ":") else { return nil }
                    return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
                }
                return .init(method: String(requestLine[0]), target: String(requestLine[1]), headers: headers)
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) >= 0 else { return nil }
            if poller.revents == 0 { continue }
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { return nil }
            received += buffer[..<count]
        }
        return nil
    }

    public func send(_ bytes: some Collection<UInt8>) -> Bool {
        let array = Array(bytes)
        var offset = 0
        while offset < array.count {
            let sent = array[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 {
                if errno == EINTR { continue }
                server.countPeerClosure()
                return false
            }
            offset += sent
        }
        return true
    }

    public func send(head status: Int, reason: String = "Status", headers: [(String, String)]) -> Bool {
        var text = "HTTP/1.1 \(status) \(reason)\r\n"
        for (name, value) in headers + [("Connection", "close")] { text += "\(name): \(value)\r\n" }
        return send(Array((text + "\r\n").utf8))
    }

    /// Body bytes: counted by the server once the kernel has taken them.
    public func send(body bytes: some Collection<UInt8>) -> Bool {
        guard send(bytes) else { return false }
        server.countBody(bytes.count)
        return true
    }

    public func send(chunk bytes: some Collection<UInt8>) -> Bool {
        send(Array((String(bytes.count, radix: 16) + "\r\n").utf8)) && send(body: bytes) && send(Array("\r\n".utf8))
    }

    /// Blocks until the client closes the connection (true) or `timeout` passes (false),
    /// discarding whatever it sends.
    public func waitForPeerClose(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 1024)
        while ContinuousClock.now < deadline, !server.isStopping {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 20) >= 0 else { return false }
            if poller.revents == 0 { continue }
            if recv(fd, &buffer, buffer.count, 0) <= 0 {
                server.countPeerClosure()
                return true
            }
        }
        return false
    }
}

extension TestHTTPServer {
    /// 200 with `body`, declared by Content-Length or sent chunked, in `piece`-sized writes
    /// with `pause` between them.
    public static func ok(
        _ body: [UInt8], headers: [(String, String)] = [], chunked: Bool = false,
        piece: Int = 16384, pause: Duration = .zero
    ) -> Route {
        { _, connection in
            let framing = chunked ? ("Transfer-Encoding", "chunked") : ("Content-Length", String(body.count))
            guard connection.send(head: 200, reason: "OK", headers: headers + [framing]) else { return }
            var offset = 0
            while offset < body.count {
                let slice = body[offset..<min(offset + piece, body.count)]
                guard chunked ? connection.send(chunk: slice) : connection.send(body: slice) else { return }
                offset += slice.count
                if pause > .zero { sleepFor(pause) }
                if connection.server.isStopping { return }
            }
            if chunked { _ = connection.send(Array("0\r\n\r\n".utf8)) }
            _ = connection.waitForPeerClose(timeout: .seconds(2))
        }
    }

    public static func status(_ code: Int, _ reason: String) -> Route {
        { _, connection in
            _ = connection.send(head: code, reason: reason, headers: [("Content-Length", "0")])
        }
    }

    public static func redirect(_ code: Int = 302, to location: String) -> Route {
        { _, connection in
            _ = connection.send(head: code, reason: "Redirect", headers: [("Location", location), ("Content-Length", "0")])
        }
    }

    /// A complete head declaring `contentLength` bytes, then silence until the client leaves.
    public static func stallAfterHead(contentLength: Int = 1000) -> Route {
        { _, connection in
            guard connection.send(head: 200, reason: "OK", headers: [("Content-Length", String(contentLength))]) else { return }
            _ = connection.waitForPeerClose(timeout: .seconds(10))
        }
    }

    /// The start of a head that never ends.
    public static func endlessHead() -> Route {
        { _, connection in
            guard connection.send(Array("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n".utf8)) else { return }
            _ = connection.waitForPeerClose(timeout: .seconds(10))
        }
    }
}

public func sleepFor(_ duration: Duration) {
    let (seconds, attoseconds) = duration.components
    usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
}

extension sockaddr_in {
    public static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }
}

public struct SocketError: Error, CustomStringConvertible {
    var errno: Int32
    var call: String

    public init(errno: Int32, _ call: String) {
        self.errno = errno
        self.call = call
    }

    public var description: String { "\(call): \(String(cString: strerror(errno)))" }
}
