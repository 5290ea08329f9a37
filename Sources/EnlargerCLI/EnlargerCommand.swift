import ArgumentParser
import CLISupport
import Foundation

@main
struct EnlargerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enlarger",
        abstract: "Resize images (JPEG, PNG, WebP, HEIC, AVIF, GIF, JPEG XL), alone or as a ZeroMQ job service (broker + workers) with degraded-then-final results and strict cancel.",
        version: enlargerVersion,
        subcommands: [
            ServeCommand.self, SubmitCommand.self, CancelCommand.self, StatusCommand.self,
            BrokerCommand.self, WorkerCommand.self, HealthCommand.self, ResizeCommand.self, InfoCommand.self, SyncCommand.self,
            KeygenCommand.self,
        ]
    )

    /// The services configured from the environment as well as from flags (`EnvironmentOptions`).
    static let configurableFromEnvironment: [any ParsableCommand.Type] = [BrokerCommand.self, WorkerCommand.self, ServeCommand.self]

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        var sources: [EnvironmentOptions.Source] = []
        if let name = arguments.first,
           let command = configurableFromEnvironment.first(where: { $0.configuration.commandName == name })
        {
            do {
                let applied = try EnvironmentOptions.apply(
                    to: Array(arguments.dropFirst()), command: command, environment: ProcessInfo.processInfo.environment)
                arguments = [name] + applied.arguments
                sources = applied.sources
            } catch {
                exitIfUnknownOption(in: arguments)
                exit(withError: error)
            }
        }
        let parsed: any ParsableCommand
        do {
            parsed = try parseAsRoot(arguments)
        } catch {
            exitIfUnknownOption(in: arguments)
            report(error, sources: sources)
        }
        do {
            var command = parsed
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            report(error, sources: sources)
        }
    }

    /// Exits with ArgumentParser's usage error when `arguments` name their subcommand's
    /// option misspelt: reported as such rather than as what the command's own checks made of
    /// it (ArgumentParser validates before it reports unknown options). Called only once
    /// parsing has failed: listing a command's options dumps its whole help, which would cost
    /// every run several milliseconds before it starts.
    private static func exitIfUnknownOption(in arguments: [String]) {
        guard let name = arguments.first,
              let command = configuration.subcommands.first(where: { $0.configuration.commandName == name }),
              let problem = UnknownOptions.problem(in: Array(arguments.dropFirst()), of: command)
        else { return }
        let usage = "Error: \(problem)\nUsage: \(usageString(for: command))\n"
            + "  See 'enlarger \(name) --help' for more information.\n"
        FileHandle.standardError.write(Data(usage.utf8))
        Foundation.exit(ExitCode.validationFailure.rawValue)
    }

    /// Reports `error` and exits; a bad value that came from the environment is reported
    /// under its variable's name.
    private static func report(_ error: any Error, sources: [EnvironmentOptions.Source]) -> Never {
        if let explained = EnvironmentOptions.explain(message(for: error), sources: sources) {
            FileHandle.standardError.write(Data("Error: \(explained)\n".utf8))
            Foundation.exit(exitCode(for: error).rawValue)
        }
        exit(withError: error)
    }
}
