import ArgumentParser
import CLISupport
import EnlargerBroker
import Foundation
import ZeroMQ

/// Who may connect to the broker (CURVE allow-lists). Like every broker flag, each can also
/// come from the environment (`EnvironmentOptions`).
struct BrokerAuthOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "The broker's key file (NAME.key from `enlarger keygen`); hand its .pub to clients and workers.",
        valueName: "file"))
    var serverKey: String?

    @Option(help: ArgumentHelp(
        "Directory of client public keys (*.pub) allowed to connect; re-read when it changes.",
        valueName: "dir"))
    var clientKeys: String?

    @Option(help: ArgumentHelp(
        "Directory of worker public keys (*.pub) allowed to register; re-read when it changes.",
        valueName: "dir"))
    var workerKeys: String?

    @Option(help: ArgumentHelp(
        "Directory of admin client keys: they may cancel any request and see worker details.",
        valueName: "dir"))
    var adminKeys: String?

    @Flag(help: "Bind tcp:// endpoints without authentication (closed test networks only).")
    var insecureTcp = false

    func apply(to configuration: inout BrokerService.Configuration) throws {
        configuration.allowInsecureTCP = insecureTcp
        guard let serverKeyFile = serverKey else {
            if clientKeys != nil || workerKeys != nil || adminKeys != nil {
                throw CLIError("allow-lists need the broker's own key: give --server-key")
            }
            return
        }
        guard let clientDirectory = clientKeys, let workerDirectory = workerKeys else {
            throw CLIError("--server-key needs --client-keys and --worker-keys (directories of .pub files)")
        }
        for directory in [clientDirectory, workerDirectory] + (adminKeys.map { [$0] } ?? []) {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw CLIError("\(directory) is not a directory of public keys")
            }
        }
        let keyPair: CurveKeyPair
        do {
            keyPair = try CurveKeyPair(keyFile: serverKeyFile)
        } catch {
            throw CLIError("\(error)")
        }
        configuration.security = .init(
            serverKey: keyPair, clientKeys: .directory(clientDirectory), workerKeys: .directory(workerDirectory),
            adminKeys: adminKeys.map { .directory($0) } ?? .none)
    }
}
