import Relay

#if canImport(Glibc)
import Glibc
#endif

/// systemd socket activation: listening sockets passed as descriptors 3, 4, … with
/// `LISTEN_FDS`, named by `LISTEN_FDNAMES` (`FileDescriptorName=` in `todostreamd.socket`:
/// `tcp`, `tls` or `http`). They outlive restarts of the daemon, so no connection attempt is
/// refused while it restarts.
enum SocketActivation {
    static let firstDescriptor: Int32 = 3

    /// The inherited descriptors by name; empty when the sockets are not meant for this process.
    ///
    /// As systemd's `sd_listen_fds`: only with `LISTEN_PID` naming this process (without it,
    /// `LISTEN_FDS` may be left over from a parent, and descriptors 3, 4, … are the daemon's
    /// own). Each descriptor must be a listening TCP socket, and each name given once: anything
    /// else is refused before the daemon says it is ready, rather than served as a listener
    /// that is none (`first`: the first descriptor, 3 but in tests).
    static func descriptors(
        environment: [String: String],
        pid: Int32 = getpid(),
        first: Int32 = firstDescriptor
    ) throws -> [String: Int32] {
        guard let countText = environment["LISTEN_FDS"], let count = Int32(countText), count > 0 else { return [:] }
        guard let listenPID = environment["LISTEN_PID"], Int32(listenPID) == pid else { return [:] }
        let names = (environment["LISTEN_FDNAMES"] ?? "").split(separator: ":", omittingEmptySubsequences: false).map(
            String.init
        )
        var result: [String: Int32] = [:]
        for index in 0..<count {
            let descriptor = first + index
            let name = index < names.count ? names[Int(index)] : ""
            guard ["tcp", "tls", "http"].contains(name) else {
                let named = name.isEmpty ? "has no name (LISTEN_FDNAMES)" : "is named \(name)"
                throw ConfigError(
                    message:
                        "socket activation: descriptor \(descriptor) \(named); name sockets tcp, tls or http with FileDescriptorName="
                )
            }
            guard result[name] == nil else {
                throw ConfigError(
                    message: "socket activation: two descriptors are named \(name); name each socket once"
                )
            }
            if let problem = listeningProblem(descriptor) {
                throw ConfigError(
                    message:
                        "socket activation: descriptor \(descriptor) (\(name)) is not a listening TCP socket: \(problem)"
                )
            }
            result[name] = descriptor
        }
        return result
    }

    /// Why `descriptor` is not a listening TCP socket; nil when it is one.
    static func listeningProblem(_ descriptor: Int32) -> String? {
        func option(_ name: Int32) -> Int32? {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(descriptor, SOL_SOCKET, name, &value, &length) == 0 ? value : nil
        }
        guard let type = option(SO_TYPE) else {
            return errno == EBADF ? "it is not open" : "it is not a socket"
        }
        guard type == Int32(SOCK_STREAM.rawValue) else { return "it is not a stream socket" }
        guard let domain = option(SO_DOMAIN), domain == AF_INET || domain == AF_INET6 else {
            return "it is not an IPv4 or IPv6 socket"
        }
        guard option(SO_ACCEPTCONN) == 1 else { return "it does not listen (no listen(2) was called on it)" }
        return nil
    }

    /// Replaces configured listeners with inherited sockets of the same name.
    static func apply(_ descriptors: [String: Int32], to listeners: inout ListenerConfiguration) {
        func inherited(_ name: String, _ current: ListenerConfiguration.Address?) -> ListenerConfiguration.Address? {
            guard let descriptor = descriptors[name] else { return current }
            // The address the service manager bound, not the configured one: the exposure
            // check must judge the socket that actually listens.
            return ListenerConfiguration.Address(
                host: boundHost(descriptor) ?? "0.0.0.0",
                port: current?.port ?? 0,
                inheritedDescriptor: descriptor
            )
        }
        listeners.tcp = inherited("tcp", listeners.tcp)
        listeners.tls = inherited("tls", listeners.tls)
        listeners.http = inherited("http", listeners.http)
    }

    /// The local address a socket is bound to, as an IP literal; nil when it is not an IP socket.
    static func boundHost(_ descriptor: Int32) -> String? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard result == 0 else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch Int32(storage.ss_family) {
        case AF_INET:
            var address = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            }
            guard inet_ntop(AF_INET, &address, &text, socklen_t(text.count)) != nil else { return nil }
        case AF_INET6:
            var address = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
            }
            guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return nil }
        default:
            return nil
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
