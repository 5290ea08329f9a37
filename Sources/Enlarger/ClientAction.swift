/// What the client core asks its I/O loop to do after an event, in order.
///
/// Messages for the broker are not actions: they wait in the core's outbox until the socket
/// takes them (`ClientCore.nextMessage`, then `messageSent`), because a message's place in
/// the conversation, which Sync replies are matched against, is fixed when the socket takes
/// it, not when the core decides to send it.
enum ClientAction: Equatable {
    /// Hand `event` to the request's consumer; when `terminal`, it is the last one.
    case deliver(RequestToken, RequestEvent, terminal: Bool)
    /// End the request with `error`, after the events already delivered.
    case fail(RequestToken, EnlargerClientError)
    /// Answer a `cancel(_:)` call that waits for the broker.
    case answerCancel(CallToken, Result<CancelResult, EnlargerClientError>)
    /// Answer a `status()` call.
    case answerStatus(CallToken, Result<BrokerStatus, EnlargerClientError>)
    /// The broker said (in an Accepted) that it does, or does not, use inline digests: later
    /// Submits are built with or without one.
    case digestsUnused(Bool)
    /// Close the socket, dropping whatever it has not sent, and connect a fresh one: nothing
    /// from the old conversation may reach later requests.
    case reconnect
}

/// The loop's name for a submitted request, unique for the client's life. The core never
/// sees the `RequestChannel` it stands for; after the request's one terminal action
/// (`deliver` with `terminal`, or `fail`) the core never names it again.
struct RequestToken: Hashable, Comparable, Sendable, CustomStringConvertible {
    let value: UInt64

    static func < (lhs: RequestToken, rhs: RequestToken) -> Bool { lhs.value < rhs.value }
    var description: String { "request #\(value)" }
}

/// The loop's name for a `cancel(_:)` or `status()` call waiting for the broker's answer,
/// unique for the client's life; answered exactly once.
struct CallToken: Hashable, Comparable, Sendable, CustomStringConvertible {
    let value: UInt64

    static func < (lhs: CallToken, rhs: CallToken) -> Bool { lhs.value < rhs.value }
    var description: String { "call #\(value)" }
}
