import EnlargerProtocol
import Imaging

// MARK: - The broker's messages
//
// A frame about a request goes to the oldest route with its id: the broker answers a
// connection's messages in order, and ends a request before it accepts another with the
// same id. A route that has had its terminal action already (its local deadline passed) only
// absorbs frames until the broker's own end. Answers go to the oldest call waiting: per id
// for CancelAck, in order for StatusReply. Any message, even one that does not decode,
// shows that the broker is there.

extension ClientCore {
    /// A message arrived from the broker.
    mutating func received(_ message: BrokerToClientMessage<Payload>, now: Instant) -> [Action] {
        guard !isClosed else { return [] }
        heard(now: now)
        var actions: [Action] = []
        switch message {
        case .accepted(let accepted):
            noteBrokerInstance(accepted.brokerInstance, &actions)
            adoptInterval(accepted.heartbeatIntervalMs)
            // The oldest route; a resubmitted one was accepted before, and its consumer saw it.
            guard let route = routes[accepted.requestID]?.first, !route.accepted else { break }
            routes[accepted.requestID]![0].accepted = true
            if !route.ended { actions.append(.deliver(route.token, .accepted, terminal: false)) }
        case .started(let started):
            guard let route = routes[started.requestID]?.first, !route.ended else { break }
            actions.append(.deliver(route.token, .started(attempt: Int(started.attempt)), terminal: false))
        case .result(let result, let image):
            self.result(result, image: image, &actions)
        case .failed(let failed) where failed.code == .duplicateID:
            // Answers only the duplicate Submit: the newest route with the id that was not
            // accepted (the live one, accepted earlier, is untouched).
            let id = failed.requestID
            guard let index = routes[id]?.lastIndex(where: { !$0.accepted }) else { break }
            endRoute(id, at: index, .duplicateID(failed.message), &actions)
        case .failed(let failed):
            endOldest(failed.requestID, .failed(.init(failed.code), failed.message), &actions)
        case .cancelled(let cancelled):
            endOldest(cancelled.requestID, .cancelled, &actions)
        case .rejected(let rejected):
            endOldest(rejected.requestID, .rejected(.init(rejected.code), rejected.message), &actions)
        case .cancelAck(let ack):
            guard let call = removeOldestCancel(ack.requestID) else { break }
            if let token = call.token { actions.append(.answerCancel(token, .success(CancelResult(ack.outcome)))) }
            if let retired = call.retires, let index = routes[ack.requestID]?.firstIndex(where: { $0.token == retired }) {
                // Whatever the broker had to say about it came before this answer.
                removeRoute(ack.requestID, at: index)
            }
        case .statusReply(let reply):
            guard !statusCalls.isEmpty else { break }  // asked twice after a restart: one answer suffices
            let call = statusCalls.removeFirst()
            if call.sentSerial != nil { awaitingAnswer -= 1 }
            if let token = call.token { actions.append(.answerStatus(token, .success(BrokerStatus(reply)))) }
        case .pong(let pong):
            adoptInterval(pong.heartbeatIntervalMs)
            if pong.maxInputBytes > 0 { brokerMaxInputBytes = Int(clamping: pong.maxInputBytes) }
            noteBrokerInstance(pong.brokerInstance, &actions)
        case .syncReply(let reply):
            syncReply(reply, &actions)
        case .error:
            // A sign of life only: an Error names no request, so there is nobody to tell.
            break
        }
        noteBusy(now: now)
        return actions
    }

    /// Something arrived that does not decode: it cannot be attributed to anything, but it
    /// shows that the broker is there.
    mutating func receivedMalformed(now: Instant) {
        guard !isClosed else { return }
        heard(now: now)
    }

    private mutating func heard(now: Instant) {
        heardOnConnection = true
        lastHeard = now
    }

    /// The broker's heartbeat interval applies at once: a broker with a shorter one than
    /// the client's would otherwise judge the client silent before its first Ping.
    private mutating func adoptInterval(_ milliseconds: UInt32) {
        guard milliseconds > 0 else { return }
        brokerInterval = .milliseconds(milliseconds)
    }

    private mutating func result(_ result: Enlarger_V1_Result, image: Payload, _ actions: inout [Action]) {
        let id = result.requestID
        guard let route = routes[id]?.first else { return }
        switch RequestEvent.reading(result, image: image) {
        case .success(let event):
            if route.ended {
                if result.terminal { removeRoute(id, at: 0) }
                return
            }
            if case .degraded = event {
                // After a resubmission only the final may come; a second degraded never.
                guard !route.degradedDelivered else { return }
                routes[id]![0].degradedDelivered = true
            }
            if result.terminal {
                actions.append(.deliver(route.token, event, terminal: true))
                removeRoute(id, at: 0)
            } else {
                actions.append(.deliver(route.token, event, terminal: false))
            }
        case .failure(let violation):
            endRoute(id, at: 0, violation, &actions)
        }
    }

    // MARK: Sync
    //
    // The broker answers a connection's messages in order, so its reply to a Sync comes
    // after everything it had to say about what the socket sent before that Sync. A request
    // sent before it that the broker does not hold has ended without the client hearing the
    // end (a reset connection lost it): it fails `.requestLost`. A call sent before it and
    // still unanswered lost its message or its answer the same way: it is asked again.

    private mutating func syncReply(_ reply: Enlarger_V1_SyncReply, _ actions: inout [Action]) {
        // A new broker instance knows none of the ids: resubmit (or fail) them as such.
        noteBrokerInstance(reply.brokerInstance, &actions)
        guard let serial = pendingSyncs.removeValue(forKey: reply.nonce) else { return }
        // Syncs are answered in order: an older one without a reply was lost.
        pendingSyncs = pendingSyncs.filter { $0.key > reply.nonce }
        for id in Set(reply.unknownRequestIds).sorted() {
            var index = 0
            while let list = routes[id], index < list.count {
                if let sent = list[index].sentSerial, sent < serial {
                    endRoute(id, at: index, .failed(
                        .requestLost, "the broker no longer holds this request; its end was lost (connection reset?)"),
                             &actions)
                } else {
                    index += 1
                }
            }
        }
        askAgain(sentBefore: serial)
    }

    private mutating func askAgain(sentBefore serial: UInt64) {
        func isLost(_ call: Call) -> Bool { call.sentSerial.map { $0 < serial } ?? false }
        for id in cancelCalls.keys.sorted() {
            let calls = cancelCalls[id]!
            let lost = calls.filter(isLost)
            guard !lost.isEmpty else { continue }
            awaitingAnswer -= lost.count
            // Behind every call sent or queued since: answers come in the order of the Cancels.
            cancelCalls[id] = calls.filter { !isLost($0) }
            for var call in lost {
                call.sentSerial = nil
                queueCancel(id, call)
            }
        }
        let lostStatus = statusCalls.filter(isLost)
        guard !lostStatus.isEmpty else { return }
        awaitingAnswer -= lostStatus.count
        statusCalls = statusCalls.filter { !isLost($0) }
        for var call in lostStatus {
            call.sentSerial = nil
            statusCalls.append(call)
            outbox.append(Outgoing(message: .statusRequest, note: .status))
        }
    }

    // MARK: Ending routes

    /// Ends the oldest route with this id with `error`.
    private mutating func endOldest(_ id: String, _ error: EnlargerClientError, _ actions: inout [Action]) {
        guard routes[id] != nil else { return }
        endRoute(id, at: 0, error, &actions)
    }

    /// Fails the route with `error`, unless it had its terminal action already, and forgets it.
    mutating func endRoute(_ id: String, at index: Int, _ error: EnlargerClientError, _ actions: inout [Action]) {
        let route = routes[id]![index]
        if !route.ended { actions.append(.fail(route.token, error)) }
        removeRoute(id, at: index)
    }

    mutating func removeRoute(_ id: String, at index: Int) {
        let route = routes[id]!.remove(at: index)
        if routes[id]!.isEmpty { routes[id] = nil }
        routeIDs[route.token] = nil
        deadlines.remove(route.token)
        if route.sentSerial != nil { awaitingAnswer -= 1 }
    }

    private mutating func removeOldestCancel(_ id: String) -> Call? {
        guard var calls = cancelCalls[id], !calls.isEmpty else { return nil }
        let call = calls.removeFirst()
        cancelCalls[id] = calls.isEmpty ? nil : calls
        if call.sentSerial != nil { awaitingAnswer -= 1 }
        return call
    }
}

extension RequestEvent {
    /// The event for a Result frame, or the failure that ends the request when the result
    /// is one this version cannot read (an unknown stage or format).
    fileprivate static func reading<Payload: FrameBytes>(
        _ result: Enlarger_V1_Result, image: Payload
    ) -> Result<RequestEvent, EnlargerClientError> {
        let format: OutputFormat
        switch result.format {
        case .jpeg: format = .jpeg
        case .pnm: format = .pnm
        case .UNRECOGNIZED(let value):
            return .failure(.failed(.malformed, "the broker sent a result in unknown format \(value)"))
        }
        let bytes = image.withUnsafeBytes { Array($0) }
        let encoded = EncodedImage(bytes: bytes, width: Int(result.width), height: Int(result.height), format: format)
        switch result.stage {
        case .degraded: return .success(.degraded(encoded))
        case .final: return .success(.final(encoded))
        case .unspecified, .UNRECOGNIZED:
            return .failure(.failed(.malformed, "the broker sent a result with stage \(result.stage)"))
        }
    }
}
