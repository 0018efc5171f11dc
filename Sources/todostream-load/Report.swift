/// One result: printed as one JSON line on standard output and one line for people on
/// standard error.
struct Report {
    enum Value {
        case int(Int)
        case double(Double)
        case string(String)
        case bool(Bool)
        case object([(String, Value)])
        case null
    }

    private(set) var fields: [(String, Value)] = []

    mutating func set(_ key: String, _ value: Value) {
        if let index = fields.firstIndex(where: { $0.0 == key }) {
            fields[index].1 = value
        } else {
            fields.append((key, value))
        }
    }

    mutating func set(_ key: String, _ value: Int) { set(key, .int(value)) }
    mutating func set(_ key: String, _ value: Double) { set(key, .double(value)) }
    mutating func set(_ key: String, _ value: String) { set(key, .string(value)) }
    mutating func set(_ key: String, _ value: Bool) { set(key, .bool(value)) }
    mutating func set(_ key: String, counts: [String: Int]) {
        set(key, .object(counts.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) }))
    }

    /// p50/p99/p99.9/max and mean in milliseconds, and the sample count; without samples
    /// each figure is null.
    mutating func setLatency(_ histogram: LatencyHistogram) {
        set("latency_samples", Int(histogram.count))
        set("p50_ms", Self.quantile(histogram, 0.5))
        set("p99_ms", Self.quantile(histogram, 0.99))
        set("p999_ms", Self.quantile(histogram, 0.999))
        set("max_ms", histogram.count == 0 ? .null : .double(Self.milliseconds(histogram.maximum)))
        set("mean_ms", histogram.count == 0 ? .null : .double((histogram.mean / 1e3).rounded() / 1e3))
    }

    /// Quantile `q` of `histogram` in milliseconds; null without samples.
    static func quantile(_ histogram: LatencyHistogram, _ q: Double) -> Value {
        histogram.count == 0 ? .null : .double(milliseconds(histogram.value(atQuantile: q)))
    }

    static func milliseconds(_ nanoseconds: UInt64) -> Double { (Double(nanoseconds) / 1e3).rounded() / 1e3 }

    var jsonLine: String { Self.encode(.object(fields)) }

    private static func encode(_ value: Value) -> String {
        switch value {
        case .int(let number): return String(number)
        case .double(let number): return number.isFinite ? String(number) : "null"
        case .bool(let flag): return flag ? "true" : "false"
        case .null: return "null"
        case .string(let text): return quote(text)
        case .object(let pairs):
            return "{" + pairs.map { quote($0.0) + ":" + encode($0.1) }.joined(separator: ",") + "}"
        }
    }

    private static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

/// Thousands separators for the human line.
func grouped(_ value: Double) -> String {
    let number = Int(value.rounded())
    let digits = String(abs(number))
    var out = ""
    for (offset, character) in digits.enumerated() {
        if offset > 0, (digits.count - offset) % 3 == 0 { out += "," }
        out.append(character)
    }
    return (number < 0 ? "-" : "") + out
}

func decimals(_ value: Double, _ places: Int) -> String {
    var scale = 1.0
    for _ in 0..<places { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    var text = String(rounded)
    if let dot = text.firstIndex(of: ".") {
        let fraction = text[text.index(after: dot)...]
        if fraction.count < places { text += String(repeating: "0", count: places - fraction.count) }
    }
    return text
}

/// "p50 0.123 ms, p99 0.456 ms, p99.9 0.789 ms", or "no latency samples".
func latencyText(_ h: LatencyHistogram) -> String {
    guard h.count > 0 else { return "no latency samples" }
    return "p50 \(decimals(Report.milliseconds(h.value(atQuantile: 0.5)), 3)) ms, "
        + "p99 \(decimals(Report.milliseconds(h.value(atQuantile: 0.99)), 3)) ms, "
        + "p99.9 \(decimals(Report.milliseconds(h.value(atQuantile: 0.999)), 3)) ms"
}
