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
