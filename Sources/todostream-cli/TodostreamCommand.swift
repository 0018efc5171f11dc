import ArgumentParser
import Foundation
import TodoApp
import TodostreamClient

@main
struct TodostreamCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "todostream",
        abstract: "A command-line client of todostreamd: list, add, toggle, delete, edit and watch todos.",
        discussion: """
            Exit codes:
              0   success
              1   the app refused it: not found, validation failed, conflict, unavailable
              3   no answer in time (daemon unreachable, or TLS refused)
              4   the daemon refused the frame or the token
              5   standard output cannot be written (a full disk); a reader that went away
                  (`todostream watch | head -1`) ends it quietly with 0
              64  bad usage: arguments, URL, TLS files
            """,
        version: "1.0.0",
        subcommands: [List.self, Add.self, Toggle.self, Delete.self, Edit.self, Watch.self]
    )
}

/// The options every subcommand takes.
struct ConnectionOptions: ParsableArguments {
    @Option(help: "The daemon: tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT/events or wss://HOST:PORT/events.")
    var url: String = "tcp://127.0.0.1:7878"

    @Option(help: "A view token (when the daemon requires authentication).")
    var token: String?

    @Option(help: "PEM file of the CA certificates to trust (tls://, wss://).")
    var caFile: String?

    @Option(help: "PEM file of a client certificate (tls://, wss://).")
    var cert: String?

    @Option(help: "PEM file of the client certificate's key.")
    var key: String?

    @Option(help: "Seconds to wait for an answer, reconnects included (more than 0).")
    var timeout: Double = 10

    @Option(
        help: """
            The daemon's limits.max_frame_bytes, when it is not the default: a longer request is \
            refused before it is sent.
            """
    )
    var maxFrameBytes: Int = 65_536

    /// A day: longer waits are mistakes (and past Int64 milliseconds, not representable).
    static let maxTimeoutSeconds: Double = 86_400

    func validate() throws {
        guard timeout > 0, timeout <= Self.maxTimeoutSeconds else {
            throw ValidationError(
                "--timeout must be a number of seconds above 0 and at most \(Int(Self.maxTimeoutSeconds))."
            )
        }
        for (option, path) in [("--ca-file", caFile), ("--cert", cert), ("--key", key)] {
            if let path, !FileManager.default.isReadableFile(atPath: path) {
                throw ValidationError("\(option): cannot read \(path).")
            }
        }
        if (cert == nil) != (key == nil) { throw ValidationError("--cert and --key go together.") }
        guard maxFrameBytes > 0 else { throw ValidationError("--max-frame-bytes must be a number of bytes above 0.") }
    }

    func makeClient() throws -> TodostreamClient {
        do {
            let configuration = ClientConfiguration(
                endpoint: try ClientEndpoint(url: url),
                token: token,
                tls: .init(caFile: caFile, certificateFile: cert, keyFile: key),
                backoff: Backoff(initial: .milliseconds(100), maximum: .seconds(5)),
                requestTimeout: .milliseconds(Int64(max(timeout, 0.001) * 1000)),
                maxRequestBytes: maxFrameBytes
            )
            return try TodostreamClient(configuration)
        } catch {
            throw CLIFailure(error)
        }
    }

    /// Runs `body` with a connected client, then closes it.
    func withClient<T: Sendable>(_ body: @escaping @Sendable (TodostreamClient) async throws -> T) async throws -> T {
        let client = try makeClient()
        let tokenGiven = token != nil
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            group.addTask {
                do {
                    let value = try await body(client)
                    await client.close()
                    return value
                } catch {
                    await client.close()
                    throw CLIFailure(error, tokenGiven: tokenGiven)
                }
            }
            var answer: T?
            for try await value in group {
                if let value { answer = value }
            }
            guard let answer else { throw CLIFailure(ClientError(.closed, "The client stopped.")) }
            return answer
        }
    }
}

/// An error as the CLI reports it: a message on standard error and an exit code.
struct CLIFailure: Error, CustomStringConvertible {
    let description: String
    let exitCode: Int32

    init(_ description: String, exitCode: Int32) {
        self.description = description
        self.exitCode = exitCode
    }

    /// `error` as the CLI reports it, said in terms of its options: whether `--token` was given
    /// tells a daemon that wants a token from one that refused it.
    init(_ error: any Error, tokenGiven: Bool) {
        if let error = error as? ClientError {
            let unauthorized = error.code == .unauthorized || error.serverCode == "unauthorized"
            if unauthorized, !tokenGiven {
                self.init("The daemon requires a token: give it with --token.", exitCode: 4)
                return
            }
            if error.code == .requestTooLarge {
                let hint = " If the daemon allows more, give its limit with --max-frame-bytes."
                self.init(error.message + hint, exitCode: 4)
                return
            }
        }
        self.init(error)
    }

    init(_ error: any Error) {
        if let failure = error as? CLIFailure {
            self = failure
            return
        }
        switch error {
        case let error as AppError:
            description = "\(error.code): \(error.message)"
            exitCode = 1
        case let error as ClientError:
            description = error.message
            switch error.code {
            case .invalidURL, .invalidTLSConfiguration: exitCode = ExitCode.validationFailure.rawValue
            case .timeout, .closed: exitCode = 3
            default: exitCode = 4
            }
        default:
            description = "\(error)"
            exitCode = 4
        }
    }
}

extension AsyncParsableCommand {
    /// Runs `body`; a failure is printed on standard error and becomes the exit code.
    func reporting(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let failure as CLIFailure {
            FileHandle.standardError.write(Data("todostream: \(failure.description)\n".utf8))
            throw ExitCode(failure.exitCode)
        }
    }
}

func parseID(_ text: String) throws -> UUID {
    guard let id = UUID(uuidString: text) else {
        throw ValidationError("\(text) is not a todo id (a UUID).")
    }
    return id
}

func describe(_ viewModel: TodoViewModel) -> String {
    let mark = viewModel.complete ? "[x]" : "[ ]"
    let priority = viewModel.todo.priority == .high ? " !" : ""
    let deleted = viewModel.deleted ? " (deleted)" : ""
    return "\(mark) \(viewModel.todo.id.uuidString.lowercased())  \(oneLine(viewModel.title))\(priority)\(deleted)"
}

/// `text` on one line: a todo a line, whatever its title holds (line breaks and other control
/// characters are shown escaped, as in JSON).
func oneLine(_ text: String) -> String {
    guard text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return text }
    var out = ""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where scalar.value < 0x20 || scalar.value == 0x7F:
            out += String(format: "\\u%04x", scalar.value)
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out
}

/// `--priority high|normal`.
enum PriorityArgument: String, ExpressibleByArgument, CaseIterable {
    case high
    case normal

    init?(argument: String) { self.init(rawValue: argument.lowercased()) }

    var priority: TodoPriority { self == .high ? .high : .normal }
}
