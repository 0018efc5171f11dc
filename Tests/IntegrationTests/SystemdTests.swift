import Foundation
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import todostreamd

/// A datagram socket standing in for systemd's notify socket, read by a plain thread.
final class NotifySocket: Sendable {
    let path: String
    let messages = NIOLockedValueBox<[String]>([])
    private let inbox = Inbox()
    private let fd: Int32

    init() throws {
        path = NSTemporaryDirectory() + "notify-\(UUID().uuidString.prefix(8)).sock"
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        #expect(bound == 0)
        let messages = self.messages
        let inbox = self.inbox
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count <= 0 { return }
                let text = String(decoding: buffer[..<count], as: UTF8.self)
                messages.withLockedValue { $0.append(text) }
                inbox.append(Array(text.utf8))
            }
        }
    }

    /// Waits until a message containing `text` has arrived.
    func wait(for text: String) async throws {
        while !messages.withLockedValue({ $0.contains { $0.contains(text) } }) {
            _ = try await inbox.take(timeout: .seconds(10), on: MultiThreadedEventLoopGroup.singleton.any()) {
                $0.isEmpty ? nil : $0.count
            }
        }
    }

    func close() {
        shutdown(fd, Int32(SHUT_RDWR))
        _ = Glibc.close(fd)
        unlink(path)
    }
}

@Suite(.timeLimit(.minutes(2))) struct SystemdTests {
    @Test func readyAfterListenersThenWatchdogThenStopping() async throws {
        let socket = try NotifySocket()
        defer { socket.close() }
        try await withDaemon(
            .custom({ options in
                options.environment = ["NOTIFY_SOCKET": socket.path, "WATCHDOG_USEC": "200000"]
            })
        ) { daemon in
            try await socket.wait(for: "READY=1")
            // READY means the listeners accept.
            let (client, _) = try await daemon.client()
            await client.close()
            try await socket.wait(for: "WATCHDOG=1")
            try await socket.wait(for: "STATUS=")
            #expect(socket.messages.withLockedValue { $0.first }?.hasPrefix("READY=1") == true)
        }
        try await socket.wait(for: "STOPPING=1")
    }

    /// Once `STOPPING=1` is sent, a reload left running by the stop does not tell systemd
    /// `RELOADING=1` or `READY=1` any more (copies of the notifier share that).
    @Test func nothingSaysReadyOrReloadingAfterStopping() async throws {
        let socket = try NotifySocket()
        defer { socket.close() }
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": socket.path])
        let copy = notifier
        #expect(notifier.notify("RELOADING=1\nMONOTONIC_USEC=1"))
        #expect(notifier.notify("READY=1"))
        #expect(notifier.notify("STOPPING=1\nSTATUS=draining"))
        #expect(copy.notify("RELOADING=1\nMONOTONIC_USEC=2") == false)
        #expect(copy.notify("READY=1") == false)
        #expect(copy.notify("STATUS=drained"))
        try await socket.wait(for: "STATUS=drained")
        #expect(
            socket.messages.withLockedValue { $0 } == [
                "RELOADING=1\nMONOTONIC_USEC=1", "READY=1", "STOPPING=1\nSTATUS=draining", "STATUS=drained",
            ]
        )
    }

    @Test func watchdogIsForThisProcessOnly() {
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "4000000"]) == .seconds(2))
        #expect(
            SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"]) == nil
        )
        #expect(SystemdNotifier.watchdogInterval(environment: [:]) == nil)
        // A watchdog of a microsecond is a mistake: pinged 20 times a second, not 500,000.
        #expect(SystemdNotifier.watchdogInterval(environment: ["WATCHDOG_USEC": "1"]) == .milliseconds(50))
        #expect(SystemdNotifier(environment: [:]).notify("READY=1") == false)
    }

    @Test func aWedgedEventLoopStopsTheWatchdog() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var options = DaemonOptions()
        options.storage = .memory
        options.listeners = .init(tcp: .init(host: "127.0.0.1", port: 0))
        options.environment = [:]
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        let daemon = try await Daemon.start(options, logger: logger, group: group)
        #expect(await Daemon.probe(group: group, store: daemon.store, relay: daemon.relay) != nil)
        let release = NIOLockedValueBox(false)
        let wedged = group.any().submit {
            while !release.withLockedValue({ $0 }) { usleep(1000) }
        }
        #expect(
            await Daemon.probe(group: group, store: daemon.store, relay: daemon.relay, timeout: .milliseconds(300))
                == nil
        )
        release.withLockedValue { $0 = true }
        try await wedged.get()
        #expect(await Daemon.probe(group: group, store: daemon.store, relay: daemon.relay) != nil)
        let running = Task { try await daemon.run() }
        await daemon.shutdown()
        try await running.value
        try await group.shutdownGracefully()
    }
}
