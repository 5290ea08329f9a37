import Dispatch
import EnlargerProtocol
import Foundation
import Locking
import Synchronization
import ZeroMQ

/// A raw ROUTER standing in for the broker's client endpoint, served by its own thread, so
/// that async tests never block a Swift concurrency thread on a socket.
///
/// It records every message a client sends, answers Ping with Pong (while `answersPings`),
/// and answers everything else with what `script` returns. `send` pushes messages of the
/// test's choosing to the client that spoke last.
final class FakeClientBroker: @unchecked Sendable {
    // @unchecked: `router` is created by `init` and then used only by the broker's thread.
    typealias Script = @Sendable (ClientToBrokerMessage<[UInt8]>) -> [BrokerToClientMessage<[UInt8]>]

    private enum Command: Sendable {
        case send([[[UInt8]]])
        case stop
    }

    private let router: Socket
    private let context: Context
    private let mailbox: Mailbox<Command>
    private let script: Script
    private let log = Lock<[[[UInt8]]]>([])
    private let pongs = Atomic<Bool>(true)
    private let finished = DispatchSemaphore(value: 0)

    init(endpoint: String, script: @escaping Script = { _ in [] }) throws {
        context = try Context()
        router = try Socket(context, .router)
        try router.set(.routerMandatory(true))
        try router.bind(endpoint)
        mailbox = try Mailbox()
        self.script = script
        let thread = Thread { [self] in serve() }
        thread.start()
    }

    /// Whether Pings get a Pong; off, the broker seems to have frozen.
    var answersPings: Bool {
        get { pongs.load(ordering: .relaxed) }
        set { pongs.store(newValue, ordering: .relaxed) }
    }

    /// Every message received so far, in order.
    var received: [ClientToBrokerMessage<[UInt8]>] {
        log.withLock { $0 }.map { try! ClientToBrokerMessage(frames: $0) }
    }

    /// The messages received so far other than Pings and Syncs (the client's housekeeping).
    var requests: [ClientToBrokerMessage<[UInt8]>] {
        received.filter {
            switch $0 {
            case .ping, .sync: false
            default: true
            }
        }
    }

    func send(_ messages: [BrokerToClientMessage<[UInt8]>]) {
        mailbox.post(.send(messages.map { $0.encoded().frames }))
    }

    /// Stops the broker's thread and closes its socket.
    func stop() {
        mailbox.post(.stop)
        finished.wait()
    }

    private func serve() {
        defer {
            router.close()
            finished.signal()
        }
        var poller = Poller()
        poller.register(router)
        poller.register(fileDescriptor: mailbox.fileDescriptor)
        var lastPeer: [UInt8]?
        do {
            while true {
                _ = try poller.poll(timeout: nil)
                for command in mailbox.takeAll() {
                    switch command {
                    case .send(let messages):
                        for frames in messages { try lastPeer.map { try send(frames, to: $0) } }
                    case .stop:
                        return
                    }
                }
                var frames: [Message] = []
                while try router.receive(multipart: &frames, wait: false) {
                    let peer = frames[0].bytes
                    lastPeer = peer
                    let body = frames.dropFirst().map(\.bytes)
                    log.withLock { $0.append(body) }
                    let message = try ClientToBrokerMessage(frames: body)
                    let replies: [BrokerToClientMessage<[UInt8]>]
                    if case .ping = message {
                        replies = answersPings ? [.pong(Enlarger_V1_Pong())] : []
                    } else {
                        replies = script(message)
                    }
                    for reply in replies { try send(reply.encoded().frames, to: peer) }
                }
            }
        } catch {
            preconditionFailure("fake broker failed: \(error)")
        }
    }

    private func send(_ frames: [[UInt8]], to peer: [UInt8]) throws {
        try router.send(peer, .more)
        for (index, frame) in frames.enumerated() {
            try router.send(frame, index < frames.count - 1 ? .more : [])
        }
    }
}

// MARK: Building broker messages

extension BrokerToClientMessage where Payload == [UInt8] {
    static func accepted(_ id: String) -> Self {
        var message = Enlarger_V1_Accepted()
        message.requestID = id
        return .accepted(message)
    }

    static func started(_ id: String, attempt: UInt32 = 1) -> Self {
        var message = Enlarger_V1_Started()
        message.requestID = id
        message.attempt = attempt
        return .started(message)
    }

    static func result(_ id: String, _ stage: Enlarger_V1_Stage, terminal: Bool, width: UInt32 = 32,
                       height: UInt32 = 24, image: [UInt8] = [0xFF, 0xD8, 0xFF, 0xD9]) -> Self {
        var message = Enlarger_V1_Result()
        message.requestID = id
        message.stage = stage
        message.width = width
        message.height = height
        message.format = .jpeg
        message.terminal = terminal
        return .result(message, image: image)
    }

    static func failed(_ id: String, _ code: Enlarger_V1_ErrorCode, _ text: String) -> Self {
        var message = Enlarger_V1_Failed()
        message.requestID = id
        message.code = code
        message.message = text
        return .failed(message)
    }

    static func rejected(_ id: String, _ code: Enlarger_V1_ErrorCode, _ text: String) -> Self {
        var message = Enlarger_V1_Rejected()
        message.requestID = id
        message.code = code
        message.message = text
        return .rejected(message)
    }

    static func cancelled(_ id: String) -> Self {
        var message = Enlarger_V1_Cancelled()
        message.requestID = id
        return .cancelled(message)
    }

    static func cancelAck(_ id: String, _ outcome: Enlarger_V1_CancelAck.Outcome) -> Self {
        var message = Enlarger_V1_CancelAck()
        message.requestID = id
        message.outcome = outcome
        return .cancelAck(message)
    }
}

extension ClientToBrokerMessage {
    /// The request id of a Submit or Cancel.
    var requestID: String? {
        switch self {
        case .submit(let submit, _): submit.requestID
        case .cancel(let cancel): cancel.requestID
        case .statusRequest, .ping, .sync: nil
        }
    }

    var isCancel: Bool {
        if case .cancel = self { true } else { false }
    }
}
