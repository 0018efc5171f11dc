/// A point in time with millisecond precision, written as RFC 3339 in UTC
/// (`2026-11-21T19:06:04.123Z`).
public struct Timestamp: Sendable, Hashable, Comparable {
    public let millisecondsSince1970: Int64

    public init(millisecondsSince1970: Int64) { self.millisecondsSince1970 = millisecondsSince1970 }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSince1970 < rhs.millisecondsSince1970
    }

    /// RFC 3339, UTC, milliseconds.
    public var rfc3339: String {
        if hasFourDigitYear { return String(unsafeUninitializedCapacity: 24) { writeRFC3339(into: $0) } }
        let (year, month, day, hour, minute, second, milli) = fields
        return
            "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)).\(pad(milli, 3))Z"
    }

    /// Writes the usual form's 24 ASCII bytes at the start of `buffer` (which holds at least
    /// 24) and returns 24; writes nothing and returns 0 unless `hasFourDigitYear` (`rfc3339`
    /// spells those years).
    func writeRFC3339(into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
        guard hasFourDigitYear else { return 0 }
        let (year, month, day, hour, minute, second, milli) = fields
        var index = 0
        func digits(_ value: Int64, _ width: Int) {
            var rest = value
            for offset in stride(from: width - 1, through: 0, by: -1) {
                buffer[index + offset] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            }
            index += width
        }
        func byte(_ character: Unicode.Scalar) {
            buffer[index] = UInt8(ascii: character)
            index += 1
        }
        digits(year, 4)
        byte("-")
        digits(month, 2)
        byte("-")
        digits(day, 2)
        byte("T")
        digits(hour, 2)
        byte(":")
        digits(minute, 2)
        byte(":")
        digits(second, 2)
        byte(".")
        digits(milli, 3)
        byte("Z")
        return index
    }

    /// Whether the year is 0…9999: the instants `writeRFC3339` writes.
    var hasFourDigitYear: Bool {
        (-62_167_219_200_000..<253_402_300_800_000).contains(millisecondsSince1970)
    }

    /// Year, month, day, hour, minute, second and millisecond, in UTC.
    private var fields: (Int64, Int64, Int64, Int64, Int64, Int64, Int64) {
        let ms = millisecondsSince1970
        let days = floorDiv(ms, 86_400_000)
        let msOfDay = ms - days * 86_400_000
        let (year, month, day) = Self.civil(fromDays: days)
        return (
            year, month, day, msOfDay / 3_600_000, (msOfDay / 60_000) % 60, (msOfDay / 1000) % 60, msOfDay % 1000
        )
    }

    /// Reads the form `rfc3339` writes (`2026-11-21T19:06:04.123Z`); nil for anything else.
    public init?(rfc3339 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 24, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            bytes[19] == UInt8(ascii: "."), bytes[23] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
            let milli = number(20..<23), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60,
            second < 60
        else { return nil }
        let days = Self.days(fromCivil: year, month, day)
        self.init(
            millisecondsSince1970: days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli
        )
    }

    /// Howard Hinnant's days-from-civil algorithm (the inverse of `civil(fromDays:)`).
    static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDiv(y, 400)
        let yoe = y - era * 400
        let mp = month > 2 ? month - 3 : month + 9
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// Howard Hinnant's days-to-civil algorithm.
    static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = floorDiv(z, 146_097)
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}

private func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
}

private func pad(_ value: Int64, _ width: Int) -> String {
    let text = String(value)
    return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
}
