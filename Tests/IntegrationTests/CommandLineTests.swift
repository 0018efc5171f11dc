import ArgumentParser
import Foundation
import Testing
import TodostreamClient

@testable import todostream_cli
@testable import todostreamd

/// The `todostream` commands against the in-process daemon: what they do, and the exit codes
/// their failures become.
@Suite struct CommandLineTests {
    func exitCode(_ arguments: [String]) async -> Int32 {
        do {
            var command = try TodostreamCommand.parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            return 0
        } catch {
            return TodostreamCommand.exitCode(for: error).rawValue
        }
    }

    /// A todo a line: line breaks and control characters in a title are shown escaped.
    @Test func aTitleIsShownOnOneLine() {
        #expect(oneLine("plain title") == "plain title")
        #expect(oneLine("two\nlines\r\tand\u{1}") == "two\\nlines\\r\\tand\\u0001")
        #expect(oneLine("caf\u{E9} \u{1F600}") == "caf\u{E9} \u{1F600}")
    }

    @Test func commandsChangeTheListAndFailuresHaveTheirExitCodes() async throws {
        try await withDaemon { daemon in
            let url = "tcp://127.0.0.1:\(daemon.tcpPort)"
            #expect(await exitCode(["add", "from the command line", "--priority", "HIGH", "--url", url]) == 0)
            let rows = try await daemonList(daemon)
            let row = try #require(rows.first)
            #expect(rows.count == 1)
            #expect(row.title == "from the command line")
            #expect(row.todo.priority == .high)
            let id = row.todo.id.uuidString
            #expect(await exitCode(["toggle", id, "--url", url]) == 0)
            #expect(await exitCode(["edit", id, "--title", "renamed", "--url", url]) == 0)
            #expect(await exitCode(["list", "--url", url]) == 0)
            let edited = try #require(try await daemonList(daemon).first)
            #expect(edited.complete)
            #expect(edited.title == "renamed")
            #expect(edited.todo.version == 3)
            #expect(await exitCode(["delete", id, "--url", url]) == 0)
            #expect(try await daemonList(daemon).isEmpty)

            // The app refuses: 1. Bad usage: 64. No answer: 3.
            #expect(await exitCode(["toggle", UUID().uuidString, "--url", url]) == 1)
            #expect(await exitCode(["add", "   ", "--url", url]) == 1)
            #expect(await exitCode(["list", "--url", "http://127.0.0.1:1"]) == 64)
            #expect(await exitCode(["toggle", "not-an-id", "--url", url]) == 64)
            #expect(await exitCode(["edit", id, "--url", url]) == 64)
            #expect(await exitCode(["add", "x", "--priority", "urgent", "--url", url]) == 64)
            #expect(await exitCode(["list", "--timeout", "0", "--url", url]) == 64)
            #expect(await exitCode(["list", "--ca-file", "/nowhere/ca.pem", "--url", url]) == 64)
            let notPEM = NSTemporaryDirectory() + "todostream-not-pem-\(UUID().uuidString)"
            try Data("not a certificate\n".utf8).write(to: URL(fileURLWithPath: notPEM))
            #expect(await exitCode(["list", "--ca-file", notPEM, "--url", "tls://127.0.0.1:1"]) == 64)
            #expect(await exitCode(["list", "--cert", "/nowhere/cert.pem", "--url", url]) == 64)
            // An edit of a todo that is not stored is the app's refusal (not_found), and
            // creates nothing.
            #expect(await exitCode(["edit", UUID().uuidString, "--title", "ghost", "--url", url]) == 1)
            #expect(try await daemonList(daemon).isEmpty)
            // A listener that accepts and closes at once: never a greeting, so no answer.
            let proxy = try await CutProxy.start(to: daemon.tcpPort)
            proxy.refuse(true)
            #expect(await exitCode(["list", "--timeout", "0.3", "--url", "tcp://127.0.0.1:\(proxy.port)"]) == 3)
            await proxy.stop()
            // A request over the daemon's frame limit is refused before it is sent: the
            // daemon's refusal could not be told from no answer. Nothing was applied.
            #expect(await exitCode(["add", String(repeating: "a", count: 70_000), "--url", url]) == 4)
            #expect(try await daemonList(daemon).isEmpty)
        }
    }

    /// `watch` with a token the daemon refuses stops and says so (exit 4), as `list` does.
    @Test func watchWithARefusedTokenStops() async throws {
        let setup = DaemonSetup.custom {
            $0.tokens = [TokenEntry(sha256: TokenEntry.digest("view-secret-1"), role: .view)]
        }
        try await withDaemon(setup) { daemon in
            let url = "tcp://127.0.0.1:\(daemon.tcpPort)"
            #expect(await exitCode(["watch", "--token", "not-the-token", "--url", url]) == 4)
            // Without a token it does not connect and wait in silence: it says one is needed.
            #expect(await exitCode(["watch", "--url", url]) == 4)
        }
    }

    /// A monitor token cannot ask for the list: `watch` stops and says so (exit 4), as `list`
    /// does, instead of printing nothing for ever.
    @Test(arguments: TestTransport.allCases)
    func watchWithAMonitorTokenStopsAsListDoes(_ transport: TestTransport) async throws {
        let setup = DaemonSetup.custom {
            $0.tokens = [TokenEntry(sha256: TokenEntry.digest("monitor-secret-1"), role: .monitor)]
        }
        try await withDaemon(setup) { daemon in
            let url = transport.url(port: transport.port(of: daemon))
            #expect(await exitCode(["list", "--token", "monitor-secret-1", "--url", url]) == 4)
            let watched = try await within(.seconds(20)) {
                await exitCode(["watch", "--token", "monitor-secret-1", "--url", url])
            }
            #expect(watched == 4)
        }
    }

    /// A request under the client's frame limit but over the daemon's is refused by the daemon
    /// at once (exit 4), not waited for until --timeout (exit 3). Nothing was applied.
    @Test(arguments: TestTransport.allCases)
    func aRequestOverTheDaemonsFrameLimitIsRefusedAtOnce(_ transport: TestTransport) async throws {
        try await withDaemon(.custom({ $0.relay.maxFrameBytes = 1000 })) { daemon in
            let url = transport.url(port: transport.port(of: daemon))
            let title = String(repeating: "a", count: 900)
            #expect(await exitCode(["add", title, "--timeout", "10", "--url", url]) == 4)
            let stored = try await daemonList(daemon)
            #expect(stored.isEmpty)
            // Given the daemon's limit, the client refuses it before sending it.
            #expect(await exitCode(["add", title, "--max-frame-bytes", "1000", "--url", url]) == 4)
            #expect(await exitCode(["add", "short", "--max-frame-bytes", "0", "--url", url]) == 64)
            #expect(await exitCode(["add", "short", "--max-frame-bytes", "1000", "--url", url]) == 0)
            let after = try await daemonList(daemon)
            #expect(after.map(\.title) == ["short"])
        }
    }
}
