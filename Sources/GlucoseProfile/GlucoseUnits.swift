/// The units the Glucose Service carries concentrations in (0x2A18 flag bit 2).
public enum ConcentrationUnit: String, Sendable, Hashable, CaseIterable {
    case kilogramPerLitre = "kg/L"
    case molePerLitre = "mol/L"
}

/// Conversions between the wire units and the units people read.
///
/// - mg/dL = kg/L x 100 000; mmol/L = mol/L x 1 000.
/// - Between mg/dL and mmol/L: the molar mass of glucose, 180.156 g/mol, i.e. mg/dL = mmol/L x 18.0156.
///
/// Rounding: the `Double` functions below do not round; they return the nearest `Double` of the exact
/// result (the SFLOAT-based ones scale the mantissa by one exact power of ten, so 111 x 10^-5 kg/L is
/// exactly 111 mg/dL). For display and JSON, `rounded(_:unit:to:decimals:)` rounds the exact decimal value
/// (computed in 128-bit integers, never through binary floating point) half away from zero: the gateway
/// shows mg/dL to 1 decimal and mmol/L to 2 (`displayDecimals`).
public enum GlucoseUnits {
    /// 18.0156 (mg/dL per mmol/L) as a ratio of integers: 180156 / 10^4.
    public static let mgPerDLPerMmolPerL = 18.0156
    static let molarFactorNumerator: Int128 = 180_156
    static let molarFactorExponent = -4

    public static func mgPerDL(fromKgPerL value: Double) -> Double { value * 100_000 }
    public static func mmolPerL(fromMolPerL value: Double) -> Double { value * 1_000 }
    public static func mgPerDL(fromMmolPerL value: Double) -> Double { value * mgPerDLPerMmolPerL }
    public static func mmolPerL(fromMgPerDL value: Double) -> Double { value / mgPerDLPerMmolPerL }

    /// The concentration in mg/dL, nil for special values.
    public static func mgPerDL(_ concentration: SFloat, unit: ConcentrationUnit) -> Double? {
        switch unit {
        case .kilogramPerLitre: return concentration.scaledDouble(powerOfTen: 5)
        case .molePerLitre: return concentration.scaledDouble(powerOfTen: 3).map(mgPerDL(fromMmolPerL:))
        }
    }

    /// The concentration in mmol/L, nil for special values.
    public static func mmolPerL(_ concentration: SFloat, unit: ConcentrationUnit) -> Double? {
        switch unit {
        case .kilogramPerLitre: return concentration.scaledDouble(powerOfTen: 5).map(mmolPerL(fromMgPerDL:))
        case .molePerLitre: return concentration.scaledDouble(powerOfTen: 3)
        }
    }

    /// Display units.
    public enum DisplayUnit: String, Sendable, Hashable, CaseIterable {
        case mgPerDL = "mg/dL"
        case mmolPerL = "mmol/L"
        /// Fraction digits the gateway shows: 1 for mg/dL, 2 for mmol/L.
        public var displayDecimals: Int { self == .mgPerDL ? 1 : 2 }
    }

    /// The concentration in `target`, rounded half away from zero to `decimals` fraction digits (0...6)
    /// from its exact value; nil for special values.
    public static func rounded(_ concentration: SFloat, unit: ConcentrationUnit, to target: DisplayUnit, decimals: Int? = nil) -> FixedDecimal? {
        guard case let .value(mantissa, exponent) = concentration else { return nil }
        let places = min(max(decimals ?? target.displayDecimals, 0), 6)
        // value = mantissa x 10^exponent (wire unit). Express the target as numerator/denominator.
        var numerator = Int128(mantissa)
        var denominator: Int128 = 1
        var power = Int(exponent) + places
        switch (unit, target) {
        case (.kilogramPerLitre, .mgPerDL):
            power += 5
        case (.molePerLitre, .mmolPerL):
            power += 3
        case (.molePerLitre, .mgPerDL):
            power += 3 + molarFactorExponent
            numerator *= molarFactorNumerator
        case (.kilogramPerLitre, .mmolPerL):
            power += 5 - molarFactorExponent
            denominator = molarFactorNumerator
        }
        if power >= 0 { numerator *= pow10(power) } else { denominator *= pow10(-power) }
        let quotient = numerator / denominator
        let remainder = numerator % denominator
        var units = quotient
        if remainder.magnitude * 2 >= denominator.magnitude { units += numerator < 0 ? -1 : 1 }
        return FixedDecimal(units: units, decimals: places)
    }

    static func pow10(_ n: Int) -> Int128 {
        var r: Int128 = 1
        for _ in 0..<n { r *= 10 }
        return r
    }
}

/// An exact fixed-point number `units x 10^-decimals`, printed with exactly `decimals` fraction digits.
public struct FixedDecimal: Hashable, Sendable, CustomStringConvertible {
    public var units: Int128
    public var decimals: Int
    public init(units: Int128, decimals: Int) {
        self.units = units
        self.decimals = decimals
    }
    public var doubleValue: Double {
        Double(units) / SFloat.powerOfTen(decimals)
    }
    /// `111.0`, `6.16`, `-0.50`.
    public var description: String { DecimalText.fixed(units: units, decimals: decimals) }
}
