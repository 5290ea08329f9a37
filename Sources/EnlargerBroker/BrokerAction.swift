import EnlargerProtocol

/// What the broker core asks its I/O loop to do after an event, in order.
public enum BrokerAction<Payload> {
    /// Send on the client ROUTER socket, routing id first.
    case sendToClient(PeerID, OutgoingMessage<Payload>)
    /// Send on the worker ROUTER socket, routing id first.
    case sendToWorker(PeerID, OutgoingMessage<Payload>)
    /// Something an operator may want in the log. Nothing to send.
    case report(BrokerReport)
}

/// Notable things the core decided, for the I/O loop to log. The core never logs itself.
public enum BrokerReport: Sendable, Equatable {
    case workerRegistered(PeerID, name: String, capacity: Int)
    /// Declared dead (silent, unreachable, or reset by a second Ready). Its jobs were
    /// re-queued or, past the retry limit, failed with `WORKER_LOST`.
    case workerLost(PeerID, reason: String, requeued: Int, failed: Int)
    /// Left with Disconnect; its jobs were re-queued.
    case workerLeft(PeerID, requeued: Int)
    /// Went silent (or unreachable) with live requests, which were cancelled.
    case clientVanished(PeerID, cancelled: Int)
    /// A worker never acknowledged a CancelJob; its credit was given back.
    case cancelAckTimedOut(PeerID, jobID: UInt64)
    /// A message was malformed; `reason` is what the peer was told (if it was told).
    case malformed(PeerID, role: BrokerRole, reason: String)
}

/// The two kinds of peer, one ROUTER socket each.
public enum BrokerRole: String, Sendable {
    case client
    case worker
}
