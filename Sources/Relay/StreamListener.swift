import Foundation
import Glibc
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A listening TCP socket whose connections are accepted by a thread of its own and handed to
/// the event loops as connected sockets (`ClientBootstrap.withConnectedSocket`), so that the
/// session of each knows its socket's descriptor and can write to it directly
/// (`SocketWriteStateMachine`; docs/DECISIONS.md, "Plain TCP and WebSocket sessions write to
/// their socket"). It serves the plain TCP and plain HTTP listeners.
///
/// The thread waits in `poll` for connections and for `close()`, which wakes it through a
/// pipe (a listening socket inherited from systemd must not be shut down: systemd keeps
/// it for the next start). The thread closes the descriptors on its way out, so their numbers
/// are never reused while it still uses them.
final class StreamListener: Sendable {
    /// The address it listens on (the port resolved when 0 was asked for).
    let localAddress: SocketAddress?
    private let descriptor: CInt
    /// A pipe: `close()` writes to `wakeWriter`, which wakes the thread polling `wake`.
    private let wake: CInt
    private let wakeWriter: CInt
    private let state = NIOLockedValueBox(Phase.listening)
    private let finished: EventLoopPromise<Void>

    private enum Phase {
        case listening
        /// `close()` has woken the thread.
        case closing
        /// The thread has closed the descriptors (after `close()`, or on its own after the
        /// socket failed): nothing may use them any more.
        case stopped
    }

    /// What `accept` does when the process is out of descriptors or memory: waits this long
    /// before it tries again (the connection waits in the kernel's backlog meanwhile).
    static let exhaustedPause: TimeInterval = 0.05

    private init(descriptor: CInt, finishedOn loop: any EventLoop) throws {
        var ends: [CInt] = [-1, -1]
        guard pipe(&ends) == 0 else { throw IOError(errnoCode: errno, reason: "pipe") }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let flags = fcntl(descriptor, F_GETFL)
        guard flags >= 0, fcntl(descriptor, F_SETFL, flags | O_NONBLOCK) == 0 else {
            let code = errno
            for end in ends { Glibc.close(end) }
            throw IOError(errnoCode: code, reason: "fcntl")
        }
        self.descriptor = descriptor
        self.wake = ends[0]
        self.wakeWriter = ends[1]
        self.localAddress = Self.localAddress(of: descriptor)
        // Made last: a promise must not be dropped uncompleted when the set-up fails.
        self.finished = loop.makePromise()
    }

    /// Binds `host:port` (with `SO_REUSEADDR`) and listens with `backlog`, or listens on an
    /// inherited socket. Throws `IOError` with the failing call's errno.
    static func open(
        host: String,
        port: Int,
        inheritedDescriptor: CInt?,
        backlog: CInt,
        finishedOn loop: any EventLoop
    ) throws -> StreamListener {
        if let inheritedDescriptor {
            // Socket activation: already bound and listening.
            return try StreamListener(descriptor: inheritedDescriptor, finishedOn: loop)
        }
        let address = try SocketAddress.makeAddressResolvingHost(host, port: port)
        let family: CInt
        switch address {
        case .v4: family = AF_INET
        case .v6: family = AF_INET6
        case .unixDomainSocket: family = AF_UNIX
        }
        let descriptor = socket(family, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw IOError(errnoCode: errno, reason: "socket") }
        do {
            var one: CInt = 1
            guard setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<CInt>.size)) == 0 else {
                throw IOError(errnoCode: errno, reason: "setsockopt")
            }
            let bound = address.withSockAddr { pointer, size in Glibc.bind(descriptor, pointer, socklen_t(size)) }
            guard bound == 0 else { throw IOError(errnoCode: errno, reason: "bind") }
            guard listen(descriptor, backlog) == 0 else { throw IOError(errnoCode: errno, reason: "listen") }
            return try StreamListener(descriptor: descriptor, finishedOn: loop)
        } catch {
            Glibc.close(descriptor)
            throw error
        }
    }

    /// Starts the accepting thread: every connection's descriptor (close on exec)
    /// goes to `handOver`, which owns it from then on.
    func run(logger: Logger, handOver: @escaping @Sendable (CInt) -> Void) {
        let thread = Thread { [self] in
            self.acceptUntilClosed(logger: logger, handOver: handOver)
            self.state.withLockedValue { phase in
                phase = .stopped
                Glibc.close(self.descriptor)
                Glibc.close(self.wake)
                Glibc.close(self.wakeWriter)
            }
            self.finished.succeed()
        }
        thread.name = "todostream-accept"
        thread.start()
    }

    private func acceptUntilClosed(logger: Logger, handOver: @Sendable (CInt) -> Void) {
        var lastComplaint: Date?
        var watched = [
            pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            let ready = poll(&watched, nfds_t(watched.count), -1)
            if ready < 0, errno != EINTR {
                logger.error("listening socket failed; no longer accepting", metadata: ["errno": "\(errno)"])
                return
            }
            if watched[1].revents != 0 { return }
            guard watched[0].revents != 0 else { continue }
            // Take what waits (a bounded number, so a flood still lets `close()` be seen).
            for _ in 0..<Self.acceptsPerWake {
                let connection = accept(descriptor, nil, nil)
                if connection >= 0 {
                    // Not inherited by processes the daemon starts; NIO makes it non-blocking.
                    _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
                    handOver(connection)
                    continue
                }
                let code = errno
                switch code {
                case EAGAIN, EWOULDBLOCK:
                    break
                case EINTR, ECONNABORTED, EPROTO, EPERM:
                    // The connection went away before it was taken, or a signal: take the next.
                    continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    if lastComplaint.map({ Date().timeIntervalSince($0) > 10 }) ?? true {
                        logger.warning(
                            "cannot accept connections: out of descriptors or memory; retrying",
                            metadata: ["errno": "\(code)"]
                        )
                        lastComplaint = Date()
                    }
                    // The connection waits in the kernel's backlog meanwhile.
                    Thread.sleep(forTimeInterval: Self.exhaustedPause)
                default:
                    logger.error("listening socket failed; no longer accepting", metadata: ["errno": "\(code)"])
                    return
                }
                break
            }
        }
    }

    /// Connections taken per wake-up of the thread before it looks at `close()` again.
    static let acceptsPerWake = 64

    /// Stops accepting; the returned future completes once the thread has closed the socket.
    func close() -> EventLoopFuture<Void> {
        state.withLockedValue { phase in
            // Under the lock: the thread closes the pipe under it too, so this never writes
            // to a descriptor number that has been closed (and perhaps reused).
            guard case .listening = phase else { return }
            phase = .closing
            var byte: UInt8 = 1
            _ = write(wakeWriter, &byte, 1)
        }
        return finished.futureResult
    }

    private static func localAddress(of descriptor: CInt) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard result == 0 else { return nil }
        switch CInt(storage.ss_family) {
        case AF_INET:
            let address = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in.self) }
            return SocketAddress(address)
        case AF_INET6:
            let address = withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self) }
            return SocketAddress(address)
        default:
            return nil
        }
    }
}
