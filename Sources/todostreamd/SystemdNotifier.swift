import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// sd_notify(3) without libsystemd: one datagram to `$NOTIFY_SOCKET`. Without that variable
/// every call does nothing.
struct SystemdNotifier: Sendable {
    let socketPath: String?
    /// Set once `STOPPING=1` is sent (copies share it): a reload that ends after that (one left
    /// behind by a stop) does not tell systemd `RELOADING=1` or `READY=1` any more.
    private let stopping = NIOLockedValueBox(false)

    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let path = environment["NOTIFY_SOCKET"] ?? ""
        socketPath = path.isEmpty ? nil : path
    }

    var isEnabled: Bool { socketPath != nil }

    /// Sends `state` (e.g. `READY=1`, several lines joined by `\n`). Returns whether it was sent.
    @discardableResult
    func notify(_ state: String) -> Bool {
        guard let socketPath else { return false }
        let lines = state.split(separator: "\n")
        let sendable = stopping.withLockedValue { stopping in
            if lines.contains("STOPPING=1") { stopping = true }
            return !(stopping && (lines.contains("READY=1") || lines.contains("RELOADING=1")))
        }
        guard sendable else { return false }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var pathBytes = Array(socketPath.utf8)
        // A leading "@" names the abstract namespace: a NUL byte there.
        if pathBytes.first == UInt8(ascii: "@") { pathBytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard pathBytes.count < capacity else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in pathBytes.enumerated() { raw[index] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + pathBytes.count + (pathBytes.first == 0 ? 0 : 1))
        let message = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                message.withUnsafeBytes { buffer in
                    sendto(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), socketAddress, length)
                }
            }
        }
        return sent == message.count
    }

    /// Half of `WATCHDOG_USEC` (at least `minimumWatchdogInterval`), when the watchdog is on and
    /// meant for this process.
    static func watchdogInterval(environment: [String: String] = ProcessInfo.processInfo.environment) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let usec = UInt64(text), usec > 0 else { return nil }
        if let pid = environment["WATCHDOG_PID"], !pid.isEmpty, pid != String(getpid()) { return nil }
        // At most 20 pings a second: each asks the event loops and the store whether they answer,
        // and a watchdog tighter than that (WATCHDOG_USEC=1) is a mistake that would otherwise
        // spin the daemon on pings.
        return max(.microseconds(Int64(usec / 2)), minimumWatchdogInterval)
    }

    static let minimumWatchdogInterval = Duration.milliseconds(50)

    static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
    }
}
