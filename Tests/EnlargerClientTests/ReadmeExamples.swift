// The README's Swift examples, compiled with the tests: `ReadmeExampleTests` checks that every
// Swift block of the README appears here line for line (its imports aside), so an example
// that stops compiling fails the build. Like a producer, this file imports only `Enlarger`.
import Enlarger
import Foundation

enum ReadmeExamples {
    /// "The Swift client": submit, stream the degraded and final results, cancel, close.
    static func producer(paint: (Placeholder) -> Void, show: ([UInt8]) -> Void, save: ([UInt8]) -> Void) async throws {
        let client = try EnlargerClient(brokerEndpoint: "ipc:///run/user/1000/enlarger/clients.sock")
        let photo = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "photo.jpg")))
        let events = client.submit(ResizeRequest(id: "photo-1", image: photo,
                                                 options: ResizeOptions(width: 720, height: 588),
                                                 timeout: .seconds(30)))
        do {
            for try await event in events {
                switch event {
                case .placeholder(let first): paint(first)        // the final's size and a ThumbHash
                case .degraded(let preview): show(preview.bytes)   // quick, smaller
                case .final(let image): save(image.bytes)          // the last event
                case .accepted, .started, .download, .info: break  // .download: a URL source's progress;
                                                                    // .info answers client.info(_:) only
                }
            }
        } catch {
            print("photo-1 failed: \(error)")  // an EnlargerClientError, e.g. .failed(.tooLarge, "…")
        }
        // From anywhere else: nothing about photo-1 is delivered once this call has begun.
        _ = try await client.cancel("photo-1")
        await client.close()
    }

    /// A batch: every result in input order, or none.
    static func batch(client: EnlargerClient, urls: [URL]) async throws -> [EncodedImage] {
        let pages = try urls.map { ResizeRequest(image: try [UInt8](Data(contentsOf: $0)), options: ResizeOptions(width: 1200)) }
        let images = try await client.resize(batch: pages)   // [EncodedImage], in input order
        return images
    }

    /// Over tcp, with keys.
    static func remote() throws -> EnlargerClient {
        var configuration = EnlargerClient.Configuration()
        configuration.curve = try CurveClientCredentials(keyFile: "keys/alice/alice.key",
                                                         serverPublicKeyFile: "keys/broker/broker.pub")
        let remote = try EnlargerClient(brokerEndpoint: "tcp://broker-host:5570", configuration: configuration)
        return remote
    }
}
