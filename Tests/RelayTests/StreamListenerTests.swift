import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import Relay

@Suite struct StreamListenerTests {
    /// Connects a blocking socket to 127.0.0.1:`port`; returns the descriptor or -errno.
    private func connect(port: Int) -> CInt {
        let descriptor = socket(AF_INET, CInt(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return -errno }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if result != 0 {
            let code = errno
            Glibc.close(descriptor)
            return -code
        }
        return descriptor
    }

    private func listen(port: Int) throws -> StreamListener {
        try StreamListener.open(
            host: "127.0.0.1",
            port: port,
            inheritedDescriptor: nil,
            backlog: 16,
            finishedOn: MultiThreadedEventLoopGroup.singleton.next()
        )
    }

    @Test func connectionsAreHandedOverUntilItClosesThenRefused() async throws {
        let listener = try listen(port: 0)
        let port = try #require(listener.localAddress?.port)
        #expect(port > 0)
        let accepted = NIOLockedValueBox<[CInt]>([])
        let arrived = AsyncStream<Void>.makeStream()
        listener.run(logger: Logger(label: "test")) { descriptor in
            accepted.withLockedValue { $0.append(descriptor) }
            arrived.continuation.yield()
        }
        var clients: [CInt] = []
        for _ in 0..<3 {
            let client = connect(port: port)
            #expect(client >= 0)
            clients.append(client)
        }
        var iterator = arrived.stream.makeAsyncIterator()
        for _ in 0..<3 { await iterator.next() }
        let descriptors = accepted.withLockedValue { $0 }
        #expect(descriptors.count == 3)
        // Each is the server's end of one of those connections, and closes on exec.
        for descriptor in descriptors {
            #expect(fcntl(descriptor, F_GETFD) & FD_CLOEXEC != 0)
            var byte: UInt8 = 7
            #expect(write(descriptor, &byte, 1) == 1)
            Glibc.close(descriptor)
        }
        try await listener.close().get()
        // Closed twice: the second returns at once.
        try await listener.close().get()
        let late = connect(port: port)
        #expect(late == -ECONNREFUSED)
        if late >= 0 { Glibc.close(late) }
        for client in clients { Glibc.close(client) }
    }

    @Test func anAddressInUseIsAnErrorWithItsErrno() throws {
        let first = try listen(port: 0)
        let port = try #require(first.localAddress?.port)
        first.run(logger: Logger(label: "test")) { Glibc.close($0) }
        defer { _ = try? first.close().wait() }
        do {
            _ = try listen(port: port)
            Issue.record("bound a port in use")
        } catch let error as IOError {
            #expect(error.errnoCode == EADDRINUSE)
        }
    }
}
