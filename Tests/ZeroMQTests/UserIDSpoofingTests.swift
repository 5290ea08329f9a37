#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import XCTest

@testable import ZeroMQ
import TestSupport

/// A peer that speaks ZMTP by hand can put any property, "User-Id" included, in its
/// handshake. On a socket with a ZAP domain the handler's user id must win.
final class UserIDSpoofingTests: XCTestCase {
    func testANullPeerCannotClaimAnotherUserID() throws {
        let context = try Context()
        let handler = try ZAPHandler(context: context, policy: AccessPolicy(domains: ["local": .init(nullUserID: "local")]))
        let server = try Socket(context, .router)
        try server.setZAPDomain("local")
        try server.bind("tcp://127.0.0.1:*")
        let endpoint = try server.lastEndpoint()
        let port = try XCTUnwrap(UInt16(endpoint.split(separator: ":").last ?? ""))

        let claimed = "curve:" + (try CurveKeyPair.generate().publicKey.z85)
        let peer = try RawZMTPPeer(port: port)
        defer { peer.close() }
        try peer.send(greeting() + ready(properties: [("Socket-Type", "DEALER"), ("User-Id", claimed)]))

        var poller = Poller()
        let serverIndex = poller.register(server)
        let zapIndex = poller.register(handler)
        let deadline = ContinuousClock.now + .seconds(5)
        var events: [ZAPEvent] = []
        while events.isEmpty, case let remaining = deadline - .now, remaining > .zero {
            _ = try poller.poll(timeout: remaining)
            if poller.events(at: zapIndex).contains(.readable) { events += try handler.serviceRequests() }
        }
        XCTAssertEqual(events.count, 1)
        guard case .allowed(_, "local") = events.first else { return XCTFail("\(events)") }

        // A message frame is only valid once the server's READY has come.
        XCTAssertEqual(try peer.read(count: 64).prefix(1), [0xFF], "the server's greeting")
        let command = try peer.read(count: 2)
        XCTAssertEqual(command[0], 0x04, "a short command")
        XCTAssertEqual(try peer.read(count: Int(command[1])).prefix(6), [5] + Array("READY".utf8))
        try peer.send(frame("hello"))

        var frames: [Message]?
        while frames == nil, case let remaining = deadline - .now, remaining > .zero {
            _ = try poller.poll(timeout: remaining)
            if poller.events(at: serverIndex).contains(.readable) { frames = try server.receiveMultipart() }
        }
        let received = try XCTUnwrap(frames, "the hand-made peer's message arrives")
        XCTAssertEqual(received.last?.bytes, Array("hello".utf8))
        XCTAssertEqual(received.userID, "local", "the ZAP handler's user id, not the one the peer claimed")
    }

    // ZMTP 3.0 (RFC 23), just enough of it: greeting, READY command, one message frame.

    private func greeting() -> [UInt8] {
        var bytes: [UInt8] = [0xFF] + [UInt8](repeating: 0, count: 8) + [0x7F, 3, 0]
        bytes += Array("NULL".utf8) + [UInt8](repeating: 0, count: 16)
        return bytes + [0] + [UInt8](repeating: 0, count: 31)
    }

    private func ready(properties: [(String, String)]) -> [UInt8] {
        var body: [UInt8] = [5] + Array("READY".utf8)
        for (name, value) in properties {
            let count = UInt32(value.utf8.count)
            body += [UInt8(name.utf8.count)] + Array(name.utf8)
            body += [UInt8(count >> 24), UInt8(count >> 16 & 0xFF), UInt8(count >> 8 & 0xFF), UInt8(count & 0xFF)]
            body += Array(value.utf8)
        }
        return [0x04, UInt8(body.count)] + body
    }

    private func frame(_ text: String) -> [UInt8] {
        [0x00, UInt8(text.utf8.count)] + Array(text.utf8)
    }
}

/// A plain TCP connection to 127.0.0.1.
private final class RawZMTPPeer {
    private let fd: Int32

    init(port: UInt16) throws {
        #if canImport(Glibc)
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw ZMQError(code: errno, operation: "socket") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let code = errno
            _ = closeDescriptor(fd)
            throw ZMQError(code: code, operation: "connect")
        }
    }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            guard count > 0 else { throw ZMQError(code: errno, operation: "write") }
            offset += count
        }
    }

    /// Reads exactly `count` bytes, waiting at most 5 seconds for each read.
    func read(count: Int) throws -> [UInt8] {
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        guard setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
            throw ZMQError(code: errno, operation: "setsockopt(SO_RCVTIMEO)")
        }
        var bytes = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let got = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + offset, count - offset, 0) }
            guard got > 0 else { throw ZMQError(code: got == 0 ? ECONNRESET : errno, operation: "recv") }
            offset += got
        }
        return bytes
    }

    func close() {
        _ = closeDescriptor(fd)
    }
}

// `close` is shadowed by the method of the same name inside the class.
private func closeDescriptor(_ fd: Int32) -> Int32 { close(fd) }
