import EnlargerProtocol

// MARK: - Clients
//
// Clients talk to the broker through the client ROUTER, each connection under the principal
// it authenticated as. Any message from a client with live requests counts as a sign of
// life. A message that fails to decode is answered with Error{MALFORMED}, except a Submit
// whose request id could be read: that one gets Rejected{MALFORMED}, so the producer learns
// which request never existed.

extension BrokerCore {
    mutating func handleClientFrames(
        from peer: PeerID, principal: Principal, _ frames: some RandomAccessCollection<Payload>,
        now: MonotonicInstant, _ actions: inout [Action]
    ) {
        if let known = clients[peer]?.principal, known != principal {
            // The routing id was handed over to a connection of another principal: the old
            // connection is gone, and nothing of its requests may reach the new one.
            clientVanished(peer, reason: "its routing id was taken over", notify: false, now: now, &actions)
        }
        clients[peer]?.lastSeen = now
        let message: ClientToBrokerMessage<Payload>
        do {
            message = try ClientToBrokerMessage(frames: frames)
        } catch {
            clientSentMalformed(peer, error, &actions)
            return
        }
        switch message {
        case .submit(let submit, let image):
            self.submit(submit, image: image, from: peer, principal: principal, now: now, &actions)
        case .cancel(let cancel):
            self.cancel(cancel.requestID, from: peer, principal: principal, now: now, &actions)
        case .statusRequest:
            send(.statusReply(status(now: now, for: principal)), to: peer, &actions)
        case .ping:
            var pong = Enlarger_V1_Pong()
            pong.heartbeatIntervalMs = UInt32(clamping: configuration.heartbeatInterval.milliseconds)
            pong.brokerInstance = configuration.instance
            pong.maxInputBytes = UInt64(configuration.maxInputBytes)
            send(.pong(pong), to: peer, &actions)
        case .sync(let sync):
            self.sync(sync, from: peer, principal: principal, now: now, &actions)
        }
    }

    private mutating func clientSentMalformed(_ peer: PeerID, _ error: FrameError, _ actions: inout [Action]) {
        counters.malformedDropped += 1
        actions.append(.report(.malformed(peer, role: .client, reason: error.description)))
        if let requestID = error.requestID {
            counters.submitted += 1
            reject(requestID, .malformed, error.description, to: peer, &actions)
        } else {
            var reply = Enlarger_V1_Error()
            reply.code = .malformed
            reply.message = error.description
            send(.error(reply), to: peer, &actions)
        }
    }

    // MARK: Submit
    //
    // A Submit is checked in this order: shutdown, spec, size, duplicate id (within the
    // principal), room (queue, image bytes, the connection's share). Only then is it
    // accepted: it gets a job id and a deadline, joins the back of the queue, and the client
    // is tracked for liveness. Dispatch follows at once if a worker has credit.

    private mutating func submit(
        _ submit: Enlarger_V1_Submit, image: Payload, from peer: PeerID, principal: Principal,
        now: MonotonicInstant, _ actions: inout [Action]
    ) {
        counters.submitted += 1
        let requestID = submit.requestID
        let key = RequestKey(principal: principal, id: requestID)
        if let (code, message) = refusal(of: submit, image: image) {
            reject(requestID, code, message, to: peer, &actions)
            return
        }
        guard jobIDsByKey[key] == nil else {
            counters.duplicateIds += 1
            var failed = Enlarger_V1_Failed()
            failed.requestID = requestID
            failed.code = .duplicateID
            failed.message = "a request with this id is already live; it is unaffected"
            send(.failed(failed), to: peer, &actions)
            return
        }
        let waiting = queue.count + quarantine.count
        let overload: String? =
            if waiting >= configuration.queueLimit {
                "the queue is full (\(configuration.queueLimit) waiting)"
            } else if liveImageBytes + image.count > configuration.maxLiveImageBytes {
                "the broker holds \(liveImageBytes) bytes of images (limit \(configuration.maxLiveImageBytes))"
            } else if (clients[peer]?.jobIDs.count ?? 0) >= configuration.maxLiveRequestsPerClient {
                "this connection has \(configuration.maxLiveRequestsPerClient) live requests already"
            } else {
                nil
            }
        if let overload {
            reject(requestID, .overloaded, overload, to: peer, &actions)
            return
        }

        let lifetime = submit.deadlineMs == 0
            ? configuration.defaultDeadline : min(.milliseconds(submit.deadlineMs), configuration.maxDeadline)
        let jobID = nextJobID
        nextJobID += 1
        requests[jobID] = Request(
            key: key, client: peer, spec: submit.spec, delivery: submit.delivery, image: image,
            deadline: now + lifetime, acceptedAt: now)
        jobIDsByKey[key] = jobID
        liveImageBytes += image.count
        deadlines.insert(jobID, at: now + lifetime)
        var client = clients[peer] ?? Client(principal: principal, lastSeen: now)
        client.jobIDs.insert(jobID)
        client.waitingBytes = clientBytesWaiting[peer] ?? 0
        clients[peer] = client
        queue.append(jobID)
        counters.accepted += 1
        var accepted = Enlarger_V1_Accepted()
        accepted.requestID = requestID
        accepted.brokerInstance = configuration.instance
        accepted.heartbeatIntervalMs = UInt32(clamping: configuration.heartbeatInterval.milliseconds)
        accepted.deadlineMs = UInt32(clamping: lifetime.milliseconds)
        send(.accepted(accepted), to: peer, &actions)
        dispatch(now: now, &actions)
    }

    private func refusal(
        of submit: Enlarger_V1_Submit, image: Payload
    ) -> (Enlarger_V1_ErrorCode, String)? {
        if isShuttingDown { return (.brokerShutdown, "the broker is shutting down") }
        do {
            try submit.delivery.validate()
            // An info request reads only the header: of the spec only fail_on counts.
            if submit.delivery == .info { try submit.spec.validateFailOn() } else { try submit.spec.validate() }
        } catch {
            return (.invalidArgument, error.message)
        }
        if image.count > configuration.maxInputBytes {
            return (.tooLarge, "input of \(image.count) bytes exceeds the limit of \(configuration.maxInputBytes)")
        }
        return nil
    }

    /// Answers a Submit that is not accepted: `Rejected`, counted and reported.
    private mutating func reject(
        _ requestID: String, _ code: Enlarger_V1_ErrorCode, _ message: String, to peer: PeerID,
        _ actions: inout [Action]
    ) {
        counters.rejected += 1
        var rejected = Enlarger_V1_Rejected()
        rejected.requestID = requestID
        rejected.code = code
        rejected.message = message
        actions.append(.report(.requestRejected(requestID: requestID, code: code)))
        send(.rejected(rejected), to: peer, &actions)
    }

    // MARK: Cancel
    //
    // Cancel works from any connection of the submitter's principal (an admin's reaches
    // every principal's requests with the id). A live request is withdrawn (off the queue,
    // or its worker told to stop with its credit held by a tombstone), its submitter gets
    // Cancelled as the terminal event, and the canceller gets CancelAck{CANCELLED}.
    // Otherwise the canceller learns whether the id ended recently (FINISHED) or is unknown;
    // another principal's ids are always unknown to it.

    private mutating func cancel(
        _ requestID: String, from canceller: PeerID, principal: Principal, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        var ack = Enlarger_V1_CancelAck()
        ack.requestID = requestID
        let key = RequestKey(principal: principal, id: requestID)
        var targets: [UInt64] = jobIDsByKey[key].map { [$0] } ?? []
        if targets.isEmpty, isAdmin(principal) {
            targets = jobIDsByKey.filter { $0.key.id == requestID }.map(\.value).sorted()
        }
        if targets.isEmpty {
            ack.outcome = endedRequests.contains(key, at: now) ? .finished : .unknown
        } else {
            for jobID in targets {
                withdraw(jobID, now: now, &actions)
                let request = endRequest(jobID, .cancelled, now: now, &actions)
                var cancelled = Enlarger_V1_Cancelled()
                cancelled.requestID = requestID
                send(.cancelled(cancelled), to: request.client, &actions)
            }
            ack.outcome = .cancelled
            dispatch(now: now, &actions)
        }
        send(.cancelAck(ack), to: canceller, &actions)
    }

    // MARK: Sync
    //
    // A client names the requests it waits for; the reply lists those the broker does not
    // hold for its principal (they ended and the client missed the end, or never arrived).
    // The ones it does hold move to this connection, so a client that reconnected under a
    // new routing id gets its results again.

    private mutating func sync(
        _ sync: Enlarger_V1_Sync, from peer: PeerID, principal: Principal, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        guard sync.requestIds.count <= WireLimits.maxSyncRequestIDs else {
            var reply = Enlarger_V1_Error()
            reply.code = .malformed
            reply.message = "Sync names \(sync.requestIds.count) ids; at most \(WireLimits.maxSyncRequestIDs)"
            counters.malformedDropped += 1
            send(.error(reply), to: peer, &actions)
            return
        }
        var reply = Enlarger_V1_SyncReply()
        reply.nonce = sync.nonce
        reply.brokerInstance = configuration.instance
        for requestID in sync.requestIds {
            guard let jobID = jobIDsByKey[RequestKey(principal: principal, id: requestID)] else {
                reply.unknownRequestIds.append(requestID)
                continue
            }
            moveRequest(jobID, to: peer, principal: principal, now: now)
        }
        send(.syncReply(reply), to: peer, &actions)
    }

    private mutating func moveRequest(_ jobID: UInt64, to peer: PeerID, principal: Principal, now: MonotonicInstant) {
        guard let request = requests[jobID], request.client != peer else { return }
        let old = request.client
        if var client = clients[old] {
            client.jobIDs.remove(jobID)
            if request.heldBack { client.heldBack.removeAll { $0 == jobID } }
            clients[old] = client.jobIDs.isEmpty ? nil : client
        }
        var client = clients[peer] ?? Client(principal: principal, lastSeen: now)
        client.jobIDs.insert(jobID)
        client.waitingBytes = clientBytesWaiting[peer] ?? 0
        if request.heldBack { client.heldBack.append(jobID) }
        clients[peer] = client
        requests[jobID]?.client = peer
    }

    // MARK: Vanished clients
    //
    // A client that went silent (or could not be reached) with live requests: its requests
    // are withdrawn, its workers told to stop, and each request ends with
    // Failed{CLIENT_SILENT} (sent in case the client is still there to read it; a client
    // that only stopped reading gets it when it reads again). When the routing id now
    // belongs to another principal's connection, nothing is sent: it is not theirs to read.

    mutating func clientVanished(
        _ peer: PeerID, reason: String, notify: Bool = true, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        guard let client = clients[peer] else { return }
        for jobID in client.jobIDs.sorted() {
            withdraw(jobID, now: now, &actions)
            let request = endRequest(jobID, .failed(.clientSilent), now: now, &actions)
            if notify { sendFailed(request, .clientSilent, "the broker gave the request up: \(reason)", &actions) }
        }
        clients[peer] = nil
        counters.clientsVanished += 1
        actions.append(.report(.clientVanished(peer, cancelled: client.jobIDs.count)))
        dispatch(now: now, &actions)
    }

    func send(_ message: BrokerToClientMessage<Payload>, to peer: PeerID, _ actions: inout [Action]) {
        actions.append(.sendToClient(peer, message.encoded()))
    }
}
