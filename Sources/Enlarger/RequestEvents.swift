import ImageModel

/// One step in the life of a request, as the broker reported it.
public enum RequestEvent: Sendable, Equatable {
    /// The broker accepted the request and queued it.
    case accepted
    /// Before any image: the final's exact size and a ThumbHash of its picture, to paint at
    /// once (`ResizeRequest.placeholder`; at most one, never the last event; none when the
    /// request joined a job already past it, or the worker could not make one).
    case placeholder(Placeholder)
    /// A worker began the request; `attempt` grows when it is retried on another worker.
    case started(attempt: Int)
    /// A fast approximation with the final's crop, orientation and aspect ratio, but smaller:
    /// half the final size, or the embedded thumbnail's size when that is smaller (its
    /// `width` and `height` say which); show it scaled up until the final arrives. The last
    /// event when the delivery is `.degraded`; otherwise a `.final` follows.
    case degraded(EncodedImage)
    /// The high-quality result; always the last event, except for a request with variants,
    /// which gets one per variant (`EncodedImage.variant` says which), the last ending it.
    case final(EncodedImage)
    /// What the image's header says: the one result (and last event) of `EnlargerClient.info`.
    case info(ImageInfo)
    /// How the download of a URL source is going: `.started`, `.progress` (at most a few a
    /// second), `.finished`, all before the results (an info request stops the download once
    /// the header is in, without `.finished`). Never the last event.
    case download(DownloadProgress)
}

/// A step of a URL source's download (`RequestEvent.download`).
public struct DownloadProgress: Sendable, Equatable {
    public enum Phase: Sendable, Equatable {
        case started
        case progress
        case finished
    }

    public var phase: Phase
    /// Bytes received so far.
    public var bytes: Int
    /// The response's Content-Length, when it has one.
    public var expectedBytes: Int?

    public init(phase: Phase, bytes: Int, expectedBytes: Int?) {
        self.phase = phase
        self.bytes = bytes
        self.expectedBytes = expectedBytes
    }
}

/// The events of one submitted request, in order: `.accepted`, `.started`…, at most one
/// `.placeholder`, at most one `.degraded`, then the terminal result; the sequence finishes right after the terminal
/// event. A request that ends without a result throws `EnlargerClientError` instead (after
/// the events received before it): `.failed`, `.rejected`, `.duplicateID`, `.cancelled`
/// (by another connection), `.brokerUnreachable`, `.brokerLost` or `.closed`.
///
/// **Cancel.** Once `EnlargerClient.cancel(id)` has been called for the request, or the
/// task iterating the sequence has been cancelled (which sends the same cancel to the
/// broker), the sequence simply ends: `next()` returns `nil`, with no further element and no
/// error, even if events had already been received and were waiting to be taken.
///
/// One task iterates a sequence at a time. A request whose sequence is dropped unfinished
/// stays live at the broker until it ends; cancel it to stop the work.
public struct RequestEvents: AsyncSequence, Sendable {
    public typealias Element = RequestEvent
    public typealias Failure = EnlargerClientError

    /// The request id, as submitted.
    public var id: String { channel.id }

    let channel: RequestChannel
    let registry: RequestRegistry

    public func makeAsyncIterator() -> Iterator {
        Iterator(channel: channel, registry: registry)
    }

    public struct Iterator: AsyncIteratorProtocol {
        let channel: RequestChannel
        let registry: RequestRegistry

        public mutating func next() async throws(EnlargerClientError) -> RequestEvent? {
            try await next(isolation: nil)
        }

        public mutating func next(
            isolation actor: isolated (any Actor)?
        ) async throws(EnlargerClientError) -> RequestEvent? {
            let step = await withTaskCancellationHandler {
                await channel.next()
            } onCancel: { [channel, registry] in
                registry.cancel(channel)
            }
            switch step {
            case .event(let event): return event
            case .failure(let error): throw error
            case .end: return nil
            }
        }
    }
}
