#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Locking
import Synchronization

/// A deliberately small HTTP/1.1 server for a process's operational endpoints (metrics and
/// health probes), never for jobs: `GET`/`HEAD` only, a request line and headers of at most
/// 8 KiB, and every response closes its connection.
///
/// Nobody can hold it up. One thread polls every connection at once (non-blocking sockets):
/// a connection has `requestTimeout` (1 s) to send its whole request head, or it is closed;
/// at most `maxConnections` (128) wait at once, and a new one beyond that closes the oldest,
/// so idle or trickling (slowloris) connections neither delay a probe nor exhaust file
/// descriptors or threads. Complete requests go to `handlerCount` (4) threads, which may
/// block in the handler (a probe asks the service loop, up to a second) and then write the
/// response within `writeTimeout`; when all are busy and `maxQueued` requests already wait,
/// a request is answered 503 at once.
public final class HTTPEndpoint: Sendable {
    public struct Response: Sendable {
        public var status: Int
        public var contentType: String
        public var body: [UInt8]

        public init(status: Int, contentType: String = "text/plain; charset=utf-8", body: [UInt8]) {
            self.status = status
            self.contentType = contentType
            self.body = body
        }

        public init(status: Int, text: String) {
            self.init(status: status, body: Array(text.utf8))
        }
    }

    public typealias Handler = @Sendable (_ path: String) -> Response

    /// The address actually bound, `HOST:PORT` (`[HOST]:PORT` for IPv6), with a requested
    /// port 0 resolved.
    public let boundAddress: String
    private let listener: Int32
    private let stopPipe: (read: Int32, write: Int32)
    private let handler: Handler
    private let running = Lock<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let started = Atomic<Bool>(false)
    private let requests = RequestQueue()
    private let handlersExited = DispatchGroup()

    static let maxRequestBytes = 8 << 10
    /// How long a connection may take to send its request head.
    static let requestTimeout = Duration.seconds(1)
    /// How long writing a response may take.
    static let writeTimeout = Duration.seconds(1)
    /// Connections waiting for their request head at once.
    static let maxConnections = 128
    static let handlerCount = 4
    static let maxQueued = 32
    static let acceptsPerTurn = 32

    /// Binds `address` (`HOST:PORT`, `[IPv6]:PORT`, or `*:PORT` for every interface) and
    /// listens; `start()` begins serving. Errors name the address.
    public init(address: String, handler: @escaping Handler) throws(TelemetryError) {
        let bound = try Self.openSocket(for: address, passive: true, doing: "listen on") { fd, info in
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            return bind(fd, info.ai_addr, info.ai_addrlen) == 0 && listen(fd, 256) == 0
        }
        _ = fcntl(bound, F_SETFL, fcntl(bound, F_GETFL) | O_NONBLOCK)
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            close(bound)
            throw TelemetryError("cannot create a pipe: \(String(cString: strerror(errno)))")
        }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        listener = bound
        stopPipe = (ends[0], ends[1])
        self.handler = handler
        boundAddress = Self.localAddress(of: bound) ?? address
    }

    deinit {
        close(listener)
        close(stopPipe.read)
        close(stopPipe.write)
    }

    /// Serves on threads of its own until `stop()`.
    public func start() {
        precondition(!started.exchange(true, ordering: .relaxed), "HTTPEndpoint.start() called twice")
        for index in 0..<Self.handlerCount {
            handlersExited.enter()
            let thread = Thread { [self] in
                while let request = requests.pop() { respond(to: request) }
                handlersExited.leave()
            }
            thread.name = "enlarger-http-\(index)"
            thread.start()
        }
        let serving = Thread { [self] in
            serve()
            requests.close()
            handlersExited.wait()
            finished.signal()
        }
        serving.name = "enlarger-http"
        running.withLock { $0 = true }
        serving.start()
    }

    /// Stops serving and waits for the threads (requests being answered finish first).
    /// Idempotent; safe from any thread but the serving ones.
    public func stop() {
        guard running.withLock({ running in defer { running = false }; return running }) else { return }
        var byte: UInt8 = 1
        _ = Glibc.write(stopPipe.write, &byte, 1)
        finished.wait()
    }

    // MARK: Reading requests

    /// A connection whose request head is not complete yet.
    private struct Pending {
        let fd: Int32
        let deadline: ContinuousClock.Instant
        var bytes: [UInt8] = []
    }

    private func serve() {
        var pending: [Pending] = []
        defer { for connection in pending { close(connection.fd) } }
        var chunk = [UInt8](repeating: 0, count: 2048)
        while true {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
            fds += pending.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            let now = ContinuousClock.now
            let wait = pending.map { $0.deadline - now }.min().map { max(0, Self.milliseconds($0) + 1) } ?? -1
            let ready = poll(&fds, nfds_t(fds.count), Int32(clamping: wait))
            if ready < 0 { if errno == EINTR { continue } else { return } }
            if fds[1].revents != 0 { return }

            // Read what arrived; a complete head goes to the handlers, an error or EOF closes.
            var keep: [Pending] = []
            for (index, var connection) in pending.enumerated() {
                let events = fds[index + 2].revents
                var open = true
                if events != 0 {
                    open = readAvailable(&connection, into: &chunk)
                }
                if open, Self.headersComplete(connection.bytes) {
                    dispatch(connection)
                    open = false
                } else if open, connection.bytes.count >= Self.maxRequestBytes {
                    Self.replyNow(Response(status: 431, text: "request too large\n"), on: connection.fd)
                    open = false
                } else if !open {
                    close(connection.fd)
                }
                if open {
                    if ContinuousClock.now >= connection.deadline {
                        // Too slow to ask: closed without a word (no one to tell who listens).
                        close(connection.fd)
                    } else {
                        keep.append(connection)
                    }
                }
            }
            pending = keep

            if fds[0].revents & Int16(POLLIN) != 0 { acceptAll(&pending) }
        }
    }

    /// Reads what the socket holds; false when the peer closed or failed.
    private func readAvailable(_ connection: inout Pending, into chunk: inout [UInt8]) -> Bool {
        while connection.bytes.count < Self.maxRequestBytes {
            let count = chunk.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                connection.bytes += chunk[..<count]
                continue
            }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return true }
            return false
        }
        return true
    }

    /// Accepts waiting connections, at most `acceptsPerTurn` before the connections already
    /// open are read again; beyond `maxConnections`, the oldest goes. A probe that has just
    /// connected is read before a flood of newer connections can push it out.
    private func acceptAll(_ pending: inout [Pending]) {
        for _ in 0..<Self.acceptsPerTurn {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return  // EAGAIN: none left; EMFILE and the like: try again next turn
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            if pending.count >= Self.maxConnections {
                close(pending.removeFirst().fd)
            }
            pending.append(Pending(fd: fd, deadline: ContinuousClock.now + Self.requestTimeout))
        }
    }

    /// A complete request head: answered here when it is malformed, else queued for a handler.
    private func dispatch(_ connection: Pending) {
        let line = String(decoding: connection.bytes.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return Self.replyNow(Response(status: 400, text: "bad request\n"), on: connection.fd)
        }
        let method = parts[0]
        guard method == "GET" || method == "HEAD" else {
            return Self.replyNow(Response(status: 405, text: "only GET and HEAD\n"), on: connection.fd)
        }
        let request = Request(fd: connection.fd, path: String(parts[1].prefix { $0 != "?" }), head: method == "HEAD")
        guard requests.push(request, limit: Self.maxQueued) else {
            return Self.replyNow(Response(status: 503, text: "busy\n"), on: connection.fd)
        }
    }

    // MARK: Answering

    struct Request: Sendable {
        let fd: Int32
        let path: String
        let head: Bool
    }

    private func respond(to request: Request) {
        Self.write(handler(request.path), head: request.head, on: request.fd,
                   deadline: ContinuousClock.now + Self.writeTimeout)
        close(request.fd)
    }

    /// A short answer from the polling thread (an error): whatever the socket takes now.
    private static func replyNow(_ response: Response, on fd: Int32) {
        write(response, head: false, on: fd, deadline: .now)
        close(fd)
    }

    private static func write(_ response: Response, head: Bool, on connection: Int32, deadline: ContinuousClock.Instant) {
        let header = "HTTP/1.1 \(response.status) \(Self.reason(response.status))\r\n"
            + "Content-Type: \(response.contentType)\r\n"
            + "Content-Length: \(response.body.count)\r\n"
            + "Cache-Control: no-store\r\n"
            + "Connection: close\r\n\r\n"
        var bytes = Array(header.utf8)
        if !head { bytes += response.body }
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent > 0 {
                offset += sent
                continue
            }
            guard sent < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else { return }
            let left = milliseconds(deadline - .now)
            guard left > 0 else { return }
            var fd = pollfd(fd: connection, events: Int16(POLLOUT), revents: 0)
            _ = poll(&fd, 1, Int32(clamping: left))
        }
        shutdown(connection, Int32(SHUT_WR))
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }

    private static func headersComplete(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 4 else { return false }
        let end: [UInt8] = [13, 10, 13, 10]
        for start in 0...(bytes.count - 4) where bytes[start..<start + 4].elementsEqual(end) { return true }
        return false
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 431: "Request Header Fields Too Large"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }

    /// A stream socket for `address`: each address it resolves to is tried in turn with `use`
    /// (bind or connect) until one succeeds. A failure names the address, what was being
    /// done and the last error.
    static func openSocket(for address: String, passive: Bool, doing what: String,
                       _ use: (Int32, addrinfo) -> Bool) throws(TelemetryError) -> Int32 {
        let (host, port) = try split(address)
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = (passive ? AI_PASSIVE : 0) | AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        // A client of `*:PORT` means this host.
        let status = getaddrinfo(passive ? host : host ?? "127.0.0.1", port, &hints, &list)
        guard status == 0 else {
            throw TelemetryError("cannot resolve \(address): \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(list) }
        var lastError = ECONNREFUSED
        var candidate = list
        while let info = candidate {
            candidate = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { lastError = errno; continue }
            if use(fd, info.pointee) { return fd }
            lastError = errno
            close(fd)
        }
        throw TelemetryError("cannot \(what) \(address): \(String(cString: strerror(lastError)))")
    }

    /// `HOST:PORT` → (host or nil for every interface, port); throws a message naming the
    /// accepted forms.
    public static func split(_ address: String) throws(TelemetryError) -> (host: String?, port: String) {
        let problem = TelemetryError(
            "\(address) is not HOST:PORT (e.g. 127.0.0.1:9570, 0.0.0.0:9570, [::1]:9570 or *:9570)")
        guard let colon = address.lastIndex(of: ":") else { throw problem }
        var host = String(address[..<colon])
        let port = String(address[address.index(after: colon)...])
        guard let number = Int(port), (0...65535).contains(number) else { throw problem }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.contains(":") || address.hasPrefix("[") else { throw problem }
        if host.isEmpty { throw problem }
        return (host == "*" ? nil : host, port)
    }

    private static func localAddress(of fd: Int32) -> String? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { return nil }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var service = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        let status = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &host, socklen_t(host.count), &service, socklen_t(service.count),
                            NI_NUMERICHOST | NI_NUMERICSERV)
            }
        }
        guard status == 0 else { return nil }
        func text(_ chars: [CChar]) -> String {
            String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        let name = text(host), port = text(service)
        return name.contains(":") ? "[\(name)]:\(port)" : "\(name):\(port)"
    }
}

/// Complete requests waiting for a handler thread: a bounded FIFO.
private final class RequestQueue: Sendable {
    private struct State {
        var requests: [HTTPEndpoint.Request] = []
        var closed = false
    }

    private let state = Lock(State())
    private let available = DispatchSemaphore(value: 0)

    /// False when `limit` requests already wait (or the queue is closed).
    func push(_ request: HTTPEndpoint.Request, limit: Int) -> Bool {
        let queued = state.withLock { state in
            guard !state.closed, state.requests.count < limit else { return false }
            state.requests.append(request)
            return true
        }
        if queued { available.signal() }
        return queued
    }

    /// The next request, or nil once closed and empty.
    func pop() -> HTTPEndpoint.Request? {
        while true {
            available.wait()
            let next = state.withLock { state -> (HTTPEndpoint.Request?, Bool) in
                if !state.requests.isEmpty { return (state.requests.removeFirst(), false) }
                return (nil, state.closed)
            }
            if let request = next.0 { return request }
            if next.1 {
                available.signal()  // wake the next handler too
                return nil
            }
        }
    }

    /// Lets the handlers finish what is queued, then exit.
    func close() {
        state.withLock { $0.closed = true }
        available.signal()
    }
}

/// A telemetry endpoint could not be set up; the message names the address and the cause.
public struct TelemetryError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
