import EnlargerProtocol

// MARK: - Time
//
// Nothing happens while the client is idle. While anything is outstanding, `tick` judges the
// broker's silence first (past the limit, everything outstanding fails and the loop
// connects afresh), then ends the requests whose local deadline passed, then asks for a
// Sync and a Ping when they are due. Syncs and Pings wait until the outbox is empty: while
// messages wait for the socket, another one would only queue behind them.

extension ClientCore {
    /// Time passed. Call it after every wakeup; nothing is due before `nextWakeup`.
    mutating func tick(now: Instant) -> [Action] {
        noteBusy(now: now)
        guard let busySince, !isClosed else { return [] }
        var actions: [Action] = []
        if now >= max(busySince, lastHeard) + configuration.silenceLimit {
            startOver(failing: heardOnConnection ? .brokerLost : .brokerUnreachable, &actions)
            return actions
        }
        expireDeadlines(now: now, &actions)
        if outbox.isEmpty, awaitingAnswer > 0, now >= lastSync + configuration.syncInterval {
            queueSync(now: now)
        }
        if outbox.isEmpty, now >= lastSent + pingInterval {
            outbox.append(Outgoing(message: .ping, note: .ping))
        }
        noteBusy(now: now)
        return actions
    }

    /// Requests whose timeout passed without an end from the broker (which would have sent
    /// DEADLINE_EXCEEDED itself, had it been reachable) fail here, and the broker is asked to
    /// cancel them in case it still works on them. Each stays, ended, to absorb the broker's
    /// frames about it until the answer to that Cancel.
    private mutating func expireDeadlines(now: Instant, _ actions: inout [Action]) {
        while let token = deadlines.popExpired(at: now) {
            guard let id = routeIDs[token], let index = routes[id]?.firstIndex(where: { $0.token == token }) else { continue }
            actions.append(.fail(token, .failed(.deadlineExceeded, "no end heard from the broker within the request's timeout")))
            routes[id]![index].ended = true
            routes[id]![index].deadline = nil
            // A request the caller cancelled has its Cancel on the way already.
            if !routes[id]![index].cancelled { queueCancel(id, Call(token: nil, retires: token)) }
        }
    }

    /// Asks the broker which of the requests sent so far it still holds (an empty Sync when
    /// only calls wait: its reply shows which answers were lost).
    private mutating func queueSync(now: Instant) {
        lastSync = now
        let ids = routes.filter { $0.value.contains { $0.sentSerial != nil } }.keys.sorted()
        var start = 0
        repeat {
            let chunk = ids[start..<min(start + WireLimits.maxSyncRequestIDs, ids.count)]
            start += chunk.count
            var sync = Enlarger_V1_Sync()
            sync.requestIds = Array(chunk)
            sync.nonce = nextSyncNonce
            nextSyncNonce += 1
            outbox.append(Outgoing(message: .sync(sync), note: .sync(nonce: sync.nonce)))
        } while start < ids.count
    }

    // MARK: Broker restarts

    /// A broker that restarted on the same endpoint answers like the old one but has
    /// forgotten every request: when its instance number changes, whatever is outstanding is
    /// submitted again (or fails with `.brokerLost`) instead of waiting forever.
    mutating func noteBrokerInstance(_ instance: UInt64, _ actions: inout [Action]) {
        guard instance != 0 else { return }  // a broker that does not say
        if let known = brokerInstance, known != instance {
            if configuration.resubmitAfterBrokerRestart {
                resubmitAll(&actions)
            } else {
                startOver(failing: .brokerLost, &actions)
            }
        }
        brokerInstance = instance
    }

    /// Sends every unfinished request again to the new broker instance, in the order they
    /// were submitted; waiting cancels fail with `.brokerLost` (their requests were cancelled
    /// locally and are not submitted again), status requests are asked again. A request
    /// whose degraded result was delivered asks for the final result only.
    private mutating func resubmitAll(_ actions: inout [Action]) {
        for call in cancelCalls.values.joined().sorted(by: { $0.order < $1.order }) {
            if let token = call.token { actions.append(.answerCancel(token, .failure(.brokerLost))) }
        }
        cancelCalls.removeAll()
        pendingSyncs.removeAll()
        outbox.removeAll()
        awaitingAnswer = 0
        // A status request may have gone to either instance; asking again is harmless (an
        // answer nobody waits for is dropped).
        for index in statusCalls.indices {
            statusCalls[index].sentSerial = nil
            outbox.append(Outgoing(message: .statusRequest, note: .status))
        }
        for route in routes.values.joined().sorted(by: { $0.order < $1.order }) {
            let id = route.submit.requestID
            let index = routes[id]!.firstIndex { $0.token == route.token }!
            if route.ended || route.cancelled {
                // Its consumer is done with it, and the new broker never heard of it.
                endRoute(id, at: index, .cancelled, &actions)
                continue
            }
            routes[id]![index].sentSerial = nil
            if route.degradedDelivered { routes[id]![index].submit.delivery = .final }
            let submit = routes[id]![index].submit
            outbox.append(Outgoing(message: .submit(submit, image: route.image), note: .route(id, route.token)))
        }
    }

    /// Fails everything outstanding and has the loop connect afresh, so that nothing from the
    /// old conversation reaches later requests.
    mutating func startOver(failing error: EnlargerClientError, _ actions: inout [Action]) {
        failAll(error, &actions)
        actions.append(.reconnect)
        heardOnConnection = false
        busySince = nil
        brokerInstance = nil
    }

    /// Fails every request and waiting call with `error`, in the order they were made, and
    /// forgets them.
    mutating func failAll(_ error: EnlargerClientError, _ actions: inout [Action]) {
        for route in routes.values.joined().sorted(by: { $0.order < $1.order }) where !route.ended {
            actions.append(.fail(route.token, error))
        }
        routes.removeAll()
        routeIDs.removeAll()
        deadlines.removeAll()
        pendingSyncs.removeAll()
        outbox.removeAll()
        awaitingAnswer = 0
        for call in cancelCalls.values.joined().sorted(by: { $0.order < $1.order }) {
            if let token = call.token { actions.append(.answerCancel(token, .failure(error))) }
        }
        cancelCalls.removeAll()
        for call in statusCalls {
            if let token = call.token { actions.append(.answerStatus(token, .failure(error))) }
        }
        statusCalls.removeAll()
    }
}
