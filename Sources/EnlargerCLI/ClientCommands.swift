import ArgumentParser
import CLISupport
import Enlarger
import Foundation
import Imaging

extension EnlargerClientError {
    /// The stable code and message printed for a failed request: the contract's name for a
    /// code from the broker (`UNKNOWN_FORMAT`, `WORKER_LOST`), the Python client's for one
    /// decided here (`BROKER_UNREACHABLE`, `CLIENT_CLOSED`).
    var codeAndMessage: (code: String, message: String) {
        switch self {
        case .failed(let code, let message), .rejected(let code, let message): (code.contractName, message)
        case .duplicateID(let message): ("DUPLICATE_ID", message)
        case .cancelled: ("CANCELLED", "cancelled by another connection")
        case .invalidRequestID(let message): ("INVALID_ARGUMENT", message)
        case .brokerUnreachable: ("BROKER_UNREACHABLE", "no broker answered; is `enlarger serve` running?")
        case .brokerLost: ("BROKER_LOST", "the broker stopped answering while the request was live")
        case .closed: ("CLIENT_CLOSED", "the client was closed")
        case .transport(let error): ("TRANSPORT", "\(error)")
        case .insecureEndpoint(let message): ("INSECURE_ENDPOINT", message)
        case .batchFailed(let index, let id, let reason):
            (reason.codeAndMessage.code, "item \(index) (\(id)): \(reason.codeAndMessage.message)")
        }
    }

    /// The `event` a failure is reported as.
    var eventName: String {
        switch self {
        case .rejected: "rejected"
        case .cancelled: "cancelled"
        default: "failed"
        }
    }
}

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the broker's workers, capacity, queue depth, requests in flight and totals."
    )

    @OptionGroup var service: ServiceOptions

    @Flag(help: "Print one JSON object.")
    var json = false

    func run() async throws {
        let status: BrokerStatus
        do {
            status = try await withEnlargerClient(brokerEndpoint: service.clientEndpoint, configuration: try service.clientConfiguration()) { try await $0.status() }
        } catch let error as EnlargerClientError {
            throw CLIError("\(service.clientEndpoint): \(error.codeAndMessage.message)")
        }
        let t = status.totals
        let totals: [(String, UInt64)] = [
            ("submitted", t.submitted), ("accepted", t.accepted), ("finished", t.finished), ("failed", t.failed),
            ("cancelled", t.cancelled), ("rejected", t.rejected), ("duplicate_ids", t.duplicateIDs),
            ("late_results_dropped", t.lateResultsDropped), ("malformed_dropped", t.malformedDropped),
            ("workers_lost", t.workersLost), ("workers_disconnected", t.workersDisconnected),
            ("jobs_requeued", t.jobsRequeued), ("clients_vanished", t.clientsVanished), ("unroutable", t.unroutable),
            ("cancel_acks_timed_out", t.cancelAcksTimedOut), ("deadlines_exceeded", t.deadlinesExceeded),
            ("client_sends_deferred", t.clientSendsDeferred), ("jobs_quarantined", t.jobsQuarantined),
            ("protocol_breaches", t.protocolBreaches), ("cache_hits", t.cacheHits), ("cache_misses", t.cacheMisses),
            ("jobs_shared", t.jobsShared), ("batches_completed", t.batchesCompleted), ("batches_failed", t.batchesFailed),
            ("batches_cancelled", t.batchesCancelled),
        ]
        if json {
            var object = JSONLine()
            object.add("workers", status.workers.count)
            object.add("capacity", status.workers.reduce(0) { $0 + $1.capacity })
            object.add("queue_depth", status.queueDepth)
            object.add("queue_limit", status.queueLimit)
            object.add("in_flight", status.inFlight)
            object.add("clients", status.clients)
            object.add("uptime_ms", milliseconds(status.uptime))
            object.add("client_bytes_waiting", Int(status.clientBytesWaiting))
            var cache = JSONLine()
            cache.add("entries", status.cache.entries)
            cache.add("bytes", Int(status.cache.bytes))
            cache.add("limit_bytes", Int(status.cache.limitBytes))
            cache.add("evictions", Int(status.cache.evictions))
            object.add("cache", object: cache)
            var counters = JSONLine()
            for (name, value) in totals { counters.add(name, Int(value)) }
            object.add("totals", object: counters)
            var list: [String] = []
            for worker in status.workers {
                var w = JSONLine()
                w.add("name", worker.name)
                w.add("pid", worker.pid)
                w.add("capacity", worker.capacity)
                w.add("in_flight", worker.inFlight)
                w.add("last_seen_ms", milliseconds(worker.lastSeen))
                list.append(w.text)
            }
            print(object.text.dropLast() + ",\"worker_list\":[" + list.joined(separator: ",") + "]}")
            return
        }
        print("broker \(service.clientEndpoint): up \(Int(milliseconds(status.uptime) / 1000)) s, \(status.clients) clients")
        print("workers \(status.workers.count), capacity \(status.workers.reduce(0) { $0 + $1.capacity }), "
              + "in flight \(status.inFlight), queue \(status.queueDepth)/\(status.queueLimit), "
              + "\(status.clientBytesWaiting) bytes waiting for slow clients")
        print(status.cache.limitBytes == 0 ? "result cache off"
              : "result cache \(status.cache.entries) results, \(status.cache.bytes >> 10) of \(status.cache.limitBytes >> 10) KiB, "
                + "\(status.cache.evictions) evicted")
        for worker in status.workers {
            print("  \(worker.name) pid \(worker.pid): \(worker.inFlight)/\(worker.capacity) busy, "
                  + "heard \(Int(milliseconds(worker.lastSeen))) ms ago")
        }
        print("totals: " + totals.map { "\($0.0) \($0.1)" }.joined(separator: ", "))
    }
}

struct CancelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel requests by id, whichever connection submitted them.",
        discussion: "Prints, per id: cancelled, finished (it had already ended) or unknown."
    )

    @Argument(help: "Request ids.")
    var ids: [String]

    @OptionGroup var service: ServiceOptions

    @Flag(help: "Print one JSON object per id: id and result.")
    var json = false

    func run() async throws {
        try await withEnlargerClient(brokerEndpoint: service.clientEndpoint, configuration: try service.clientConfiguration()) { client in
            for id in ids {
                let result: String
                do {
                    switch try await client.cancel(id) {
                    case .cancelled: result = "cancelled"
                    case .finished: result = "finished"
                    case .unknown: result = "unknown"
                    }
                } catch let error as EnlargerClientError {
                    throw CLIError("\(id): \(error.codeAndMessage.message)")
                }
                if json {
                    var line = JSONLine()
                    line.add("id", id)
                    line.add("result", result)
                    print(line.text)
                } else {
                    print("\(id): \(result)")
                }
            }
        }
    }
}
