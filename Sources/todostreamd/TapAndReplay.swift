import ArgumentParser

struct Tap: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print every event of a running daemon as NDJSON (needs a monitor token).")
    @Option(help: "The daemon's NDJSON listener, HOST:PORT.") var connect: String = "127.0.0.1:7878"
    func run() async throws { fail("tap is not available in this build yet") }
}

struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Publish the requests of a recorded NDJSON file and report what differed.")
    @Argument(help: "The recorded NDJSON file.") var file: String
    @Option(help: "The daemon's NDJSON listener, HOST:PORT.") var connect: String = "127.0.0.1:7878"
    func run() async throws { fail("replay is not available in this build yet") }
}
