import ArgumentParser

@main
struct EnlargerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enlarger",
        abstract: "Resize JPEGs, alone or as a ZeroMQ job service (broker + workers) with degraded-then-final results and strict cancel.",
        subcommands: [
            ServeCommand.self, SubmitCommand.self, CancelCommand.self, StatusCommand.self,
            BrokerCommand.self, WorkerCommand.self, ResizeCommand.self, KeygenCommand.self,
        ]
    )
}
