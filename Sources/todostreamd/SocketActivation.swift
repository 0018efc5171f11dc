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
    static func descriptors(environment: [String: String], pid: Int32 = getpid()) throws -> [String: Int32] {
        guard let countText = environment["LISTEN_FDS"], let count = Int32(countText), count > 0 else { return [:] }
        if let listenPID = environment["LISTEN_PID"], Int32(listenPID) != pid { return [:] }
        let names = (environment["LISTEN_FDNAMES"] ?? "").split(separator: ":", omittingEmptySubsequences: false).map(
            String.init
        )
        var result: [String: Int32] = [:]
        for index in 0..<count {
            let name = index < names.count ? names[Int(index)] : "unknown"
            guard ["tcp", "tls", "http"].contains(name) else {
                throw ConfigError(
                    message:
                        "socket activation: descriptor \(firstDescriptor + index) is named \(name); name sockets tcp, tls or http with FileDescriptorName="
                )
            }
            result[name] = firstDescriptor + index
        }
        return result
    }

    /// Replaces configured listeners with inherited sockets of the same name.
    static func apply(_ descriptors: [String: Int32], to listeners: inout ListenerConfiguration) {
        func inherited(_ name: String, _ current: ListenerConfiguration.Address?) -> ListenerConfiguration.Address? {
            guard let descriptor = descriptors[name] else { return current }
            return ListenerConfiguration.Address(
                host: current?.host ?? "0.0.0.0",
                port: current?.port ?? 0,
                inheritedDescriptor: descriptor
            )
        }
        listeners.tcp = inherited("tcp", listeners.tcp)
        listeners.tls = inherited("tls", listeners.tls)
        listeners.http = inherited("http", listeners.http)
    }
}
