import ArgumentParser

/// `todostream-load`: drives todostreamd, nats-server and redis-server with the same
/// scenarios and prints one JSON line per result (standard output) and one line for people
/// (standard error). Loopback only; every run is bounded in connections and time.
@main
struct Load: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "todostream-load",
        abstract: "Load generator for todostreamd and its peers (nats-server, redis-server).",
        subcommands: [Fanout.self, Request.self, Idle.self, Slow.self, Summarize.self]
    )
}
