import EnlargerProtocol

// MARK: - Housekeeping
//
// Once per heartbeat interval: workers silent for `heartbeatLiveness` intervals are lost;
// clients silent that long while they have live requests have vanished; cancelled jobs
// whose worker never acknowledged are given up (their credit returns); old memories of
// ended ids are dropped; and every remaining worker gets a heartbeat. Checking once per
// interval means a dead peer is noticed between `liveness` and `liveness + 1` intervals
// after its last message, which is the usual trade for not keeping a timer per peer.

extension BrokerCore {
    mutating func housekeeping(now: MonotonicInstant, _ actions: inout [Action]) {
        let timeout = configuration.peerTimeout

        let silentWorkers = workers.filter { now.duration(since: $0.lastSeen) > timeout }.map(\.id)
        for peer in silentWorkers {
            if let index = workerIndex[peer] {
                loseWorker(at: index, reason: "silent for \(timeout)", now: now, &actions)
            }
        }

        let silentClients = clients.filter { now.duration(since: $0.value.lastSeen) > timeout }.keys.sorted()
        for peer in silentClients {
            clientVanished(peer, now: now, &actions)
        }

        for index in workers.indices {
            let expired = workers[index].tombstones
                .filter { now.duration(since: $0.value.cancelledAt) > configuration.cancelAckTimeout }
                .keys.sorted()
            for jobID in expired {
                workers[index].tombstones[jobID] = nil
                counters.cancelAcksTimedOut += 1
                actions.append(.report(.cancelAckTimedOut(workers[index].id, jobID: jobID)))
            }
        }

        endedRequests.expire(at: now)

        for worker in workers {
            actions.append(.sendToWorker(worker.id, BrokerToWorkerMessage<Payload>.heartbeat.encoded()))
        }
        dispatch(&actions)
    }
}
