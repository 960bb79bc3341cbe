/// IEEE 11073-20601 16-bit floating point ("SFLOAT", the SIG's `medfloat16`).
///
///     bits 15...12  exponent E, 4-bit two's complement (-8...7)
///     bits 11...0   mantissa M, 12-bit two's complement (-2048...2047)
///     value = M x 10^E; on the wire little-endian: byte 0 = low 8 bits of M, byte 1 = E << 4 | M >> 8
///
/// The standard reserves five 16-bit patterns, all with exponent 0: 0x07FF NaN, 0x0800 NRes (not at this
/// resolution), 0x07FE +INFINITY, 0x0802 -INFINITY, 0x0801 reserved. They decode to their own cases and are
/// never numbers: a meter's HI reading is +INFINITY with sensor status bit 5, a LO is -INFINITY with bit 6.
/// Those mantissas under a non-zero exponent are ordinary numbers (the standard defines the special values
/// with exponent 0 only); the encoder never produces them, so every value it builds decodes to itself.
public enum SFloat: Hashable, Sendable {
    /// A number `mantissa x 10^exponent`: mantissa -2048...2047, exponent -8...7 (12 and 4 bits).
    case value(mantissa: Int16, exponent: Int8)
    case nan
    case nres
    case positiveInfinity
    case negativeInfinity
    case reserved

    @inline(__always)
    public init(bits: UInt16) {
        switch bits {
        case 0x07FF: self = .nan
        case 0x0800: self = .nres
        case 0x07FE: self = .positiveInfinity
        case 0x0802: self = .negativeInfinity
        case 0x0801: self = .reserved
        default:
            // Sign-extend the 12-bit mantissa and the 4-bit exponent.
            let mantissa = Int16(bitPattern: bits << 4) >> 4
            let exponent = Int8(truncatingIfNeeded: Int16(bitPattern: bits) >> 12)
            self = .value(mantissa: mantissa, exponent: exponent)
        }
    }

    /// The 16-bit pattern. Out-of-range mantissas and exponents of `.value` are truncated to 12 and 4 bits.
    public var bits: UInt16 {
        switch self {
        case .nan: return 0x07FF
        case .nres: return 0x0800
        case .positiveInfinity: return 0x07FE
        case .negativeInfinity: return 0x0802
        case .reserved: return 0x0801
        case let .value(mantissa, exponent):
            return UInt16(truncatingIfNeeded: Int(exponent)) << 12 | UInt16(bitPattern: mantissa) & 0x0FFF
        }
    }

    /// Whether this is a number (not NaN, NRes, an infinity or the reserved value).
    public var isNumber: Bool {
        if case .value = self { return true }
        return false
    }

    /// The number, correctly rounded to the nearest `Double`; nil for special values.
    public var doubleValue: Double? { scaledDouble(powerOfTen: 0) }

    /// `value x 10^powerOfTen`, computed from the mantissa with one exact power of ten so that e.g.
    /// 111 x 10^-5 kg/L scaled by 10^5 is exactly 111 (not 111.00000000000001). Nil for special values.
    public func scaledDouble(powerOfTen: Int) -> Double? {
        guard case let .value(mantissa, exponent) = self else { return nil }
        let e = Int(exponent) + powerOfTen
        let m = Double(mantissa)
        return e >= 0 ? m * SFloat.powerOfTen(e) : m / SFloat.powerOfTen(-e)
    }

    /// The five reserved patterns, named apart from numbers; the raw value is the name used in text.
    public enum Special: String, Hashable, Sendable, CaseIterable {
        case nan
        case nres
        case positiveInfinity = "+inf"
        case negativeInfinity = "-inf"
        case reserved
    }

    /// The special value; nil for numbers.
    public var special: Special? {
        switch self {
        case .value: return nil
        case .nan: return .nan
        case .nres: return .nres
        case .positiveInfinity: return .positiveInfinity
        case .negativeInfinity: return .negativeInfinity
        case .reserved: return .reserved
        }
    }

    /// `nan`, `nres`, `+inf`, `-inf` or `reserved`; nil for numbers.
    public var specialName: String? { special?.rawValue }

    /// Encodes `value` with the given exponent: the mantissa is `value / 10^exponent` rounded half away from
    /// zero. Nil when the exponent is outside -8...7 or the mantissa outside -2045...2045 (the range that
    /// can never collide with a special value). NaN and the infinities map to `.nan`, `.positiveInfinity`
    /// and `.negativeInfinity`.
    public init?(_ value: Double, exponent: Int8) {
        if value.isNaN { self = .nan; return }
        if value == .infinity { self = .positiveInfinity; return }
        if value == -.infinity { self = .negativeInfinity; return }
        guard (-8...7).contains(exponent) else { return nil }
        let e = Int(exponent)
        let scaled = e >= 0 ? value / SFloat.powerOfTen(e) : value * SFloat.powerOfTen(-e)
        let rounded = scaled.rounded(.toNearestOrAwayFromZero)
        guard rounded >= -2045, rounded <= 2045 else { return nil }
        self = .value(mantissa: Int16(rounded), exponent: exponent)
    }

    /// The exact decimal text of a number (`0.00111`, `3600`, `-16.2`); nil for special values.
    public var decimalString: String? {
        guard case let .value(mantissa, exponent) = self else { return nil }
        return DecimalText.format(significand: Int64(mantissa), exponent: Int(exponent))
    }

    static let powersOfTen: [Double] = [1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22]

    @inline(__always)
    static func powerOfTen(_ n: Int) -> Double {
        if n >= 0 && n < powersOfTen.count { return powersOfTen[n] }
        var result = 1.0
        for _ in 0..<max(n, 0) { result *= 10 }
        return result
    }
}

/// Decimal text of `significand x 10^exponent` without going through binary floating point.
enum DecimalText {
    static func format(significand: Int64, exponent: Int) -> String {
        let negative = significand < 0
        var digits = String(significand.magnitude)
        if exponent >= 0 {
            if significand != 0 { digits += String(repeating: "0", count: exponent) }
        } else {
            let places = -exponent
            if digits.count <= places {
                digits = String(repeating: "0", count: places - digits.count + 1) + digits
            }
            let split = digits.index(digits.endIndex, offsetBy: -places)
            var fraction = digits[split...]
            while fraction.last == "0" { fraction = fraction.dropLast() }
            digits = fraction.isEmpty ? String(digits[..<split]) : String(digits[..<split]) + "." + fraction
        }
        return negative && digits != "0" ? "-" + digits : digits
    }

    /// Fixed-point text with exactly `decimals` fraction digits: `units x 10^-decimals`.
    static func fixed(units: Int128, decimals: Int) -> String {
        let negative = units < 0
        var digits = String(units.magnitude)
        if decimals > 0 {
            let places = decimals
            if digits.count <= places {
                digits = String(repeating: "0", count: places - digits.count + 1) + digits
            }
            let split = digits.index(digits.endIndex, offsetBy: -places)
            digits = String(digits[..<split]) + "." + digits[split...]
        }
        return negative ? "-" + digits : digits
    }
}
