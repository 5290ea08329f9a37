import ArgumentParser
import CLISupport
import Foundation
import ZeroMQ

/// The floor under the broker benchmark: a raw ZeroMQ relay, with no protocol, no state and
/// no logging, that moves the same messages a broker does for one request, on the same
/// sockets and through the same wrapper:
///
///   client → relay   Submit   (tag, header, 100-byte image)
///   relay → client   Accepted (tag, header)
///   relay → worker   Job      (client id, tag, header, image)
///   worker → relay   Result   (client id, tag, header, 100-byte image)
///   relay → client   Result   (tag, header, image)
///
/// `enlarger-bench broker` runs it right after the broker, in the same run, and prints the
/// broker's CPU per request as a multiple of the relay's.
enum RawRelay {
    static let submitTag: [UInt8] = [1], acceptedTag: [UInt8] = [2], resultTag: [UInt8] = [3], readyTag: [UInt8] = [4]
    static let header = [UInt8](repeating: 0x5A, count: 24)

    /// A relay child process (`enlarger-bench relay-serve`) on private ipc sockets.
    final class Child {
        private let process = Process()
        private let directory: URL
        let clients: String, workers: String
        var pid: pid_t { process.processIdentifier }

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("enlarger-bench-relay-\(getpid())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
            clients = "ipc://\(directory.path)/clients.sock"
            workers = "ipc://\(directory.path)/workers.sock"
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            process.arguments = ["relay-serve", "--clients", clients, "--workers", workers]
            try process.run()
        }

        func stop() {
            process.terminate()
            process.waitUntilExit()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    /// The relay's loop: one thread polls both ROUTER sockets, as the broker's does.
    static func serve(clients clientsEndpoint: String, workers workersEndpoint: String) throws {
        let context = try Context()
        let clients = try Socket(context, .router), workers = try Socket(context, .router)
        try clients.bind(clientsEndpoint)
        try workers.bind(workersEndpoint)
        var poller = Poller()
        let clientsIndex = poller.register(clients), workersIndex = poller.register(workers)
        var frames: [Message] = []
        var worker: [UInt8]?
        while true {
            _ = try poller.poll(timeout: .seconds(1))
            if poller.events(at: clientsIndex).contains(.readable) {
                for _ in 0..<256 {
                    guard try clients.receive(multipart: &frames, wait: false) else { break }
                    guard frames.count == 4, let worker else { continue }
                    let client = frames[0]
                    _ = try clients.send(client, [.more, .dontWait])
                    _ = try clients.send(acceptedTag, [.more, .dontWait])
                    _ = try clients.send(header, .dontWait)
                    _ = try workers.send(worker, [.more, .dontWait])
                    _ = try workers.send(multipart: [client, frames[1], frames[2], frames[3]], .dontWait)
                }
            }
            if poller.events(at: workersIndex).contains(.readable) {
                for _ in 0..<256 {
                    guard try workers.receive(multipart: &frames, wait: false) else { break }
                    if frames.count == 2 { worker = frames[0].bytes; continue }  // ready
                    guard frames.count == 5 else { continue }
                    _ = try clients.send(multipart: Array(frames[1...]), .dontWait)
                }
            }
        }
    }

    /// A worker thread that answers every job at once.
    static func runWorker(context: Context, endpoint: String) {
        do {
            let socket = try Socket(context, .dealer)
            defer { socket.close() }
            try socket.connect(endpoint)
            _ = try socket.send(readyTag)
            let output = [UInt8](repeating: 0xCD, count: 100)
            var frames: [Message] = []
            while true {
                _ = try socket.receive(multipart: &frames, wait: true)
                guard frames.count == 4 else { continue }
                _ = try socket.send(frames[0], .more)
                _ = try socket.send(resultTag, .more)
                _ = try socket.send(header, .more)
                _ = try socket.send(output)
            }
        } catch {
            // The socket closes when the benchmark ends; nothing to report.
        }
    }
}

/// `enlarger-bench relay-serve`: the relay process that `broker` starts (not for use alone).
struct BenchRelayServe: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay-serve",
        abstract: "The raw ZeroMQ relay the broker benchmark measures the broker against (started by it).",
        shouldDisplay: false
    )

    @Option(help: "Where clients connect (ipc://…).")
    var clients: String

    @Option(help: "Where workers connect (ipc://…).")
    var workers: String

    func run() throws {
        try RawRelay.serve(clients: clients, workers: workers)
    }
}
