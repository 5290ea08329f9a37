import EnlargerProtocol
import EnlargerTransport
import Foundation
import TestSupport
import XCTest
import ZeroMQ

/// Strict cancel as the broker keeps it on the wire, observed on raw sockets (no client
/// library filtering anything): two connections submit and cancel at random moments, and
/// every frame that reaches them is checked. Seeded and replayable with
/// ENLARGER_WIRE_RACE_SEED=N.
final class WireCancelRaceTests: XCTestCase {
    /// What one connection has seen of one request.
    private struct Track {
        var accepted = false
        var ended = false
        var cancelSent = false
        /// `Cancelled` reached the submitter.
        var cancelledSeen = false
        var events: [String] = []
    }

    func testNothingFollowsCancelledOrATerminalFrameOnTheWire() throws {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["ENLARGER_WIRE_RACE_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...999_999)
        let count = environment["ENLARGER_WIRE_RACE_REQUESTS"].flatMap(Int.init) ?? 3_000
        print("wire cancel race: seed \(seed), \(count) requests (replay with ENLARGER_WIRE_RACE_SEED=\(seed))")
        var rng = SeededGenerator(seed: seed)

        let cluster = try Cluster(self, heartbeat: .milliseconds(500), queueLimit: 4096)
        try cluster.startThreadWorkers(2, concurrency: 2)
        let context = try Context()
        let submitter = try Socket(context, .dealer), canceller = try Socket(context, .dealer)
        defer {
            submitter.close()
            canceller.close()
        }
        try submitter.connect(cluster.clientsEndpoint)
        try canceller.connect(cluster.clientsEndpoint)
        let images = [
            Message(try Corpus.good("ljt_testorig.jpg")),
            Message(try Corpus.good("gofuzz_video-001.q50.420.progressive.jpeg")),
            Message(try Corpus.good("sharp_flowers.jpeg")),
        ]

        var tracks: [String: Track] = [:]
        var violations: [String] = []
        var next = 0
        var live = 0
        var cancelsAcknowledged = 0
        var pendingCancels: [(id: String, at: ContinuousClock.Instant, fromSubmitter: Bool)] = []
        func violation(_ text: String) {
            if violations.count < 20 { violations.append(text) }
        }
        func send(_ message: ClientToBrokerMessage<Message>, on socket: Socket) throws {
            while try !socket.send(message.encoded()) { usleep(100) }
        }
        func cancel(_ id: String, fromSubmitter: Bool) throws {
            tracks[id]?.cancelSent = true
            try send(.cancel(.with { $0.requestID = id }), on: fromSubmitter ? submitter : canceller)
        }

        let deadline = ContinuousClock.now + .seconds(240)
        var nextPing = ContinuousClock.now
        while (next < count || live > 0 || !pendingCancels.isEmpty), ContinuousClock.now < deadline {
            while next < count && live < 64 {
                let id = "wire-\(seed)-\(next)"
                next += 1
                live += 1
                tracks[id] = Track()
                let delivery: Enlarger_V1_Delivery = [.progressive, .final, .degraded].randomElement(using: &rng)!
                let image = images[Int.random(in: 0..<100, using: &rng) < 20 ? 2 : Int.random(in: 0..<2, using: &rng)]
                try send(.submit(.with {
                    $0.requestID = id
                    $0.spec.width = 48
                    $0.delivery = delivery
                }, image: image), on: submitter)
                switch Int.random(in: 0..<10, using: &rng) {
                case 0..<2: try cancel(id, fromSubmitter: Bool.random(using: &rng))
                case 2..<6:
                    let delay = Duration.microseconds(Int.random(in: 0...20_000, using: &rng))
                    pendingCancels.append((id, ContinuousClock.now + delay, Bool.random(using: &rng)))
                default: break
                }
            }
            let now = ContinuousClock.now
            for due in pendingCancels.filter({ $0.at <= now }) { try cancel(due.id, fromSubmitter: due.fromSubmitter) }
            pendingCancels.removeAll { $0.at <= now }
            // A conforming client pings while its requests are live (LIVENESS in client.proto):
            // without it, requests still running once the submits stop (slow under a sanitizer)
            // end CLIENT_SILENT after three heartbeats, as the contract says they do.
            if now >= nextPing {
                try send(.ping, on: submitter)
                nextPing = now + .milliseconds(250)
            }

            var idle = true
            while let frames = try submitter.receiveFrames() {
                idle = false
                let message = try BrokerToClientMessage(frames: frames)
                guard let id = message.requestID, var track = tracks[id] else {
                    if case .pong = message { continue }
                    violation("unexpected frame \(message.kindName) to the submitter")
                    continue
                }
                if track.ended {
                    // Only the answer to our own late Cancel may follow the end.
                    if case .cancelAck = message { continue }
                    violation("\(id): \(message.kindName) after the terminal \(track.events.last ?? "")")
                }
                track.events.append(message.kindName)
                switch message {
                case .accepted:
                    if track.accepted { violation("\(id): accepted twice") }
                    track.accepted = true
                case .started:
                    break
                case .result(let result, _):
                    if result.terminal { track.ended = true }
                case .failed(let failed):
                    violation("\(id): failed \(failed.code) \(failed.message)")
                    track.ended = true
                case .cancelled:
                    if !track.cancelSent { violation("\(id): cancelled though nobody cancelled it") }
                    track.cancelledSeen = true
                    track.ended = true
                case .cancelAck(let ack):
                    // Our own cancel: when it ended the request, Cancelled came first.
                    if ack.outcome == .cancelled && !track.cancelledSeen {
                        violation("\(id): CancelAck{CANCELLED} before Cancelled")
                    }
                    cancelsAcknowledged += 1
                case .rejected(let rejected):
                    violation("\(id): rejected \(rejected.code)")
                    track.ended = true
                default:
                    violation("\(id): unexpected \(message.kindName)")
                }
                if track.ended && !tracks[id]!.ended { live -= 1 }
                tracks[id] = track
            }
            while let frames = try canceller.receiveFrames() {
                idle = false
                let message = try BrokerToClientMessage(frames: frames)
                guard case .cancelAck = message else {
                    violation("the canceller got \(message.kindName): only CancelAck is addressed to it")
                    continue
                }
                cancelsAcknowledged += 1
            }
            if idle { usleep(200) }
        }
        XCTAssertEqual(next, count)
        XCTAssertEqual(live, 0, "requests without a terminal frame: \(tracks.filter { !$0.value.ended }.keys.prefix(5))")
        XCTAssertTrue(violations.isEmpty, "seed \(seed): \(violations)")
        let cancelled = tracks.values.filter(\.cancelledSeen).count
        print("wire cancel race: \(cancelled) cancelled, \(tracks.count - cancelled) finished, \(cancelsAcknowledged) acks")
        XCTAssertGreaterThan(cancelled, count / 10)
    }
}
