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
            noteBusy(now: now)
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
    /// DEADLINE_EXCEEDED itself, had it been reachable) fail here. The broker is asked to
    /// cancel one on the wire in case it still works on it, and the route stays, ended, to
    /// absorb the broker's frames about it until its end is heard. One still waiting behind
    /// an earlier route with its id was never sent: it simply goes.
    private mutating func expireDeadlines(now: Instant, _ actions: inout [Action]) {
        while let token = deadlines.popExpired(at: now) {
            guard let id = routeIDs[token], let index = routes[id]?.firstIndex(where: { $0.token == token }) else { continue }
            actions.append(.fail(token, .failed(.deadlineExceeded, "no end heard from the broker within the request's timeout")))
            guard index == 0 else {
                removeRoute(id, at: index)
                continue
            }
            routes[id]![0].ended = true
            routes[id]![0].deadline = nil
            // A request the caller cancelled has its Cancel on the way already.
            if !routes[id]![0].cancelled { queueCancel(id, Call(token: nil)) }
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
    //
    // A broker that restarted on the same endpoint answers like the old one but has
    // forgotten every request sent to it. (What the old connection had not delivered does not
    // reach the new one either: the socket sets ZMQ_IMMEDIATE, so libzmq drops it.) The
    // client learns of it from the first message carrying the new instance number (Accepted,
    // Pong, SyncReply) and asks the new instance at once, with a Sync, which requests it
    // holds: any it got before the client noticed stay, the others are submitted again when
    // the reply comes (see `syncReply`). Calls whose answers were lost with the old instance
    // are found by the same reply.

    mutating func noteBrokerInstance(_ instance: UInt64, now: Instant, _ actions: inout [Action]) {
        guard instance != 0 else { return }  // a broker that does not say
        if let known = brokerInstance, known != instance {
            if configuration.resubmitAfterBrokerRestart {
                lastSync = now - configuration.syncInterval  // a Sync is due at once
            } else {
                startOver(failing: .brokerLost, &actions)
            }
        }
        brokerInstance = instance
    }

    /// Fails everything outstanding and has the loop connect afresh, so that nothing from the
    /// old conversation reaches later requests.
    ///
    /// A broker that fell silent may only have paused, and still hold the requests sent to
    /// it. Those talk to the new connection as soon as a Sync names their ids (the broker
    /// moves them there), which a later request with the same id would cause: so each stays,
    /// ended, to absorb what the broker says about it until a Sync reply settles it, however
    /// many connections that takes, and a later request with its id waits for that.
    mutating func startOver(failing error: EnlargerClientError, _ actions: inout [Action]) {
        let carried = routes.values.compactMap { $0[0].sentSerial != nil ? $0[0] : nil }
        failAll(error, &actions)
        for var route in carried {
            route.ended = true
            route.deadline = nil
            route.sentSerial = 0  // as if sent before anything on the new connection
            routes[route.submit.requestID] = [route]
            routeIDs[route.token] = route.submit.requestID
            awaitingAnswer += 1
        }
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
