import EnlargerProtocol
import Logging
import Telemetry

/// What the broker core asks its I/O loop to do after an event, in order.
public enum BrokerAction<Payload> {
    /// Send on the client ROUTER socket, routing id first, to the connection of `Principal`
    /// under that routing id: the I/O loop sends nothing to a connection it has not heard
    /// as that principal (nil: whoever just spoke there, for a reply). `shed` says what
    /// becomes of it if it must wait and the client stops reading (see `ClientOutbox`).
    case sendToClient(PeerID, OutgoingMessage<Payload>, for: Principal?, shed: ClientShedding)
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
    /// A request ended (its terminal event was sent, or it was given up).
    case requestEnded(RequestEnd)
    /// A Submit was answered `Rejected`.
    case requestRejected(requestID: String, code: Enlarger_V1_ErrorCode)
}

/// How a request ended, as its client was told.
public enum RequestOutcome: Sendable, Equatable {
    case finished
    case failed(Enlarger_V1_ErrorCode)
    case cancelled
    case rejected(Enlarger_V1_ErrorCode)

    /// `finished`, `failed`, `cancelled` or `rejected`: a metric label and a log field.
    public var name: String {
        switch self {
        case .finished: "finished"
        case .failed: "failed"
        case .cancelled: "cancelled"
        case .rejected: "rejected"
        }
    }

    /// The error code's name in the contract (`DEADLINE_EXCEEDED`, …), `OK` for a finished
    /// request, `CANCELLED` for a cancelled one.
    public var code: String {
        switch self {
        case .finished: "OK"
        case .cancelled: "CANCELLED"
        case .failed(let code), .rejected(let code): code.contractName
        }
    }
}

/// A request's life in figures, reported when it ends.
public struct RequestEnd: Sendable, Equatable {
    public var requestID: String
    public var jobID: UInt64
    public var principal: String
    public var outcome: RequestOutcome
    /// From acceptance to the first dispatch to a worker; nil when it never left the queue.
    public var queueWait: Duration?
    /// From acceptance to the end.
    public var duration: Duration
    /// Dispatches (0: it never reached a worker).
    public var attempts: UInt32
    public var bytesIn: Int
    /// Result bytes sent toward the client.
    public var bytesOut: Int

    /// The fields of the request's log line, sorted by name (the order a line is printed in),
    /// so that a handler can write them without building and sorting a dictionary.
    public var logFields: [(key: String, value: Logger.MetadataValue)] {
        var fields: [(key: String, value: Logger.MetadataValue)] = [
            ("attempts", .stringConvertible(attempts)), ("bytes_in", .stringConvertible(bytesIn)),
            ("bytes_out", .stringConvertible(bytesOut)), ("code", .string(outcome.code)),
            ("duration_ms", .stringConvertible(LogField.milliseconds(duration))), ("job_id", .stringConvertible(jobID)),
            ("outcome", .string(outcome.name)), ("principal", .string(principal)),
        ]
        fields.reserveCapacity(11)
        if let queueWait { fields.append(("queue_wait_ms", .stringConvertible(LogField.milliseconds(queueWait)))) }
        fields.append(("request_id", .string(requestID)))
        fields.append(("stage", .string("ended")))
        return fields
    }

    /// Appends the same fields as `logFields`, in the same order, to a text line, without
    /// boxing each value.
    public func appendFields(to line: inout TextLogLine) {
        line.append(key: "attempts", UInt64(attempts))
        line.append(key: "bytes_in", bytesIn)
        line.append(key: "bytes_out", bytesOut)
        line.append(key: "code", outcome.code)
        line.append(key: "duration_ms", milliseconds: duration)
        line.append(key: "job_id", jobID)
        line.append(key: "outcome", outcome.name)
        line.append(key: "principal", principal)
        if let queueWait { line.append(key: "queue_wait_ms", milliseconds: queueWait) }
        line.append(key: "request_id", requestID)
        line.append(key: "stage", "ended")
    }
}

/// The two kinds of peer, one ROUTER socket each.
public enum BrokerRole: String, Sendable {
    case client
    case worker
}
