#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// A minimal HTTP/1.1 `GET` for the operational endpoints (`enlarger health`, tests): one
/// request, `Connection: close`, the whole response read within `timeout`.
public enum HTTPGet {
    public struct Response: Sendable {
        public var status: Int
        public var headers: [String: String]
        public var body: String
    }

    /// - Throws: `TelemetryError` naming `address` when it cannot connect, times out, or the
    ///   response is not HTTP.
    public static func fetch(_ address: String, path: String, timeout: Duration = .seconds(2)) throws(TelemetryError) -> Response {
        let (host, port) = try HTTPEndpoint.split(address)
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host ?? "127.0.0.1", port, &hints, &list)
        guard status == 0, let first = list else {
            throw TelemetryError("cannot resolve \(address): \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(list) }
        let (seconds, attoseconds) = timeout.components
        var limit = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        var lastError: Int32 = ECONNREFUSED
        var connection: Int32 = -1
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let info = candidate, connection < 0 {
            candidate = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { lastError = errno; continue }
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            if connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 {
                connection = fd
            } else {
                lastError = errno
                close(fd)
            }
        }
        guard connection >= 0 else {
            throw TelemetryError("cannot connect to \(address): \(String(cString: strerror(lastError)))")
        }
        defer { close(connection) }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(address)\r\nConnection: close\r\n\r\n".utf8)
        var offset = 0
        while offset < request.count {
            let sent = request[offset...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { throw TelemetryError("\(address): sending failed: \(String(cString: strerror(errno)))") }
            offset += sent
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            if count == 0 { break }
            guard count > 0 else {
                let reason = errno == EAGAIN || errno == EWOULDBLOCK ? "no answer within \(timeout)" : String(cString: strerror(errno))
                throw TelemetryError("\(address): \(reason)")
            }
            bytes += chunk[..<count]
            guard bytes.count <= 64 << 20 else { throw TelemetryError("\(address): response too large") }
        }
        let text = String(decoding: bytes, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw TelemetryError("\(address): not an HTTP response") }
        let lines = text[..<split.lowerBound].split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = lines.first.map(String.init) ?? ""
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let code = Int(parts[1]) else {
            throw TelemetryError("\(address): not an HTTP response")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Response(status: code, headers: headers, body: String(text[split.upperBound...]))
    }
}
