import EnlargerProtocol
import Foundation

// MARK: - Clients
//
// Clients talk to the broker through the client ROUTER, each connection under the principal
// it authenticated as. Any message from a client with live requests counts as a sign of
// life. A message that fails to decode is answered with Error{MALFORMED}, except a Submit
// whose request id could be read: that one gets Rejected{MALFORMED}, so the producer learns
// which request never existed.

extension BrokerCore {
    /// The answer to a Ping (also what the service sends a client as a filler, see
    /// `ClientPipes`).
    var pong: Enlarger_V1_Pong {
        var pong = Enlarger_V1_Pong()
        pong.heartbeatIntervalMs = UInt32(clamping: configuration.heartbeatInterval.milliseconds)
        pong.brokerInstance = configuration.instance
        pong.maxInputBytes = UInt64(configuration.maxInputBytes)
        return pong
    }

    mutating func handleClientFrames(
        from peer: PeerID, principal: Principal, _ frames: some RandomAccessCollection<Payload>,
        now: MonotonicInstant, _ actions: inout [Action]
    ) {
        if let known = clients[peer]?.principal, known != principal {
            // The routing id was handed over to a connection of another principal: the old
            // connection is gone, and nothing of its requests may reach the new one.
            clientVanished(peer, reason: "its routing id was taken over", notify: false, now: now, &actions)
        }
        // Per message: no lookup at all while no batch is live.
        if !batchPeers.isEmpty, let named = batchPeers[peer], named.principal != principal {
            batchConnectionGone(peer, keeping: principal)
        }
        clients[peer]?.lastSeen = now
        let message: ClientToBrokerMessage<Payload>
        do {
            message = try ClientToBrokerMessage(frames: frames)
        } catch {
            clientSentMalformed(peer, principal, error, &actions)
            return
        }
        switch message {
        case .submit(let submit, let image):
            self.submit(submit, image: image, from: peer, principal: principal, now: now, &actions)
        case .cancel(let cancel):
            self.cancel(cancel.requestID, from: peer, principal: principal, now: now, &actions)
        case .statusRequest:
            send(.statusReply(statusReply(for: principal, now: now)), to: peer, &actions)
        case .ping:
            send(.pong(pong), to: peer, &actions)
        case .sync(let sync):
            self.sync(sync, from: peer, principal: principal, now: now, &actions)
        }
    }

    private mutating func clientSentMalformed(
        _ peer: PeerID, _ principal: Principal, _ error: FrameError, _ actions: inout [Action]
    ) {
        counters.malformedDropped += 1
        actions.append(.report(.malformed(peer, role: .client, reason: error.description)))
        if let requestID = error.requestID {
            tally(principal, .submitted)
            reject(requestID, .malformed, error.description, to: peer, principal: principal, &actions)
        } else {
            var reply = Enlarger_V1_Error()
            reply.code = .malformed
            reply.message = error.description
            send(.error(reply), to: peer, &actions)
        }
    }

    // MARK: Submit
    //
    // A Submit is checked in this order: shutdown, its batch place, duplicate id (within the
    // principal), spec and source, size. A request that names its image's digest may then be answered
    // from the result cache at once, or join a live job for the same work (see Sharing).
    // Otherwise it needs room (queue, image bytes, the connection's share) for a job of its
    // own: it gets a job id, joins the back of the queue, and dispatch follows at once if a
    // worker has credit. Every accepted request gets a deadline, and its client is tracked
    // for liveness.

    private mutating func submit(
        _ submit: Enlarger_V1_Submit, image: Payload, from peer: PeerID, principal: Principal,
        now: MonotonicInstant, _ actions: inout [Action]
    ) {
        tally(principal, .submitted)
        let requestID = submit.requestID
        let key = RequestKey(principal: principal, id: requestID)
        let place: BatchPlace?
        switch batchPlace(of: submit, principal: principal, now: now) {
        case .success(let found):
            place = found
        case .failure(let refusal):
            reject(requestID, refusal.code, refusal.message, to: peer, principal: principal, &actions)
            if let failed = refusal.place {
                batchItemRefused(failed, requestID: requestID, size: submit.batch.size, from: peer, code: refusal.code,
                                 message: refusal.message)
            }
            return
        }
        // Any refusal of an item fails its batch.
        func refuseItem(_ code: Enlarger_V1_ErrorCode, _ message: String) {
            guard let place else { return }
            batchItemRefused(place, requestID: requestID, size: submit.batch.size, from: peer, code: code, message: message)
        }
        // Before the Submit's own faults: a Rejected would name the live request's id.
        guard requests[key] == nil else {
            tally(principal, .duplicateIds)
            var failed = Enlarger_V1_Failed()
            failed.requestID = requestID
            failed.code = .duplicateID
            failed.message = "a request with this id is already live; it is unaffected"
            send(.failed(failed), to: peer, &actions)
            // A duplicate of an item of its own batch fails nothing: failing the batch would
            // cancel the holder, which DUPLICATE_ID never ends (the place stays to be filled).
            if let place, requests[key]?.batch?.batch == place.batch { return }
            refuseItem(.duplicateID, failed.message)
            return
        }
        if let (code, message) = refusal(of: submit, image: image) {
            reject(requestID, code, message, to: peer, principal: principal, &actions)
            refuseItem(code, message)
            return
        }
        let terms = tenants.terms(for: principal)
        // A file is read beneath the principal's own directory of the files root.
        var filesScope = ""
        if case .file? = submit.source.kind {
            guard let scope = terms.files ?? (isAdmin(principal) ? "" : nil) else {
                let message = "file sources are not enabled for this principal (the operator gives it a directory "
                    + "of the files root with files=DIR in the broker's tenants file)"
                reject(requestID, .sourceRefused, message, to: peer, principal: principal, &actions)
                refuseItem(.sourceRefused, message)
                return
            }
            filesScope = scope
        }
        let lifetime = submit.deadlineMs == 0
            ? configuration.defaultDeadline : min(.milliseconds(submit.deadlineMs), configuration.maxDeadline)
        let shareKey = shareKey(of: submit, principal: principal, filesScope: filesScope)
        let variantKeys = submit.variants.map { variantKey(of: submit, spec: $0, principal: principal) }
        // Each variant is looked up under its own key: a set found whole is answered at once;
        // one found in part gets those at once and a job for the rest.
        let cachedVariants = variantKeys.enumerated().compactMap { index, variantKey in
            sharing.cached(variantKey, for: principal).map { (index: UInt32(index), hit: $0) }
        }
        if !variantKeys.isEmpty {
            if cachedVariants.count == variantKeys.count {
                answerFromCache(key, cachedVariants.map { $0.hit }, bytesIn: image.count, lifetime: lifetime, to: peer,
                                now: now, &actions)
                if let place {
                    batchItemAccepted(place, request: key, size: submit.batch.size, from: peer, finished: true,
                                      deadline: now + lifetime)
                }
                return
            }
        } else if let hit = sharing.cached(shareKey, for: principal) {
            answerFromCache(key, [hit], bytesIn: image.count, lifetime: lifetime, to: peer, now: now, &actions)
            if let place {
                batchItemAccepted(place, request: key, size: submit.batch.size, from: peer, finished: true,
                                  deadline: now + lifetime)
            }
            return
        }
        if shareKey?.namesVersion == true { tally(principal, .cacheMisses) }
        // A single output joins a job of its own kind, or takes one variant of a set still to
        // come (`onlyVariant`). A set joins a set only while it waits, with nothing sent yet: a
        // joiner must get every variant. A set that found some variants cached joins nothing.
        var onlyVariant: UInt32?
        let joining = cachedVariants.isEmpty ? sharing.joinable(shareKey).flatMap { jobID -> UInt64? in
            guard let job = jobs[jobID], Self.sameBytes(job.image, image) else { return nil }
            if !submit.variants.isEmpty {
                return job.firstDispatchedAt == nil && job.variantsSent.isEmpty ? jobID : nil
            }
            guard !job.variants.isEmpty else { return jobID }
            guard let index = job.variantKeys.firstIndex(where: { $0 == shareKey }),
                  !job.variantsSent.contains(UInt32(index)) else { return nil }
            onlyVariant = UInt32(index)
            return jobID
        } : nil
        // An admin (the operator's own, ipc peers included) is bounded by the broker's total alone.
        let imageByteLimit = terms.maxImageBytes
            ?? (isAdmin(principal) ? configuration.maxLiveImageBytes : configuration.defaultImageBytesPerPrincipal)
        // Held back (none of its clients reads) a job still waits: it counts as queued.
        let queuedByPrincipal = (waiting.queuedBy[principal] ?? 0) + (waiting.heldBackBy[principal] ?? 0)
        // A request that joins a job takes no queue slot and adds no bytes to the broker's;
        // its principal is charged the job's image all the same, unless a request of its own
        // already holds it (see `ImageHold`).
        let imageCharge = joining.map { imageBytesToJoin(jobs[$0]!.imageHold, by: principal) } ?? image.count
        let overload: String? =
            if joining == nil && waiting.count >= configuration.queueLimit {
                "the queue is full (\(configuration.queueLimit) waiting)"
            } else if joining == nil, let limit = terms.maxQueued ?? defaultQueuedLimit(for: principal),
                      queuedByPrincipal >= limit {
                "this principal has \(queuedByPrincipal) requests waiting (its limit is \(limit))"
            } else if joining == nil && liveImageBytes + image.count > configuration.maxLiveImageBytes {
                // Not how many it holds: with its own in mind, a principal would learn the others'.
                "the broker holds all the image bytes it may (\(configuration.maxLiveImageBytes))"
            } else if imageCharge > 0, liveImageBytesBy[principal, default: 0] + imageCharge > imageByteLimit {
                "this principal's live requests hold \(liveImageBytesBy[principal, default: 0]) bytes of images "
                    + "(its limit is \(imageByteLimit))"
            } else if (clients[peer]?.requests.count ?? 0) >= configuration.maxLiveRequestsPerClient {
                "this connection has \(configuration.maxLiveRequestsPerClient) live requests already"
            } else if let limit = terms.maxLive ?? (isAdmin(principal) ? nil : configuration.maxLiveRequestsPerPrincipal),
                      liveRequestsBy[principal, default: 0] >= limit {
                // Over all its connections, joiners too: they hold no queue slot, but each is state here.
                "this principal has \(limit) live requests (its limit)"
            } else {
                nil
            }
        if let overload {
            reject(requestID, .overloaded, overload, to: peer, principal: principal,
                   retryAfter: retryAfter(for: principal), &actions)
            refuseItem(.overloaded, overload)
            return
        }

        let lane = Lane(submit.priority)
        // A set's job makes no placeholder, for its own request or one sharing a variant.
        let wantsPlaceholder = !submit.noPlaceholder && submit.delivery != .info && submit.variants.isEmpty
            && onlyVariant == nil
        let jobID: UInt64
        if let joining {
            jobID = joining
            jobs[jobID]!.requests.append(key)
            joinImage(jobs[jobID]!.imageHold, by: principal)
            // Asked of a worker not yet given the job; one that has it may be past it.
            if wantsPlaceholder { jobs[jobID]!.placeholder = true }
            tally(principal, .jobsShared)
            // A shared job waits in the higher of its requests' lanes.
            if lane < jobs[jobID]!.lane {
                jobs[jobID]!.lane = lane
                waiting.move(jobID, to: lane)
            }
        } else {
            jobID = nextJobID
            nextJobID += 1
            // Made whole, then stored: one lookup, not one per field.
            var job = Job(
                spec: submit.spec, delivery: submit.variants.isEmpty ? submit.delivery : .final, image: image,
                source: submit.source, submittedKey: shareKey, shareKey: shareKey, requests: [key], lane: lane)
            job.placeholder = wantsPlaceholder
            job.filesScope = filesScope
            job.variants = submit.variants.enumerated().map { index, spec in
                .with { $0.index = UInt32(index); $0.spec = spec }
            }
            job.variantKeys = variantKeys
            // Those answered from the cache below count as sent: the worker is not asked for them.
            if !cachedVariants.isEmpty { job.variantsSent = Set(cachedVariants.map { $0.index }) }
            let variantsSent = job.variantsSent
            jobs[jobID] = job
            if !submit.variants.isEmpty { updateCost(of: jobID) }
            if cachedVariants.isEmpty { sharing.claim(shareKey, by: jobID) }
            // Each variant to come may be shared by a single-output request with its key.
            for (index, variantKey) in variantKeys.enumerated() where !variantsSent.contains(UInt32(index)) {
                sharing.claim(variantKey, by: jobID)
            }
            holdImage(ofNew: jobID)
            waiting.place(jobID, lane: lane, principal: principal)
        }
        liveRequestsBy[principal, default: 0] += 1
        requests[key] = Request(key: key, client: peer, jobID: jobID, acceptedAt: now, bytesIn: image.count,
                                sharedWork: joining != nil, lane: lane, wantsPlaceholder: wantsPlaceholder,
                                onlyVariant: onlyVariant)
        deadlines.insert(key, at: now + lifetime)
        if let place {
            batchItemAccepted(place, request: key, size: submit.batch.size, from: peer, finished: false,
                              deadline: now + lifetime)
        }
        // In place: a copy of the client would copy its set of requests.
        clients[peer, default: Client(principal: principal, lastSeen: now)].requests.insert(key)
        clients[peer]!.waitingBytes = clientBytesWaiting[peer] ?? 0
        tally(principal, .accepted)
        var accepted = Enlarger_V1_Accepted()
        accepted.requestID = requestID
        accepted.brokerInstance = configuration.instance
        accepted.heartbeatIntervalMs = UInt32(clamping: configuration.heartbeatInterval.milliseconds)
        accepted.deadlineMs = UInt32(clamping: lifetime.milliseconds)
        accepted.digestsUnused = !reliesOnDigests
        send(.accepted(accepted), to: peer, &actions)
        for (index, hit) in cachedVariants {
            var result = hit.result
            result.requestID = requestID
            result.cached = true
            result.variant = index
            result.terminal = false
            requests[key]!.bytesOut += hit.payload.count
            send(.result(result, image: hit.payload), to: peer, &actions)
        }
        if joining != nil {
            // A late joiner hears of the attempt under way; a held job may now have a
            // client that reads.
            tellStarted(key, attempt: jobs[jobID]!.startedAttempt, &actions)
            if waiting.isHeldBack(jobID), clients[peer]!.waitingBytes == 0 { releaseHeldJobs([jobID]) }
        }
        dispatch(now: now, &actions)
    }

    // MARK: Sharing
    //
    // Requests that name the same digest, spec (with defaults filled in) and delivery, within
    // one sharing scope (the principal, or everyone where the operator allows it), are the
    // same work. A terminal result of such work is cached; while it runs, the same requests
    // join its job. The broker takes the client's digest on trust (hashing megabytes would
    // stall its one thread) and relies on two checks instead: the worker verifies the job's
    // bytes against the digest before its result may be cached, and a request joins a job
    // only when its bytes equal the job's (a comparison, cheap beside a hash), so a wrong
    // digest can only ever hurt the request that sent it. File and URL requests share by
    // location until their worker names the version it opened (see File and URL sources).

    /// The requests a principal whose terms name no `queued=` may have waiting: a quarter of
    /// the queue, so that one tenant cannot fill it and have every other's Submit refused; an
    /// admin (the operator's own, ipc peers included) has no limit but the queue's.
    func defaultQueuedLimit(for principal: Principal) -> Int? {
        isAdmin(principal) ? nil : max(1, configuration.queueLimit / 4)
    }

    /// Whether any result may be shared or cached: with both turned off, no key is made and
    /// no client's digest is relied on (nor sent to be checked), and each Accepted tells the
    /// client that it may leave digests out.
    var reliesOnDigests: Bool { configuration.shareJobs || configuration.resultCacheBytes > 0 }

    private func shareKey(of submit: Enlarger_V1_Submit, principal: Principal, filesScope: String) -> ShareKey? {
        guard reliesOnDigests else { return nil }
        let kind: ShareKey.Kind
        let source: Data
        switch submit.source.kind {
        case .inline(let inline)?:
            guard !inline.sha256.isEmpty else { return nil }
            (kind, source) = (.digest, inline.sha256)
        case .file(let file)?:
            guard !submit.source.noShare else { return nil }
            // The same path in two principals' directories is two files.
            (kind, source) = (.location, Data("file\u{0}\(filesScope)\u{0}\(file.path)".utf8))
        case .url(let url)?:
            guard !submit.source.noShare else { return nil }
            (kind, source) = (.location, Data("url\u{0}\(url.url)".utf8))
        case nil:
            return nil
        }
        if !submit.variants.isEmpty {
            // Variants share and cache only what a digest names (see VARIANTS).
            guard kind == .digest, let spec = try? submit.variantsSharingKey() else { return nil }
            return ShareKey(scope: configuration.shareAcrossPrincipals ? nil : principal.name, kind: kind, source: source,
                            spec: spec, delivery: .final)
        }
        // The Submit was validated with the same conversion: a spec that fails here was refused.
        guard let spec = try? submit.spec.sharingKey(delivery: submit.delivery) else { return nil }
        return ShareKey(
            scope: configuration.shareAcrossPrincipals ? nil : principal.name, kind: kind, source: source,
            spec: spec, delivery: submit.delivery)
    }

    /// The key one variant's final is cached and shared under: a single-output request's with
    /// that spec and DELIVERY_FINAL, so each answers the other, and such a request may join the
    /// set's job for that variant while it is still to come. Inline sources with a digest only.
    private func variantKey(of submit: Enlarger_V1_Submit, spec: Enlarger_V1_ResizeSpec,
                            principal: Principal) -> ShareKey? {
        guard reliesOnDigests, case .inline(let inline)? = submit.source.kind, inline.sha256.count == 32,
              let canonical = try? spec.sharingKey(delivery: .final) else { return nil }
        return ShareKey(scope: configuration.shareAcrossPrincipals ? nil : principal.name, kind: .digest,
                        source: inline.sha256, spec: canonical, delivery: .final)
    }

    static func sameBytes(_ a: Payload, _ b: Payload) -> Bool {
        guard a.count == b.count else { return false }
        guard a.count > 0 else { return true }
        // libc's memcmp: several GB/s, where a byte loop would hold the loop up for
        // milliseconds per image in an unoptimised build.
        return a.withUnsafeBytes { a in b.withUnsafeBytes { b in memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 } }
    }

    /// Cached results answer the request on the spot: Accepted, then the terminal Result (for
    /// variants, one Result per variant in order, the last terminal).
    private mutating func answerFromCache(
        _ key: RequestKey, _ hits: [ResultCache<Payload>.Hit], bytesIn: Int, lifetime: Duration, to peer: PeerID,
        now: MonotonicInstant, _ actions: inout [Action]
    ) {
        tally(key.principal, .accepted)
        tally(key.principal, .cacheHits)
        tally(key.principal, .finished)
        send(.accepted(.with {
            $0.requestID = key.id
            $0.brokerInstance = configuration.instance
            $0.heartbeatIntervalMs = UInt32(clamping: configuration.heartbeatInterval.milliseconds)
            $0.deadlineMs = UInt32(clamping: lifetime.milliseconds)
        }), to: peer, &actions)
        for (index, hit) in hits.enumerated() {
            var result = hit.result
            result.requestID = key.id
            result.cached = true
            if hits.count > 1 || result.variant != 0 {
                result.variant = UInt32(index)
                result.terminal = index == hits.count - 1
            }
            send(.result(result, image: hit.payload), to: peer, &actions)
        }
        actions.append(.report(.requestEnded(RequestEnd(
            requestID: key.id, jobID: 0, principal: key.principal.name, outcome: .finished, queueWait: nil,
            duration: .zero, attempts: 0, bytesIn: bytesIn, bytesOut: hits.reduce(0) { $0 + $1.payload.count }))))
        endedRequests.remember(key, at: now)
    }

    private func refusal(
        of submit: Enlarger_V1_Submit, image: Payload
    ) -> (Enlarger_V1_ErrorCode, String)? {
        if isShuttingDown { return (.brokerShutdown, "the broker is shutting down") }
        do {
            try submit.delivery.validate()
            // An info request reads only the header: of the spec only fail_on counts.
            if !submit.variants.isEmpty {
                try submit.validateVariants()
            } else if submit.delivery == .info {
                try submit.spec.validateFailOn()
            } else {
                try submit.spec.validate()
            }
        } catch {
            return (.invalidArgument, error.message)
        }
        switch submit.source.kind {
        case .inline(let inline)?:
            if !inline.sha256.isEmpty && inline.sha256.count != 32 {
                return (.invalidArgument, "source.inline.sha256 must be 32 bytes (SHA-256), got \(inline.sha256.count)")
            }
        case .file(let file)?:
            if let problem = Self.placeProblem(file.path, "source.file.path", limit: WireLimits.maxSourcePathBytes) {
                return (.invalidArgument, problem)
            }
            if image.count > 0 { return (.invalidArgument, "a file source's Submit carries no image (\(image.count) bytes)") }
        case .url(let url)?:
            if let problem = Self.placeProblem(url.url, "source.url.url", limit: WireLimits.maxSourceURLBytes) {
                return (.invalidArgument, problem)
            }
            if image.count > 0 { return (.invalidArgument, "a URL source's Submit carries no image (\(image.count) bytes)") }
        case nil:
            break
        }
        if image.count > configuration.maxInputBytes {
            return (.tooLarge, "input of \(image.count) bytes exceeds the limit of \(configuration.maxInputBytes)")
        }
        return nil
    }

    /// Why a file path or URL cannot even be passed on; the worker judges the rest.
    private static func placeProblem(_ text: String, _ field: String, limit: Int) -> String? {
        if text.isEmpty { return "\(field) is empty" }
        if text.utf8.count > limit { return "\(field) is longer than \(limit) bytes" }
        if text.utf8.contains(0) { return "\(field) contains a NUL byte" }
        return nil
    }

    /// Answers a Submit that is not accepted: `Rejected`, counted and reported.
    /// When a principal over its waiting limit may try again: about when as many of its
    /// jobs have run as it has waiting beyond the limit, at the recent pace of the fleet.
    func retryAfter(for principal: Principal) -> Duration {
        let capacity = max(1, workers.reduce(0) { $0 + $1.capacity })
        let ahead = (waiting.queuedBy[principal] ?? 0) + (waiting.heldBackBy[principal] ?? 0) + 1
        let estimate = recentJobTime * (Double(ahead) / Double(capacity))
        return min(max(estimate, .milliseconds(100)), .seconds(60))
    }

    private mutating func reject(
        _ requestID: String, _ code: Enlarger_V1_ErrorCode, _ message: String, to peer: PeerID,
        principal: Principal, retryAfter: Duration? = nil, _ actions: inout [Action]
    ) {
        tally(principal, .rejected)
        var rejected = Enlarger_V1_Rejected()
        rejected.requestID = requestID
        rejected.code = code
        rejected.message = message
        if let retryAfter {
            rejected.retryAfterMs = UInt32(clamping: retryAfter.milliseconds)
            rejected.message += "; try again in about \(rejected.retryAfterMs) ms"
        }
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
        var targets: [RequestKey] = requests[key] != nil ? [key] : []
        if targets.isEmpty, isAdmin(principal) {
            targets = requests.keys.filter { $0.id == requestID }.sorted()
        }
        if targets.isEmpty {
            ack.outcome = endedRequests.contains(key, at: now) ? .finished : .unknown
        } else {
            for target in targets {
                let request = endOneRequest(target, .cancelled, now: now, &actions)
                var cancelled = Enlarger_V1_Cancelled()
                cancelled.requestID = requestID
                send(.cancelled(cancelled), to: request, &actions)
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
            let key = RequestKey(principal: principal, id: requestID)
            guard requests[key] != nil else {
                reply.unknownRequestIds.append(requestID)
                continue
            }
            moveRequest(key, to: peer, principal: principal, now: now)
        }
        send(.syncReply(reply), to: peer, &actions)
    }

    private mutating func moveRequest(_ key: RequestKey, to peer: PeerID, principal: Principal, now: MonotonicInstant) {
        guard let request = requests[key], request.client != peer else { return }
        // A held job's place is its owner's list: it goes back to its lane before its owner
        // moves, and dispatch judges the new connection.
        if let job = jobs[request.jobID], waiting.isHeldBack(request.jobID), job.owner == key {
            releaseHeldJobs([request.jobID])
        }
        let old = request.client
        if clients[old]?.requests.remove(key) != nil, clients[old]!.requests.isEmpty { clients[old] = nil }
        clients[peer, default: Client(principal: principal, lastSeen: now)].requests.insert(key)
        clients[peer]!.waitingBytes = clientBytesWaiting[peer] ?? 0
        requests[key]?.client = peer
        if let place = request.batch { batchHeard(place.batch, from: peer) }
    }

    // MARK: Vanished clients
    //
    // A client that went silent (or could not be reached) with live requests: its requests
    // are withdrawn, its workers told to stop, and each request ends with
    // Failed{CLIENT_SILENT} (sent in case the client is still there to read it; a client
    // that only stopped reading gets it when it reads again). When the routing id now
    // belongs to another principal's connection, nothing is sent: it is not theirs to read.

    mutating func clientVanished(
        _ peer: PeerID, reason: String, code: Enlarger_V1_ErrorCode = .clientSilent, notify: Bool = true,
        now: MonotonicInstant, _ actions: inout [Action]
    ) {
        guard let client = clients[peer] else { return }
        for key in client.requests.sorted() {
            let request = endOneRequest(key, .failed(code), now: now, &actions)
            if notify { sendFailed(request, code, "the broker gave the request up: \(reason)", &actions) }
        }
        clients[peer] = nil
        counters.clientsVanished += 1
        actions.append(.report(.clientVanished(peer, cancelled: client.requests.count)))
        dispatch(now: now, &actions)
    }

    // MARK: Revoked keys
    //
    // A key removed from an allow-list loses its open connections too: each live request of
    // the principal ends with Failed{UNAUTHORIZED} (sent to its connection, whose owner it
    // is), a worker of that key is lost (its jobs run again elsewhere, charged to no
    // request), and nothing more from those connections is taken.

    mutating func revokeClient(_ principal: Principal, now: MonotonicInstant, _ actions: inout [Action]) {
        for (peer, client) in clients.sorted(by: { $0.key < $1.key }) where client.principal == principal {
            for key in client.requests.sorted() {
                let request = endOneRequest(key, .failed(.unauthorized), now: now, &actions)
                sendFailed(request, .unauthorized, "the key of this connection was revoked", &actions)
            }
            clients[peer] = nil
        }
        dispatch(now: now, &actions)
    }

    /// A reply to the connection that just spoke (or, with `principal`, to that principal's
    /// connection under the id).
    func send(_ message: BrokerToClientMessage<Payload>, to peer: PeerID, for principal: Principal? = nil,
              _ actions: inout [Action]) {
        actions.append(.sendToClient(peer, message.encoded(), for: principal ?? clients[peer]?.principal,
                                     shed: Self.shedding(of: message)))
    }

    /// An event of `request`, for its principal's connection.
    func send(_ message: BrokerToClientMessage<Payload>, to request: Request, _ actions: inout [Action]) {
        actions.append(.sendToClient(request.client, message.encoded(), for: request.key.principal,
                                     shed: Self.shedding(of: message)))
    }

    /// Results and Started may be dropped for a client that stopped reading; a terminal
    /// result then leaves a notice in its place. Everything else is small and kept.
    static func shedding(of message: BrokerToClientMessage<Payload>) -> ClientShedding {
        switch message {
        case .result(let result, _): result.terminal ? .notify(requestID: result.requestID) : .drop
        case .started: .drop
        default: .keep
        }
    }
}
