import EnlargerProtocol

// MARK: - Clients
//
// Clients talk to the broker through the client ROUTER. Any message from a client with live
// requests counts as a sign of life. A message that fails to decode is answered with
// Error{MALFORMED}, except a Submit whose request id could be read: that one gets
// Rejected{MALFORMED}, so the producer learns which request never existed.

extension BrokerCore {
    mutating func handleClientFrames(
        from peer: PeerID, _ frames: some RandomAccessCollection<Payload>, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
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
            self.submit(submit, image: image, from: peer, now: now, &actions)
        case .cancel(let cancel):
            self.cancel(cancel.requestID, from: peer, now: now, &actions)
        case .statusRequest:
            send(.statusReply(status(now: now)), to: peer, &actions)
        case .ping:
            var pong = Enlarger_V1_Pong()
            pong.heartbeatIntervalMs = UInt32(clamping: configuration.heartbeatInterval.milliseconds)
            pong.brokerInstance = configuration.instance
            send(.pong(pong), to: peer, &actions)
        }
    }

    private mutating func clientSentMalformed(_ peer: PeerID, _ error: FrameError, _ actions: inout [Action]) {
        counters.malformedDropped += 1
        actions.append(.report(.malformed(peer, role: .client, reason: error.description)))
        if let requestID = error.requestID {
            counters.submitted += 1
            counters.rejected += 1
            send(.rejected(rejection(requestID, .malformed, error.description)), to: peer, &actions)
        } else {
            var reply = Enlarger_V1_Error()
            reply.code = .malformed
            reply.message = error.description
            send(.error(reply), to: peer, &actions)
        }
    }

    // MARK: Submit
    //
    // A Submit is checked in this order: shutdown, spec, size, duplicate id, queue room.
    // Only then is it accepted: it gets a job id, joins the back of the queue, and the
    // client is tracked for liveness. Dispatch follows at once if a worker has credit.

    private mutating func submit(
        _ submit: Enlarger_V1_Submit, image: Payload, from peer: PeerID, now: MonotonicInstant,
        _ actions: inout [Action]
    ) {
        counters.submitted += 1
        let requestID = submit.requestID
        if let (code, message) = refusal(of: submit, image: image) {
            counters.rejected += 1
            send(.rejected(rejection(requestID, code, message)), to: peer, &actions)
            return
        }
        guard jobIDsByRequestID[requestID] == nil else {
            counters.duplicateIds += 1
            var failed = Enlarger_V1_Failed()
            failed.requestID = requestID
            failed.code = .duplicateID
            failed.message = "a request with this id is already live; it is unaffected"
            send(.failed(failed), to: peer, &actions)
            return
        }
        let overload: String? =
            if queue.count >= configuration.queueLimit {
                "the queue is full (\(configuration.queueLimit) waiting)"
            } else if liveImageBytes + image.count > configuration.maxLiveImageBytes {
                "the broker holds \(liveImageBytes) bytes of images (limit \(configuration.maxLiveImageBytes))"
            } else if (clients[peer]?.jobIDs.count ?? 0) >= configuration.maxLiveRequestsPerClient {
                "this connection has \(configuration.maxLiveRequestsPerClient) live requests already"
            } else {
                nil
            }
        if let overload {
            counters.rejected += 1
            send(.rejected(rejection(requestID, .overloaded, overload)), to: peer, &actions)
            return
        }

        let jobID = nextJobID
        nextJobID += 1
        requests[jobID] = Request(
            requestID: requestID, client: peer, spec: submit.spec, delivery: submit.delivery, image: image)
        jobIDsByRequestID[requestID] = jobID
        liveImageBytes += image.count
        clients[peer, default: Client(lastSeen: now)].jobIDs.insert(jobID)
        queue.append(jobID)
        counters.accepted += 1
        var accepted = Enlarger_V1_Accepted()
        accepted.requestID = requestID
        accepted.brokerInstance = configuration.instance
        send(.accepted(accepted), to: peer, &actions)
        dispatch(&actions)
    }

    private func refusal(
        of submit: Enlarger_V1_Submit, image: Payload
    ) -> (Enlarger_V1_ErrorCode, String)? {
        if isShuttingDown { return (.brokerShutdown, "the broker is shutting down") }
        do {
            try submit.spec.validate()
            try submit.delivery.validate()
        } catch {
            return (.invalidArgument, error.message)
        }
        if image.count > configuration.maxInputBytes {
            return (.tooLarge, "input of \(image.count) bytes exceeds the limit of \(configuration.maxInputBytes)")
        }
        return nil
    }

    private func rejection(
        _ requestID: String, _ code: Enlarger_V1_ErrorCode, _ message: String
    ) -> Enlarger_V1_Rejected {
        var rejected = Enlarger_V1_Rejected()
        rejected.requestID = requestID
        rejected.code = code
        rejected.message = message
        return rejected
    }

    // MARK: Cancel
    //
    // Cancel works from any connection. A live request is withdrawn (off the queue, or its
    // worker told to stop with its credit held by a tombstone), its submitter gets Cancelled
    // as the terminal event, and the canceller gets CancelAck{CANCELLED}. Otherwise the
    // canceller learns whether the id ended recently (FINISHED) or is unknown.

    private mutating func cancel(
        _ requestID: String, from canceller: PeerID, now: MonotonicInstant, _ actions: inout [Action]
    ) {
        var ack = Enlarger_V1_CancelAck()
        ack.requestID = requestID
        if let jobID = jobIDsByRequestID[requestID] {
            withdraw(jobID, now: now, &actions)
            let request = endRequest(jobID, now: now)
            counters.cancelled += 1
            var cancelled = Enlarger_V1_Cancelled()
            cancelled.requestID = requestID
            send(.cancelled(cancelled), to: request.client, &actions)
            ack.outcome = .cancelled
        } else {
            ack.outcome = endedRequests.contains(requestID, at: now) ? .finished : .unknown
        }
        send(.cancelAck(ack), to: canceller, &actions)
    }

    // MARK: Vanished clients
    //
    // A client that went silent (or whose connection is gone) with live requests cannot
    // receive anything: its requests are withdrawn and counted as cancelled, without a
    // Cancelled event, and the workers holding them are told to stop.

    mutating func clientVanished(_ peer: PeerID, now: MonotonicInstant, _ actions: inout [Action]) {
        guard let client = clients[peer] else { return }
        for jobID in client.jobIDs.sorted() {
            withdraw(jobID, now: now, &actions)
            endRequest(jobID, now: now)
            counters.cancelled += 1
        }
        counters.clientsVanished += 1
        actions.append(.report(.clientVanished(peer, cancelled: client.jobIDs.count)))
    }

    func send(_ message: BrokerToClientMessage<Payload>, to peer: PeerID, _ actions: inout [Action]) {
        actions.append(.sendToClient(peer, message.encoded()))
    }
}
