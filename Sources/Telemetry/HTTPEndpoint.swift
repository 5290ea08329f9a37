#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Locking
import Synchronization

/// A deliberately small HTTP/1.1 server for a process's operational endpoints (metrics and
/// health probes), never for jobs: one thread, one connection at a time, `GET`/`HEAD` only,
/// a request line and headers of at most 8 KiB read within two seconds, and every response
/// closes its connection. Scrapers and probes ask a few times a minute; nothing here needs
/// more, and a client that stalls costs at most two seconds of another's wait.
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

    private static let maxRequestBytes = 8 << 10
    private static let ioTimeoutSeconds = 2

    /// Binds `address` (`HOST:PORT`, `[IPv6]:PORT`, or `*:PORT` for every interface) and
    /// listens; `start()` begins serving. Errors name the address.
    public init(address: String, handler: @escaping Handler) throws(TelemetryError) {
        let bound = try Self.openSocket(for: address, passive: true, doing: "listen on") { fd, info in
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            return bind(fd, info.ai_addr, info.ai_addrlen) == 0 && listen(fd, 16) == 0
        }
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

    /// Serves on a thread of its own until `stop()`.
    public func start() {
        precondition(!started.exchange(true, ordering: .relaxed), "HTTPEndpoint.start() called twice")
        let serving = Thread { [self] in
            serve()
            finished.signal()
        }
        serving.name = "enlarger-http"
        running.withLock { $0 = true }
        serving.start()
    }

    /// Stops serving and waits for the thread (a request being answered finishes first).
    /// Idempotent; safe from any thread but the serving one.
    public func stop() {
        guard running.withLock({ running in defer { running = false }; return running }) else { return }
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
        finished.wait()
    }

    private func serve() {
        var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
        while true {
            let ready = poll(&fds, nfds_t(fds.count), -1)
            if ready < 0 { if errno == EINTR { continue } else { return } }
            if fds[1].revents != 0 { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            answer(connection)
            close(connection)
        }
    }

    private func answer(_ connection: Int32) {
        var timeout = timeval(tv_sec: Self.ioTimeoutSeconds, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let deadline = ContinuousClock.now + .seconds(Self.ioTimeoutSeconds)
        var request: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 2048)
        while !Self.headersComplete(request) {
            guard request.count < Self.maxRequestBytes, ContinuousClock.now < deadline else {
                return reply(Response(status: 431, text: "request too large or too slow\n"), head: false, on: connection)
            }
            let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return }
            request += chunk[..<count]
        }
        let line = String(decoding: request.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return reply(Response(status: 400, text: "bad request\n"), head: false, on: connection)
        }
        let method = parts[0]
        guard method == "GET" || method == "HEAD" else {
            return reply(Response(status: 405, text: "only GET and HEAD\n"), head: false, on: connection)
        }
        let path = String(parts[1].prefix { $0 != "?" })
        reply(handler(path), head: method == "HEAD", on: connection)
    }

    private func reply(_ response: Response, head: Bool, on connection: Int32) {
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
            guard sent > 0 else { return }
            offset += sent
        }
        shutdown(connection, Int32(SHUT_WR))
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

/// A telemetry endpoint could not be set up; the message names the address and the cause.
public struct TelemetryError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
