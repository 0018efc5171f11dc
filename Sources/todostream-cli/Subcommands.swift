import ArgumentParser
import Foundation
import TodoApp
import TodostreamClient

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the todos, newest first.")
    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        try await reporting {
            let rows = try await connection.withClient { try await $0.list() }
            for row in rows { output(describe(row)) }
        }
    }
}

struct Add: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create a todo; prints its id.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The title.") var title: String
    @Option(help: "high or normal.") var priority: PriorityArgument?
    @Option(help: "A subtitle.") var subtitle: String?

    func run() async throws {
        try await reporting {
            let (title, subtitle, priority) = (self.title, self.subtitle, self.priority?.priority)
            let saved = try await connection.withClient {
                try await $0.create(title: title, subtitle: subtitle, priority: priority)
            }
            output(saved.todo.id.uuidString.lowercased())
        }
    }
}

struct Toggle: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Toggle a todo's completion.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The todo's id.") var id: String

    // Checked before running, so that a bad id is reported with this command's usage.
    func validate() throws { _ = try parseID(id) }

    func run() async throws {
        let id = try parseID(self.id)
        try await reporting {
            output(describe(try await connection.withClient { try await $0.toggle(id) }))
        }
    }
}

struct Delete: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Delete a todo.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The todo's id.") var id: String

    // Checked before running, so that a bad id is reported with this command's usage.
    func validate() throws { _ = try parseID(id) }

    func run() async throws {
        let id = try parseID(self.id)
        try await reporting {
            output(describe(try await connection.withClient { try await $0.delete(id) }))
        }
    }
}

struct Edit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Change a todo's title, subtitle or priority.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The todo's id.") var id: String
    @Option(help: "The new title.") var title: String?
    @Option(help: "The new subtitle.") var subtitle: String?
    @Option(help: "high or normal.") var priority: PriorityArgument?

    func validate() throws {
        _ = try parseID(id)
        if title == nil, subtitle == nil, priority == nil {
            throw ValidationError("Give at least one of --title, --subtitle, --priority.")
        }
    }

    func run() async throws {
        let id = try parseID(self.id)
        let edit = TodoEdit(title: title, subtitle: subtitle, priority: priority?.priority)
        try await reporting {
            let saved = try await connection.withClient { try await $0.edit(id, edit) }
            output(describe(TodoViewModel(todo: saved.todo)))
        }
    }
}

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the list, then every change as it happens; resumes across reconnects (Ctrl-C to stop)."
    )
    @OptionGroup var connection: ConnectionOptions
    @Flag(
        help: ArgumentHelp(
            "One JSON object per line instead of text.",
            discussion: """
                Each line has "event": "connected" (with "resumed"), "list" (with "count", \
                the todos that follow as "row" lines; sent for every list, an empty one \
                too), "row", "change" (with "seq"), "reset" (with "seq"), "disconnected" \
                or "unreachable" (with "reason").
                """
        )
    ) var json = false

    func run() async throws {
        let json = self.json
        let tokenGiven = connection.token != nil
        try await reporting {
            let client = try connection.makeClient()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                group.addTask {
                    // A daemon that stays unreachable is said once per reason, not per attempt.
                    var unreachable: String?
                    for await event in client.events {
                        if case .unreachable(let reason) = event {
                            if reason == unreachable { continue }
                            unreachable = reason
                        } else if case .connected = event {
                            unreachable = nil
                        }
                        do {
                            try await Watch.show(event, json: json, client: client, tokenGiven: tokenGiven)
                        } catch {
                            await client.close()
                            throw error
                        }
                    }
                }
                try await group.waitForAll()
            }
            // It ends by itself only when the daemon refused it (a bad token): say why.
            if let reason = await client.stoppedBecause { throw CLIFailure(reason, tokenGiven: tokenGiven) }
        }
    }

    /// Asks for the whole list (it is printed when its reply comes, as an event). A daemon that
    /// wants a token this client does not have, or that does not let this token's role ask
    /// (a monitor's), ends the watch (exit 4), as it ends `list`.
    private static func refetch(_ client: TodostreamClient, tokenGiven: Bool) async throws {
        do {
            _ = try await client.request(.requestTodoViewModels)
        } catch let error as ClientError where ["unauthorized", "not_permitted"].contains(error.serverCode) {
            throw CLIFailure(error, tokenGiven: tokenGiven)
        } catch {
            // Anything else (a lost connection, no answer in time): the next connection asks again.
        }
    }

    private static func show(
        _ event: ClientEvent,
        json: Bool,
        client: TodostreamClient,
        tokenGiven: Bool
    ) async throws {
        switch event {
        case .connected(let resumed):
            if json {
                output(#"{"event":"connected","resumed":\#(resumed)}"#)
            } else {
                output(resumed ? "-- resumed" : "-- connected")
            }
            // A new connection (or a reset) shows the whole list again.
            if !resumed { try await refetch(client, tokenGiven: tokenGiven) }
        case .reset(let seq):
            output(json ? #"{"event":"reset","seq":\#(seq)}"# : "-- missed changes up to seq \(seq); refetching")
            try await refetch(client, tokenGiven: tokenGiven)
        case .disconnected:
            output(json ? #"{"event":"disconnected"}"# : "-- disconnected; reconnecting")
        case .unreachable(let reason):
            let text = "-- cannot connect: \(reason); retrying"
            output(json ? jsonLine(["event": "unreachable", "reason": reason]) : text)
        case .event(.responseTodoViewModels(.success(let rows)), _):
            if json {
                // The list's own line: a refetch that finds no todo is seen too.
                output(#"{"count":\#(rows.count),"event":"list"}"#)
                for row in rows { output(line(row, seq: nil, kind: "row")) }
            } else {
                output("-- \(rows.count) \(rows.count == 1 ? "todo" : "todos")")
                for row in rows { output(describe(row)) }
            }
        case .event(.responseTodoViewModel(.success(let row)), let seq):
            output(json ? line(row, seq: seq, kind: "change") : describe(row))
        default:
            break
        }
    }

    private static func line(_ row: TodoViewModel, seq: UInt64?, kind: String) -> String {
        var object: [String: Any] = [
            "event": kind,
            "id": row.todo.id.uuidString.lowercased(),
            "title": row.title,
            "subtitle": row.todo.subtitle,
            "priority": row.todo.priority.rawValue,
            "complete": row.complete,
            "deleted": row.deleted,
            "version": row.todo.version,
        ]
        if let seq { object["seq"] = seq }
        return jsonLine(object)
    }

    private static func jsonLine(_ object: [String: Any]) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }
}

/// One line on standard output, written at once (`watch` runs until interrupted, often into a
/// pipe, where `print` would hold lines back).
///
/// A reader that went away (`| head -1`) ends the program quietly: there is no one left to
/// tell. Any other failure to write (a full disk) is said on standard error, with exit code 5.
func output(_ line: String) {
    do {
        try FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
    } catch {
        if posixCode(of: error) == EPIPE { exit(0) }
        let reason = posixCode(of: error).map { String(cString: strerror($0)) } ?? "\(error)"
        try? FileHandle.standardError.write(contentsOf: Data("todostream: cannot write the output: \(reason)\n".utf8))
        exit(5)
    }
}

/// The POSIX error number behind a failed write (Foundation wraps it in a Cocoa error).
private func posixCode(of error: any Error) -> Int32? {
    let error = error as NSError
    if error.domain == NSPOSIXErrorDomain { return Int32(error.code) }
    if let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
        return Int32(underlying.code)
    }
    return nil
}
