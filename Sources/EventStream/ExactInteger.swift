import Foundation

extension KeyedDecodingContainer {
    /// The value at `key` when it is a JSON number whose value is an integer that fits `T`,
    /// however it is written (`1.0`, `1e3`, `9223372036854775807.0`); nil for anything else.
    ///
    /// Read as a `Decimal`, from the number's decimal digits (38 significant ones), not as a
    /// `Double`: JSONDecoder's own integer decoding goes through a `Double` for a number with
    /// a fraction or an exponent, so it takes `1.0000000000000000001` for 1 and `1e-400` for
    /// 0. A number `Decimal` cannot hold (`1e-400`, `1e200`) is no integer of any width.
    public func decodeExactInteger<T: FixedWidthInteger>(_ type: T.Type, forKey key: Key) -> T? {
        if case .integer(let value) = decodeExactNumber(type, forKey: key) { return value }
        return nil
    }

    /// The value at `key` read as `decodeExactInteger` reads it, telling apart an integer too
    /// large for `T` from anything that is no integer.
    public func decodeExactNumber<T: FixedWidthInteger>(_ type: T.Type, forKey key: Key) -> ExactNumber<T> {
        guard let number = try? decode(Decimal.self, forKey: key), number.isFinite else { return .notAnInteger }
        // An integer's description is its digits alone, with its sign.
        let digits = "\(number)"
        if let value = T(digits) { return .integer(value) }
        return digits.allSatisfy({ $0.isNumber || $0 == "-" }) ? .outOfRange : .notAnInteger
    }
}

/// A JSON number as an integer of a given width (`decodeExactNumber`).
public enum ExactNumber<T: FixedWidthInteger> {
    case integer(T)
    /// An integer, past the width's range.
    case outOfRange
    case notAnInteger
}
