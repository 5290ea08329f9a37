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
        let (seconds, attoseconds) = timeout.components
        var limit = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        let connection = try HTTPEndpoint.openSocket(for: address, passive: false, doing: "connect to") { fd, info in
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            return connect(fd, info.ai_addr, info.ai_addrlen) == 0
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
