import EnlargerProtocol

// MARK: - Housekeeping
//
// Once per heartbeat interval: workers silent for `heartbeatLiveness` intervals are lost;
// clients silent that long while they have live requests have vanished (their
// requests fail with CLIENT_SILENT); a worker that
// never acknowledged a cancel is retired; old memories of
// ended ids are dropped; and every remaining worker gets a heartbeat. Checking once per
// interval means a dead peer is noticed between `liveness` and `liveness + 1` intervals
// after its last message, which is the usual trade for not keeping a timer per peer.

extension BrokerCore {
    mutating func housekeeping(now: MonotonicInstant, _ actions: inout [Action]) {
        let timeout = configuration.peerTimeout
        recentStatus = recentStatus.filter { now.duration(since: $0.value.at) < Self.statusInterval }

        let silentWorkers = workers.filter { now.duration(since: $0.lastSeen) > timeout }.map(\.id)
        for peer in silentWorkers {
            if let index = workerIndex[peer] {
                loseWorker(at: index, reason: "silent for \(timeout)", now: now, &actions)
            }
        }

        let silentClients = clients.filter { now.duration(since: $0.value.lastSeen) > timeout }.keys.sorted()
        for peer in silentClients {
            clientVanished(peer, reason: "nothing heard from the client for \(timeout)", now: now, &actions)
        }

        // A worker that has neither stopped a cancelled job nor said, within `cancelAckTimeout`,
        // that its thread is still at it (Occupancy.stopping: a stage that cannot be
        // interrupted) has a stuck job thread: it is retired like a lost worker (its other jobs
        // re-queued) and told to disconnect and register afresh. One that keeps naming the
        // job keeps its credit taken and is left alone.
        let stuck = workers.filter { worker in
            worker.tombstones.values.contains { now.duration(since: $0.accountedAt) > configuration.cancelAckTimeout }
        }.map(\.id)
        for peer in stuck {
            guard let index = workerIndex[peer] else { continue }
            for jobID in workers[index].tombstones.keys.sorted()
            where now.duration(since: workers[index].tombstones[jobID]!.accountedAt) > configuration.cancelAckTimeout {
                counters.cancelAcksTimedOut += 1
                actions.append(.report(.cancelAckTimedOut(peer, jobID: jobID)))
            }
            loseWorker(at: index, reason: "a cancelled job was not stopped within \(configuration.cancelAckTimeout)",
                       now: now, &actions)
            actions.append(.sendToWorker(peer, BrokerToWorkerMessage<Payload>.disconnect.encoded()))
        }

        endedRequests.expire(at: now)
        endedBatches.expire(at: now)

        for worker in workers {
            actions.append(.sendToWorker(worker.id, BrokerToWorkerMessage<Payload>.heartbeat.encoded()))
        }
        dispatch(now: now, &actions)
    }
}
