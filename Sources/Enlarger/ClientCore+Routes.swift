import EnlargerProtocol
import ImageModel

// MARK: - The broker's messages
//
// Every frame about an id is about the first route with the id, the only one on the wire:
// the answer to its Submit (Accepted, Rejected, Failed{DUPLICATE_ID}) while it is not
// accepted, everything else once it is. A frame that does not fit is about another request
// with the id (see the type's notes) and is dropped. A route that has had its terminal
// action already only absorbs frames until the broker's own end. Answers to calls go to the
// oldest call waiting: per id for CancelAck, in order for StatusReply. Any message, even one
// that does not decode, shows that the broker is there.

extension ClientCore {
    /// A message arrived from the broker.
    mutating func received(_ message: BrokerToClientMessage<Payload>, now: Instant) -> [Action] {
        guard !isClosed else { return [] }
        heard(now: now)
        var actions: [Action] = []
        switch message {
        case .accepted(let accepted):
            noteBrokerInstance(accepted.brokerInstance, now: now, &actions)
            adoptInterval(accepted.heartbeatIntervalMs)
            if accepted.digestsUnused != digestsUnused {
                digestsUnused = accepted.digestsUnused
                actions.append(.digestsUnused(digestsUnused))
            }
            let id = accepted.requestID
            guard let route = routes[id]?.first, route.sentSerial != nil, !route.accepted else { break }
            routes[id]![0].accepted = true
            if accepted.brokerInstance != 0 { routes[id]![0].instance = accepted.brokerInstance }
            // A resubmitted request was announced before.
            guard !route.announced, !route.ended else { break }
            routes[id]![0].announced = true
            actions.append(.deliver(route.token, .accepted, terminal: false))
        case .started(let started):
            guard let route = acceptedRoute(started.requestID), !route.ended else { break }
            actions.append(.deliver(route.token, .started(attempt: Int(started.attempt)), terminal: false))
        case .result(let result, let image):
            self.result(result, image: image, &actions)
        case .download(let download):
            guard let route = acceptedRoute(download.requestID), !route.ended,
                  let progress = DownloadProgress(download) else { break }
            actions.append(.deliver(route.token, .download(progress), terminal: false))
        case .failed(let failed) where failed.code == .duplicateID:
            guard let route = routes[failed.requestID]?.first, route.sentSerial != nil, !route.accepted else { break }
            endRoute(failed.requestID, .duplicateID(failed.message), &actions)
        case .rejected(let rejected):
            guard let route = routes[rejected.requestID]?.first, route.sentSerial != nil, !route.accepted else { break }
            endRoute(rejected.requestID, .rejected(.init(rejected.code), rejected.message), &actions)
        case .failed(let failed):
            guard acceptedRoute(failed.requestID) != nil else { break }
            endRoute(failed.requestID, .failed(.init(failed.code), failed.message), &actions)
        case .cancelled(let cancelled):
            guard acceptedRoute(cancelled.requestID) != nil else { break }
            endRoute(cancelled.requestID, .cancelled, &actions)
        case .cancelAck(let ack):
            cancelAnswered(ack, &actions)
        case .statusReply(let reply):
            guard !statusCalls.isEmpty else { break }  // asked twice after a restart: one answer suffices
            let call = statusCalls.removeFirst()
            if call.sentSerial != nil { awaitingAnswer -= 1 }
            if let token = call.token { actions.append(.answerStatus(token, .success(BrokerStatus(reply)))) }
        case .pong(let pong):
            adoptInterval(pong.heartbeatIntervalMs)
            if pong.maxInputBytes > 0 { brokerMaxInputBytes = Int(clamping: pong.maxInputBytes) }
            noteBrokerInstance(pong.brokerInstance, now: now, &actions)
        case .syncReply(let reply):
            syncReply(reply, now: now, &actions)
        case .error:
            // A sign of life only: an Error names no request, so there is nobody to tell.
            break
        case .batchEnded:
            // A batch's outcome is read from its items' own ends, which the broker keeps
            // consistent with it (see `EnlargerClient.resize(batch:)`).
            break
        }
        noteBusy(now: now)
        return actions
    }

    /// The id's route on the wire, if the broker accepted it: the one a frame about the id
    /// other than an answer to a Submit is about.
    private func acceptedRoute(_ id: String) -> Route? {
        guard let route = routes[id]?.first, route.accepted else { return nil }
        return route
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
        guard let route = acceptedRoute(id) else { return }
        switch RequestEvent.reading(result, image: image) {
        case .success(let event):
            if route.ended {
                if result.terminal { finishRoute(id) }
                return
            }
            if case .degraded = event {
                // After a resubmission only the final may come; a second degraded never.
                guard !route.degradedDelivered else { return }
                routes[id]![0].degradedDelivered = true
            }
            if case .placeholder = event {
                // Once, and only before any image.
                guard !route.placeholderDelivered, !route.degradedDelivered else { return }
                routes[id]![0].placeholderDelivered = true
            }
            actions.append(.deliver(route.token, event, terminal: result.terminal))
            if result.terminal { finishRoute(id) }
        case .failure(let violation):
            endRoute(id, violation, &actions)
        }
    }

    /// The answer to the oldest Cancel for the id. Whatever the broker had to say about a
    /// request sent before that Cancel came before the answer: a cancelled or timed-out
    /// route sent before it is done.
    private mutating func cancelAnswered(_ ack: Enlarger_V1_CancelAck, _ actions: inout [Action]) {
        let id = ack.requestID
        guard var calls = cancelCalls[id], !calls.isEmpty else { return }
        let call = calls.removeFirst()
        cancelCalls[id] = calls.isEmpty ? nil : calls
        if call.sentSerial != nil { awaitingAnswer -= 1 }
        if let token = call.token { actions.append(.answerCancel(token, .success(CancelResult(ack.outcome)))) }
        if let route = routes[id]?.first, route.cancelled || route.ended,
           let routeSent = route.sentSerial, let cancelSent = call.sentSerial, routeSent < cancelSent {
            endRoute(id, .cancelled, &actions)
        }
    }

    // MARK: Sync
    //
    // The broker answers a connection's messages in order, so its reply to a Sync comes
    // after everything it had to say about what the socket sent before that Sync. A request
    // sent before it that the broker does not hold has ended without the client hearing the
    // end (a reset connection lost it): it fails `.requestLost`; unless it was sent while
    // another broker instance held it, and is submitted again to this one. A call sent
    // before the Sync and still unanswered lost its message or its answer the same way. A
    // status call is simply asked again. A Cancel is sent again only while the request on
    // the wire with its id (if any) is one the caller cancelled or that timed out: a later
    // request with the id would be hit by it instead, so then the waiting call fails
    // `.requestLost`.

    private mutating func syncReply(_ reply: Enlarger_V1_SyncReply, now: Instant, _ actions: inout [Action]) {
        noteBrokerInstance(reply.brokerInstance, now: now, &actions)
        guard let serial = pendingSyncs.removeValue(forKey: reply.nonce) else { return }
        // Syncs are answered in order: an older one without a reply was lost.
        pendingSyncs = pendingSyncs.filter { $0.key > reply.nonce }
        // Before any route ends here: a Cancel sent again must go before the Submit of the
        // next route with its id.
        askAgain(sentBefore: serial, &actions)
        for id in Set(reply.unknownRequestIds).sorted() {
            guard let route = routes[id]?.first, let sent = route.sentSerial, sent < serial else { continue }
            let restarted = reply.brokerInstance != 0 && (route.instance ?? reply.brokerInstance) != reply.brokerInstance
            if restarted && configuration.resubmitAfterBrokerRestart && !route.cancelled && !route.ended {
                routes[id]![0].sentSerial = nil
                routes[id]![0].accepted = false
                awaitingAnswer -= 1
                if route.degradedDelivered { routes[id]![0].submit.delivery = .final }
                if route.placeholderDelivered { routes[id]![0].submit.noPlaceholder = true }
                queueSubmit(id)
            } else {
                endRoute(id, .failed(.requestLost, "the broker no longer holds this request; its end was lost (connection reset?)"),
                         &actions)
            }
        }
    }

    private mutating func askAgain(sentBefore serial: UInt64, _ actions: inout [Action]) {
        func isLost(_ call: Call) -> Bool { call.sentSerial.map { $0 < serial } ?? false }
        for id in cancelCalls.keys.sorted() {
            let calls = cancelCalls[id]!
            let lost = calls.filter(isLost)
            guard !lost.isEmpty else { continue }
            awaitingAnswer -= lost.count
            // Behind every call sent or queued since: answers come in the order of the Cancels.
            cancelCalls[id] = calls.filter { !isLost($0) }
            if cancelCalls[id]!.isEmpty { cancelCalls[id] = nil }
            let safe = routes[id].map { $0[0].cancelled || $0[0].ended } ?? true
            for var call in lost {
                if safe {
                    call.sentSerial = nil
                    queueCancel(id, call)
                } else if let token = call.token {
                    actions.append(.answerCancel(token, .failure(.failed(
                        .requestLost, "the broker's answer to this cancel was lost (connection reset?)"))))
                }
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

    /// Fails the id's route on the wire with `error`, unless it had its terminal action
    /// already, and forgets it.
    mutating func endRoute(_ id: String, _ error: EnlargerClientError, _ actions: inout [Action]) {
        guard let route = routes[id]?.first else { return }
        if !route.ended { actions.append(.fail(route.token, error)) }
        finishRoute(id)
    }

    /// Forgets the id's route on the wire; the next one with the id, if any, goes out.
    mutating func finishRoute(_ id: String) {
        removeRoute(id, at: 0)
        if routes[id] != nil { queueSubmit(id) }
    }

    mutating func removeRoute(_ id: String, at index: Int) {
        let route = routes[id]!.remove(at: index)
        if routes[id]!.isEmpty { routes[id] = nil }
        routeIDs[route.token] = nil
        deadlines.remove(route.token)
        if route.sentSerial != nil { awaitingAnswer -= 1 }
    }
}

extension RequestEvent {
    /// The event for a Result frame, or the failure that ends the request when the result
    /// is one this version cannot read (an unknown stage or format).
    fileprivate static func reading<Payload: FrameBytes>(
        _ result: Enlarger_V1_Result, image: Payload
    ) -> Result<RequestEvent, EnlargerClientError> {
        if result.stage == .info {
            guard result.hasInfo else { return .failure(.failed(.malformed, "the broker sent an info result without info")) }
            return .success(.info(ImageInfo(result.info)))
        }
        if result.stage == .placeholder {
            return .success(.placeholder(Placeholder(width: Int(result.width), height: Int(result.height),
                                                     thumbHash: Array(result.placeholder))))
        }
        let format: OutputFormat
        switch result.format {
        case .jpeg: format = .jpeg
        case .pnm: format = .pnm
        case .png: format = .png
        case .webp: format = .webp
        case .avif: format = .avif
        case .UNRECOGNIZED(let value):
            return .failure(.failed(.malformed, "the broker sent a result in unknown format \(value)"))
        }
        let bytes = image.withUnsafeBytes { Array($0) }
        var encoded = EncodedImage(bytes: bytes, width: Int(result.width), height: Int(result.height), format: format)
        encoded.notes = result.notes
        encoded.cached = result.cached
        encoded.variant = Int(result.variant)
        switch result.stage {
        case .degraded: return .success(.degraded(encoded))
        case .final: return .success(.final(encoded))
        case .unspecified, .info, .placeholder, .UNRECOGNIZED:
            return .failure(.failed(.malformed, "the broker sent a result with stage \(result.stage)"))
        }
    }
}

extension ImageInfo {
    init(_ info: Enlarger_V1_ImageInfo) {
        self.init(format: info.format, width: Int(info.width), height: Int(info.height), orientation: Int(info.orientation),
                  channels: Int(info.channels), hasAlpha: info.hasAlpha_p, bitDepth: Int(info.bitDepth),
                  colorSpace: info.colorSpace, profileDescription: info.profileDescription.isEmpty ? nil : info.profileDescription,
                  profileBytes: Int(info.profileBytes), progressive: info.progressive,
                  hasEmbeddedThumbnail: info.hasEmbeddedThumbnail_p, byteSize: Int(clamping: info.byteSize),
                  hasGainMap: info.hasGainMap_p)
    }
}

extension DownloadProgress {
    /// The wire's Download, or nil for a phase this client does not know.
    init?(_ download: Enlarger_V1_Download) {
        let phase: Phase
        switch download.phase {
        case .started: phase = .started
        case .progress: phase = .progress
        case .finished: phase = .finished
        case .unspecified, .UNRECOGNIZED: return nil
        }
        self.init(phase: phase, bytes: Int(clamping: download.bytes),
                  expectedBytes: download.expectedBytes > 0 ? Int(clamping: download.expectedBytes) : nil)
    }
}
