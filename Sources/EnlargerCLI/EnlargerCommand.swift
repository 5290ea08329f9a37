import ArgumentParser

@main
struct EnlargerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enlarger",
        abstract: "Resize JPEGs, alone or as a ZeroMQ job service (broker + workers) with degraded-then-final results and strict cancel.",
        subcommands: [ResizeCommand.self]
    )
}
