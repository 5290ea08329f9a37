import ArgumentParser
import CLISupport
import EnlargerBroker
import Foundation
import ZeroMQ

/// Who may connect to the broker (CURVE allow-lists). Each flag can also come from the
/// environment; a flag wins.
struct BrokerAuthOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "The broker's key file (NAME.key from `enlarger keygen`); hand its .pub to clients and workers. Env: ENLARGER_SERVER_KEY.",
        valueName: "file"))
    var serverKey: String?

    @Option(help: ArgumentHelp(
        "Directory of client public keys (*.pub) allowed to connect; re-read when it changes. Env: ENLARGER_CLIENT_KEYS.",
        valueName: "dir"))
    var clientKeys: String?

    @Option(help: ArgumentHelp(
        "Directory of worker public keys (*.pub) allowed to register; re-read when it changes. Env: ENLARGER_WORKER_KEYS.",
        valueName: "dir"))
    var workerKeys: String?

    @Option(help: ArgumentHelp(
        "Directory of admin client keys: they may cancel any request and see worker details. Env: ENLARGER_ADMIN_KEYS.",
        valueName: "dir"))
    var adminKeys: String?

    @Flag(help: "Bind tcp:// endpoints without authentication (closed test networks only). Env: ENLARGER_INSECURE_TCP=1.")
    var insecureTcp = false

    func apply(to configuration: inout BrokerService.Configuration) throws {
        let environment = ProcessInfo.processInfo.environment
        configuration.allowInsecureTCP = insecureTcp || environment["ENLARGER_INSECURE_TCP"] == "1"
        let serverKeyFile = serverKey ?? environment["ENLARGER_SERVER_KEY"].nonEmpty
        let clientDirectory = clientKeys ?? environment["ENLARGER_CLIENT_KEYS"].nonEmpty
        let workerDirectory = workerKeys ?? environment["ENLARGER_WORKER_KEYS"].nonEmpty
        let adminDirectory = adminKeys ?? environment["ENLARGER_ADMIN_KEYS"].nonEmpty
        guard let serverKeyFile else {
            if clientDirectory != nil || workerDirectory != nil || adminDirectory != nil {
                throw CLIError("allow-lists need the broker's own key: give --server-key")
            }
            return
        }
        guard let clientDirectory, let workerDirectory else {
            throw CLIError("--server-key needs --client-keys and --worker-keys (directories of .pub files)")
        }
        for directory in [clientDirectory, workerDirectory] + (adminDirectory.map { [$0] } ?? []) {
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
            adminKeys: adminDirectory.map { .directory($0) } ?? .none)
    }
}
