import EnlargerProtocol
import SwiftProtobuf
import ZeroMQ

/// Worker messages as fake workers over real sockets send them.
enum WorkerFrames {
    /// `[tag][header][payload?][extra…]` as one multipart message.
    static func send(_ socket: Socket, _ message: Enlarger_V1_WorkerToBroker, payload: [UInt8]? = nil,
                     extra: [[UInt8]] = []) throws {
        var frames = [ProtocolTag.worker.bytes, try message.serializedBytes()]
        if let payload { frames.append(payload) }
        frames += extra
        for (index, frame) in frames.enumerated() {
            _ = try socket.send(frame, index < frames.count - 1 ? .more : [])
        }
    }

    static func started(_ job: Enlarger_V1_Job) -> Enlarger_V1_WorkerToBroker {
        var message = Enlarger_V1_WorkerToBroker()
        message.jobStarted.jobID = job.jobID
        message.jobStarted.attempt = job.attempt
        return message
    }

    /// A result header for `job`, 8×8 unless told otherwise (`size: nil` leaves it unset).
    static func result(_ job: Enlarger_V1_Job, _ stage: Enlarger_V1_Stage, terminal: Bool,
                       size: UInt32? = 8) -> Enlarger_V1_WorkerToBroker {
        var message = Enlarger_V1_WorkerToBroker()
        message.jobResult.jobID = job.jobID
        message.jobResult.attempt = job.attempt
        message.jobResult.stage = stage
        message.jobResult.terminal = terminal
        if let size {
            message.jobResult.width = size
            message.jobResult.height = size
        }
        return message
    }

    static func cancelled(jobID: UInt64, attempt: UInt32) -> Enlarger_V1_WorkerToBroker {
        var message = Enlarger_V1_WorkerToBroker()
        message.jobCancelled.jobID = jobID
        message.jobCancelled.attempt = attempt
        return message
    }

    static var heartbeat: Enlarger_V1_WorkerToBroker {
        var message = Enlarger_V1_WorkerToBroker()
        message.heartbeat = .init()
        return message
    }
}
