import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A loopback TCP proxy that forwards byte for byte to `target` and can reset every
/// connection through it at once (RST, as a NAT or load balancer dropping state would), so
/// tests see what a real connection reset does to a ZeroMQ conversation.
final class ResettingProxy: @unchecked Sendable {
    // @unchecked: `connections` is guarded by `lock`; the listening descriptor is fixed.
    let port: UInt16
    private let listener: Int32
    private let targetPort: UInt16
    private let lock = NSLock()
    private var connections: [(Int32, Int32)] = []
    private var stopped = false

    /// Listens on an ephemeral loopback port and forwards to `127.0.0.1:targetPort`.
    init(targetPort: UInt16) throws {
        self.targetPort = targetPort
        signal(SIGPIPE, SIG_IGN)  // a write into a reset connection must fail, not kill the process
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ProxyError("socket: \(errno)") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw ProxyError("bind/listen: \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// Resets every open connection; ZeroMQ peers reconnect through the proxy afterwards.
    /// Returns how many were reset.
    @discardableResult
    func resetAll() -> Int {
        lock.lock()
        let open = connections
        connections.removeAll()
        lock.unlock()
        for (a, b) in open {
            for fd in [a, b] {
                var linger = linger(l_onoff: 1, l_linger: 0)  // close with RST
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
                shutdown(fd, Int32(SHUT_RDWR))
            }
        }
        return open.count
    }

    func stop() {
        lock.lock()
        stopped = true
        lock.unlock()
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        resetAll()
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            lock.lock()
            let accepting = !stopped && connected == 0
            if accepting { connections.append((client, upstream)) }
            lock.unlock()
            guard accepting else {
                close(client)
                close(upstream)
                continue
            }
            // Each direction has its own thread; the one that fails first closes both ends,
            // and the other then fails too. Each closes the descriptor it reads from.
            Thread { Self.pump(from: client, to: upstream) }.start()
            Thread { Self.pump(from: upstream, to: client) }.start()
        }
    }

    private static func pump(from source: Int32, to destination: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        loop: while true {
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            var offset = 0
            while offset < count {
                let written = buffer.withUnsafeBytes { write(destination, $0.baseAddress! + offset, count - offset) }
                guard written > 0 else { break loop }
                offset += written
            }
        }
        shutdown(destination, Int32(SHUT_RDWR))
        shutdown(source, Int32(SHUT_RDWR))
        usleep(50_000)
        close(source)
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}

struct ProxyError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
