import CLISupport
import ArgumentParser
import Foundation
import ZeroMQ

struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Create a CURVE key pair for a broker, worker or client: NAME.key (secret) and NAME.pub (public).",
        discussion: """
            Over tcp://, every broker, worker and client has its own key pair. The broker's \
            proves to clients and workers that they reached the real broker; a client's or \
            worker's tells the broker who is connecting. (ipc:// sockets on one host need no keys.)

            NAME.key holds the public and the secret key, mode 0600. It is secret: it stays on \
            the host that uses it, and is refused if its group or others can access it.
            NAME.pub holds the public key, one line of 40 characters. Safe to copy anywhere.

            Where the files go:
            - broker: its .key is the broker's server key; copy its .pub to every client and \
            worker, which need it to connect.
            - worker: its .key stays with the worker; its .pub goes into the broker's worker \
            allow-list directory.
            - client: its .key stays with the client; its .pub goes into the broker's client \
            allow-list directory (or its admin directory, for an operator who may cancel any request).

            The broker picks up .pub files added to or removed from its allow-list directories \
            within about a second, for new connections; no restart needed.

            Example: enlarger keygen broker --directory /etc/enlarger
            """
    )

    @Argument(help: "The key's name (letters, digits, '.', '_', '-'); the files are NAME.key and NAME.pub.")
    var name: String

    @Option(help: "Where to write the files; created with mode 0700 if missing.")
    var directory = "."

    @Flag(help: "Replace existing NAME.key and NAME.pub (then hand out the new .pub wherever the old one went).")
    var force = false

    func validate() throws {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard !name.isEmpty, name.count <= 100, name.allSatisfy(allowed.contains), !name.hasPrefix(".") else {
            throw ValidationError("NAME must be 1 to 100 letters, digits, '.', '_' or '-', not starting with '.'")
        }
    }

    func run() throws {
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw CLIError("cannot create directory \(directory): \(error.localizedDescription)")
        }
        let pair = try CurveKeyPair.generate()
        let paths: KeyFilePaths
        switch Result(catching: { () throws(KeyFileError) in try pair.write(name: name, directory: directory, replacing: force) }) {
        case .success(let written): paths = written
        case .failure(let error) where error.reason == .alreadyExists:
            throw CLIError("\(error); use --force to replace the key pair")
        case .failure(let error): throw error
        }
        print("wrote \(paths.keyFile) (key pair, secret, mode 0600)")
        print("wrote \(paths.publicKeyFile) (public key \(pair.publicKey.z85))")
    }
}
