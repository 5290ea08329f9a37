import EnlargerProtocol
import Locking
import ZeroMQ

typealias CancelWaiter = CheckedContinuation<Result<CancelResult, EnlargerClientError>, Never>
typealias StatusWaiter = CheckedContinuation<Result<BrokerStatus, EnlargerClientError>, Never>

/// What callers post to the client's I/O thread.
enum ClientMail: Sendable {
    case submit(RequestChannel, Enlarger_V1_Submit, SubmitPayload)
    /// `waiter` is `nil` for the cancel sent when a consuming task is cancelled.
    case cancel(String, CancelWaiter?)
    case status(StatusWaiter)
    case close(CheckedContinuation<Void, Never>)
}

/// A Submit's image frame, filled on the caller's thread and handed to the I/O thread.
struct SubmitPayload: @unchecked Sendable {
    // @unchecked: the caller creates the frame and never touches it after posting it.
    let frame: Message
}

/// The state the client's callers share with its I/O thread: which requests a cancel must
/// reach, and whether the client still takes commands.
///
/// Commands are posted to the I/O thread under the same lock that records them, so the
/// broker sees a request's Submit and Cancel in the order the calls were made.
final class RequestRegistry: Sendable {
    let mailbox: Mailbox<ClientMail>
    private let state = Lock(State())

    enum Lifecycle {
        case open
        /// `close()` was called; the I/O thread has not finished yet.
        case closing
        /// The I/O thread has finished.
        case closed
    }

    private struct State {
        /// Every request whose consumer may still take events, by id. Weak: a request whose
        /// sequence was dropped, and that the I/O thread has finished with, is forgotten.
        var channels: [String: [WeakChannel]] = [:]
        var lifecycle = Lifecycle.open
        var digestsUnused = false

        /// The requests with this id that still exist.
        func live(_ id: String) -> [RequestChannel] {
            channels[id, default: []].compactMap(\.channel)
        }
    }

    private struct WeakChannel {
        weak var channel: RequestChannel?
    }

    init(mailbox: Mailbox<ClientMail>) {
        self.mailbox = mailbox
    }

    /// Whether the broker last said that it uses no inline digests (its Accepted): Submits
    /// are then built without one, sparing the caller the hashing. Set by the I/O thread.
    var digestsUnused: Bool {
        get { state.withLock { $0.digestsUnused } }
        set { state.withLock { $0.digestsUnused = newValue } }
    }

    // MARK: Callers

    /// Records a request and posts its Submit; or fails it at once when it cannot be sent.
    func submit(_ request: ResizeRequest) -> RequestChannel {
        let channel = RequestChannel(id: request.id)
        let submit: Enlarger_V1_Submit
        do throws(EnlargerClientError) {
            submit = try request.wireSubmit(digest: !digestsUnused)
        } catch {
            channel.fail(error)
            return channel
        }
        // The image is sent from the request's own storage: no copy of megabytes per Submit.
        let payload = SubmitPayload(frame: Message.sharing(request.image))
        let refusal: EnlargerClientError? = state.withLock { state in
            guard state.lifecycle == .open else { return .closed }
            let others = state.live(request.id)
            if others.contains(where: { !$0.isCancelled && !$0.hasEnded }) {
                return .duplicateID("request id \(request.id) is live in this client")
            }
            state.channels[request.id] = others.map(WeakChannel.init) + [WeakChannel(channel: channel)]
            mailbox.post(.submit(channel, submit, payload))
            return nil
        }
        if let refusal { channel.fail(refusal) }
        return channel
    }

    /// Marks every request with this id cancelled, at once, then posts the Cancel for the
    /// broker. `waiter`, if any, gets the broker's answer.
    func cancel(_ id: String, waiter: CancelWaiter?) {
        let posted = state.withLock { state in
            for channel in state.live(id) { channel.cancel() }
            // Cancelled channels take no more events: a cancel need not reach them again.
            state.channels[id] = nil
            guard state.lifecycle == .open else { return false }
            mailbox.post(.cancel(id, waiter))
            return true
        }
        if !posted { waiter?.resume(returning: .failure(.closed)) }
    }

    /// The consumer of `channel` stopped (its task was cancelled): that request alone is
    /// marked cancelled, and the Cancel goes to the broker only while it is the live request
    /// with its id (not one refused as a duplicate, nor one already ended whose id a later
    /// request has taken).
    func cancel(_ channel: RequestChannel) {
        state.withLock { state in
            let live = state.live(channel.id)
            let onTheWire = !channel.isCancelled && !channel.hasEnded && live.contains { $0 === channel }
            channel.cancel()
            guard onTheWire else { return }
            state.channels[channel.id] = live.filter { $0 !== channel }.map(WeakChannel.init)
            if state.lifecycle == .open { mailbox.post(.cancel(channel.id, nil)) }
        }
    }

    func status(_ waiter: StatusWaiter) {
        let posted = state.withLock { state in
            guard state.lifecycle == .open else { return false }
            mailbox.post(.status(waiter))
            return true
        }
        if !posted { waiter.resume(returning: .failure(.closed)) }
    }

    /// Posts `close` unless the I/O thread has already finished; returns whether it did.
    func close(_ continuation: CheckedContinuation<Void, Never>) -> Bool {
        state.withLock { state in
            guard state.lifecycle != .closed else { return false }
            state.lifecycle = .closing
            mailbox.post(.close(continuation))
            return true
        }
    }

    // MARK: I/O thread

    /// Refuses every later command, then returns the mail posted before that moment. The
    /// requests stay known: a cancel after the close still marks them (nothing queued for
    /// them is delivered after it, nor the close's failure).
    func markClosed() -> [ClientMail] {
        state.withLock { state in
            state.lifecycle = .closed
        }
        return mailbox.takeAll()
    }

    /// Forgets requests whose consumers and I/O thread are both done with them.
    func prune() {
        state.withLock { state in
            state.channels = state.channels.compactMapValues { entries in
                let alive = entries.filter { $0.channel != nil }
                return alive.isEmpty ? nil : alive
            }
        }
    }
}
