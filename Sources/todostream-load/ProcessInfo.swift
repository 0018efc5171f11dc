import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What the tool reads about other processes and sets about itself.
enum SystemProbe {
    /// Resident set size of `pid` in KiB, from /proc/PID/status (`VmRSS`); nil when unreadable.
    static func residentKiB(pid: Int32) -> Int? {
        guard let text = readSmallFile("/proc/\(pid)/status") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let digits = line.dropFirst(6).filter { $0.isNumber }
            return Int(String(digits))
        }
        return nil
    }

    /// Whether a process `pid` exists (it may belong to another user).
    static func processExists(pid: Int32) -> Bool {
        guard pid > 0 else { return false }
        return kill(pid, 0) == 0 || errno == EPERM
    }

    /// Whether `pid` holds a socket listening on TCP `port` (of any address), by the listening
    /// entries of /proc/PID/net/tcp and tcp6 and the socket inodes among /proc/PID/fd; nil
    /// when that cannot be told (a file not readable).
    static func listens(pid: Int32, port: Int) -> Bool? {
        var inodes: Set<String> = []
        var readable = false
        for file in ["tcp", "tcp6"] {
            guard let text = readSmallFile("/proc/\(pid)/net/\(file)", limit: 64 << 20) else { continue }
            readable = true
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count > 9, fields[3] == "0A", let colon = fields[1].lastIndex(of: ":"),
                    Int(fields[1][fields[1].index(after: colon)...], radix: 16) == port
                else { continue }
                inodes.insert(String(fields[9]))
            }
        }
        guard readable else { return nil }
        guard !inodes.isEmpty else { return false }
        let directory = "/proc/\(pid)/fd"
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return nil }
        for entry in entries {
            guard let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\(entry)"),
                link.hasPrefix("socket:["), link.hasSuffix("]")
            else { continue }
            if inodes.contains(String(link.dropFirst(8).dropLast())) { return true }
        }
        return false
    }

    /// CPU time `pid` has used so far in clock ticks, its threads included: in user space and
    /// in the kernel, from /proc/PID/stat (`utime` and `stime`, fields 14 and 15); nil when
    /// unreadable.
    static func cpuTicks(pid: Int32) -> CPUTicks? {
        guard let text = readSmallFile("/proc/\(pid)/stat", limit: 4_096),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // After the command name (which may hold spaces and parentheses): field 3 onwards.
        let fields = text[text.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return CPUTicks(user: user, system: system)
    }

    /// Clock ticks per second (`getconf CLK_TCK`).
    static var clockTicksPerSecond: Int {
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        return ticks > 0 ? ticks : 100
    }

    /// Raises this process's open-file limit to at least `wanted` (or as far as allowed) and
    /// returns the soft limit in force afterwards.
    @discardableResult
    static func raiseFileLimit(to wanted: Int) -> Int {
        var limit = rlimit()
        #if canImport(Glibc)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return -1 }
        let target = rlim_t(max(wanted, 0))
        if limit.rlim_max != rlim_t.max && limit.rlim_max < target {
            var raised = limit
            raised.rlim_max = target
            raised.rlim_cur = target
            if setrlimit(resource, &raised) == 0 { return Int(target) }
        }
        if limit.rlim_cur < target {
            limit.rlim_cur = limit.rlim_max == rlim_t.max ? target : min(target, limit.rlim_max)
            _ = setrlimit(resource, &limit)
        }
        _ = getrlimit(resource, &limit)
        return Int(limit.rlim_cur)
    }

    static func readSmallFile(_ path: String, limit: Int = 1 << 20) -> String? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while bytes.count < limit {
            let got = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if got <= 0 { break }
            bytes.append(contentsOf: chunk[0..<got])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The state of every IPv4 TCP socket of this machine's network namespace, from
    /// /proc/net/tcp, keyed by "LOCAL:PORT>REMOTE:PORT" in that file's hex notation
    /// (`01` is established).
    static func tcpSocketStates() -> [String: String] {
        guard let text = readSmallFile("/proc/net/tcp", limit: 64 << 20) else { return [:] }
        var states: [String: String] = [:]
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 3 else { continue }
            states["\(fields[1])>\(fields[2])"] = String(fields[3])
        }
        return states
    }

    /// "a.b.c.d", port in /proc/net/tcp's notation: "DDCCBBAA:PPPP" (uppercase hex).
    static func procTCPKey(ip: String, port: Int) -> String? {
        let octets = ip.split(separator: ".").compactMap { UInt8($0) }
        guard octets.count == 4 else { return nil }
        return octets.reversed().map(hex2).joined() + ":" + hex2(UInt8(port >> 8)) + hex2(UInt8(port & 0xFF))
    }

    private static func hex2(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
    }
}

/// CPU time in clock ticks: in user space and in the kernel.
struct CPUTicks {
    var user: Int
    var system: Int
    var total: Int { user + system }
}

/// The server's CPU time (user + system) over the measured window, from /proc/PID/stat read
/// at the window's start and end.
struct ServerCPUWindow {
    let pid: Int32?
    private var startTicks: CPUTicks?
    private var endTicks: CPUTicks?

    init(pid: Int32?) { self.pid = pid }

    mutating func start() { startTicks = pid.flatMap { SystemProbe.cpuTicks(pid: $0) } }

    mutating func stop() { endTicks = pid.flatMap { SystemProbe.cpuTicks(pid: $0) } }

    /// The window's ticks, in user space and in the kernel.
    var split: CPUTicks? {
        guard let startTicks, let endTicks else { return nil }
        return CPUTicks(user: endTicks.user - startTicks.user, system: endTicks.system - startTicks.system)
    }

    /// `ticks` in microseconds per operation, `count` of them.
    private func microseconds(_ ticks: Int, per count: Int) -> Double {
        Double(ticks) / Double(SystemProbe.clockTicksPerSecond) * 1e6 / Double(count)
    }

    /// Adds `server_cpu_s`, `clk_tck`, `server_cpu_us_per_<unit>` (per `count` operations
    /// completed in the window) and its two parts, `server_cpu_user_us_per_<unit>` (the
    /// server's own code and its libraries) and `server_cpu_system_us_per_<unit>` (the
    /// kernel on its behalf: system calls, the TCP stack, the disk), to `report`.
    func fill(_ report: inout Report, count: Int, unit: String) {
        guard let split else { return }
        let seconds = Double(split.total) / Double(SystemProbe.clockTicksPerSecond)
        report.set("server_cpu_ticks", split.total)
        report.set("clk_tck", SystemProbe.clockTicksPerSecond)
        report.set("server_cpu_s", (seconds * 1_000).rounded() / 1_000)
        guard count > 0 else { return }
        for (key, ticks) in [("", split.total), ("user_", split.user), ("system_", split.system)] {
            report.set("server_cpu_\(key)us_per_\(unit)", (microseconds(ticks, per: count) * 10).rounded() / 10)
        }
    }

    /// " server CPU 12.3 µs/request (user 8.1, kernel 4.2)" or "".
    func text(count: Int, unit: String) -> String {
        guard let split, count > 0 else { return "" }
        let text = [split.total, split.user, split.system].map { decimals(microseconds($0, per: count), 1) }
        return "; server CPU \(text[0]) µs/\(unit) (user \(text[1]), kernel \(text[2]))"
    }
}
