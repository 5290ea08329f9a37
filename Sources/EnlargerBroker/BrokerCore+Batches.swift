import EnlargerProtocol

// MARK: - Batches
//
// A batch is a set of requests that succeeds or fails whole (see BATCHES in client.proto).
// Its items are ordinary requests that also name the batch; the batch is only bookkeeping
// over them: which places are live, which have their result, and how the batch ends. It is
// created by its first item and ends once: completed when every place has its result;
// failed when an item fails or is refused; cancelled when an item is cancelled.
//
// An item's end is noticed inside other work (a job failing ends all its requests, a
// vanished client all of its), so the batch's end is only decided there and settled when
// the event's other work is done (`settleBatches`, at the end of every entry point): the
// items still live are cancelled, then the batch's BatchEnded goes out. Deciding first and
// acting afterwards keeps the cancellations out of loops over the very requests they end,
// and lets the lowest index win when several items fail in one event.

/// A request's batch and its place there.
struct BatchPlace {
    let batch: RequestKey
    let index: UInt32
}

/// A connection live batches name, and whose: a routing id is one principal's at a time
/// (taken over, the old principal's batches let go of it first).
struct BatchPeer {
    let principal: Principal
    var batches = 0
}

struct Batch {
    let size: UInt32
    /// Where BatchEnded goes: the connection of the latest item, or, once that one is gone
    /// for good, of the latest item from a connection still there.
    var client: PeerID
    /// The connections its items came from, the latest last.
    var peers: [PeerID] = []
    /// Items not ended yet, by index.
    var live: [UInt32: RequestKey] = [:]
    /// Indices whose items ended with their terminal result.
    var finished: Set<UInt32> = []
    /// How it ends, once decided (settled before the event returns).
    var ending: Enlarger_V1_BatchEnded?

    /// The first index with neither a live item nor a result.
    var firstUnfinished: UInt32 {
        (0..<size).first { live[$0] == nil && !finished.contains($0) } ?? (0..<size).first { !finished.contains($0) } ?? 0
    }
}

extension BrokerCore {
    /// The batch fields of a Submit, checked; nil when it names no batch.
    func batchPlace(
        of submit: Enlarger_V1_Submit, principal: Principal, now: MonotonicInstant
    ) -> Result<BatchPlace?, BatchRefusal> {
        guard submit.hasBatch else { return .success(nil) }
        let item = submit.batch
        let length = item.batchID.utf8.count
        guard (1...WireLimits.maxRequestIDBytes).contains(length) else {
            return .failure(BatchRefusal(code: .invalidArgument, message: "batch id must be 1 to 64 bytes, got \(length)"))
        }
        let key = RequestKey(principal: principal, id: item.batchID)
        let place = BatchPlace(batch: key, index: item.index)
        guard (1...WireLimits.maxBatchSize).contains(item.size), item.index < item.size else {
            return .failure(BatchRefusal(
                code: .invalidArgument,
                message: "batch size must be 1 to \(WireLimits.maxBatchSize) and index below it, got \(item.index) of \(item.size)",
                place: place))
        }
        if let batch = batches[key] {
            if batch.ending != nil {
                return .failure(BatchRefusal(code: .batchEnded, message: "batch \(item.batchID) has ended"))
            }
            guard batch.size == item.size else {
                return .failure(BatchRefusal(code: .invalidArgument,
                                             message: "batch \(item.batchID) has \(batch.size) items, this Submit says \(item.size)",
                                             place: place))
            }
            // The id already at this place is a duplicate, refused without failing the batch.
            guard batch.live[item.index] == nil || batch.live[item.index] == RequestKey(principal: principal, id: submit.requestID),
                  !batch.finished.contains(item.index) else {
                return .failure(BatchRefusal(code: .invalidArgument,
                                             message: "place \(item.index) of batch \(item.batchID) is taken", place: place))
            }
        } else if endedBatches.contains(key, at: now) {
            return .failure(BatchRefusal(code: .batchEnded, message: "batch \(item.batchID) has ended"))
        } else if batches.count >= configuration.maxLiveBatches {
            return .failure(BatchRefusal(code: .overloaded,
                                         message: "the broker holds \(configuration.maxLiveBatches) live batches", place: place))
        } else if liveBatchesBy[principal, default: 0] >= configuration.maxLiveBatchesPerPrincipal {
            return .failure(BatchRefusal(
                code: .overloaded,
                message: "this principal has \(configuration.maxLiveBatchesPerPrincipal) live batches (its limit)", place: place))
        }
        return .success(place)
    }

    /// An accepted item takes its place (a new batch starts with it, its deadline the item's).
    mutating func batchItemAccepted(
        _ place: BatchPlace, request key: RequestKey, size: UInt32, from peer: PeerID, finished: Bool,
        deadline: MonotonicInstant
    ) {
        if batches[place.batch] == nil {
            startBatch(place.batch, size: size, client: peer)
            batchDeadlines.insert(place.batch, at: deadline)
        }
        batchHeard(place.batch, from: peer)
        if finished {
            batchItemEnded(place, request: key, .finished)
        } else {
            batches[place.batch]!.live[place.index] = key
            requests[key]?.batch = place
        }
    }

    /// An item of the batch came from (or moved to) `peer`: its BatchEnded goes there.
    mutating func batchHeard(_ key: RequestKey, from peer: PeerID) {
        guard var batch = batches[key] else { return }
        batch.client = peer
        if batch.peers.last != peer {
            if let index = batch.peers.firstIndex(of: peer) {
                batch.peers.remove(at: index)
            } else {
                batchPeers[peer, default: BatchPeer(principal: key.principal)].batches += 1
            }
            batch.peers.append(peer)
        }
        batches[key] = batch
    }

    /// A connection that cannot come back ended (or its routing id now belongs to another
    /// principal, `keeping` it): a batch that would have told it how it ends tells the latest
    /// other connection its items came from instead (one whose items all ended may still be
    /// waiting for the BatchEnded).
    mutating func batchConnectionGone(_ peer: PeerID, keeping principal: Principal? = nil) {
        guard let named = batchPeers[peer], named.principal != principal else { return }
        for key in batches.keys where key.principal != principal && batches[key]!.peers.contains(peer) {
            batches[key]!.peers.removeAll { $0 == peer }
            forgetBatchPeer(peer)
            if batches[key]!.client == peer, let other = batches[key]!.peers.last { batches[key]!.client = other }
        }
    }

    private mutating func forgetBatchPeer(_ peer: PeerID) {
        batchPeers[peer]!.batches -= 1
        if batchPeers[peer]!.batches == 0 { batchPeers[peer] = nil }
    }

    private mutating func startBatch(_ key: RequestKey, size: UInt32, client: PeerID) {
        batches[key] = Batch(size: size, client: client)
        liveBatchesBy[key.principal, default: 0] += 1
    }

    /// A Submit naming a batch was refused: the batch fails (a first item refused leaves a
    /// batch that has ended before it began, so later items are refused too).
    mutating func batchItemRefused(
        _ place: BatchPlace, requestID: String, size: UInt32, from peer: PeerID, code: Enlarger_V1_ErrorCode,
        message: String
    ) {
        if batches[place.batch] == nil { startBatch(place.batch, size: size, client: peer) }
        batchHeard(place.batch, from: peer)
        decide(place.batch, .failed, index: place.index, requestID: requestID, code: code, message: message)
    }

    /// Called from `endRequest` for every item that ends, whatever the reason.
    mutating func batchItemEnded(_ place: BatchPlace, request key: RequestKey, _ outcome: RequestOutcome) {
        guard var batch = batches[place.batch] else { return }
        batch.live[place.index] = nil
        if case .finished = outcome { batch.finished.insert(place.index) }
        batches[place.batch] = batch
        switch outcome {
        case .finished:
            if batch.finished.count == Int(batch.size) {
                decide(place.batch, .completed, index: 0, requestID: "", code: .unspecified, message: "")
            }
        case .failed(let code), .rejected(let code):
            decide(place.batch, .failed, index: place.index, requestID: key.id, code: code,
                   message: "item \(place.index) (\(key.id)) failed with \(code.contractName)")
        case .cancelled:
            decide(place.batch, .cancelled, index: place.index, requestID: key.id, code: .unspecified,
                   message: "item \(place.index) (\(key.id)) was cancelled")
        }
    }

    /// Records how the batch ends, unless that is already decided. Within one event, a
    /// failure of a lower index replaces a failure of a higher one.
    private mutating func decide(
        _ key: RequestKey, _ outcome: Enlarger_V1_BatchEnded.Outcome, index: UInt32, requestID: String,
        code: Enlarger_V1_ErrorCode, message: String
    ) {
        guard let batch = batches[key] else { return }
        if let decided = batch.ending {
            guard decided.outcome == .failed, outcome == .failed, index < decided.index else { return }
        } else {
            unsettledBatches.append(key)
        }
        batches[key]!.ending = .with {
            $0.batchID = key.id
            $0.outcome = outcome
            $0.index = index
            $0.requestID = requestID
            $0.code = code
            $0.message = message
        }
    }

    /// Carries out the batch ends decided during this event: the items still live are
    /// cancelled (each gets Cancelled), then BatchEnded goes to the batch's connection.
    mutating func settleBatches(now: MonotonicInstant, _ actions: inout [Action]) {
        guard !unsettledBatches.isEmpty else { return }
        var settled = false
        while !unsettledBatches.isEmpty {
            let key = unsettledBatches.removeFirst()
            guard let batch = batches[key], let ending = batch.ending else { continue }
            for (_, item) in batch.live.sorted(by: { $0.key < $1.key }) where requests[item] != nil {
                let request = endOneRequest(item, .cancelled, now: now, &actions)
                send(.cancelled(.with { $0.requestID = request.requestID }), to: request, &actions)
            }
            switch ending.outcome {
            case .completed: counters.batchesCompleted += 1
            case .cancelled: counters.batchesCancelled += 1
            default: counters.batchesFailed += 1
            }
            send(.batchEnded(ending), to: batch.client, for: key.principal, &actions)
            for peer in batch.peers { forgetBatchPeer(peer) }
            batches[key] = nil
            liveBatchesBy[key.principal]! -= 1
            if liveBatchesBy[key.principal] == 0 { liveBatchesBy[key.principal] = nil }
            batchDeadlines.remove(key)
            endedBatches.remember(key, at: now)
            settled = true
        }
        // Cancelled items may have freed credit.
        if settled { dispatch(now: now, &actions) }
    }

    /// A batch still unfinished at the deadline of its first item fails, naming the first
    /// place without a result.
    mutating func expireBatchDeadlines(now: MonotonicInstant, _ actions: inout [Action]) {
        while let key = batchDeadlines.popExpired(at: now) {
            guard let batch = batches[key], batch.ending == nil else { continue }
            let index = batch.firstUnfinished
            decide(key, .failed, index: index, requestID: batch.live[index]?.id ?? "", code: .deadlineExceeded,
                   message: "the batch was not complete by its deadline (place \(index) has no result)")
        }
    }

    /// At shutdown every live batch fails, its items having failed with the broker.
    mutating func failLiveBatches(code: Enlarger_V1_ErrorCode, message: String) {
        for key in batches.keys.sorted() where batches[key]!.ending == nil {
            let batch = batches[key]!
            let index = batch.firstUnfinished
            decide(key, .failed, index: index, requestID: batch.live[index]?.id ?? "", code: code, message: message)
        }
    }
}

/// Why a Submit's batch fields refuse it; `place` is set when the refusal fails its batch
/// (not for an ended batch, nor for an id that names none).
struct BatchRefusal: Error {
    let code: Enlarger_V1_ErrorCode
    let message: String
    var place: BatchPlace?
}
