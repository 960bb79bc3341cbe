import GatewayCore
import GlucoseProfile

/// One stored record of a simulated meter: what the meter would send as a Glucose Measurement
/// (0x2A18) and, optionally, a Glucose Measurement Context (0x2A34) with the same sequence number.
public struct MeterRecord: Sendable, Equatable {
    /// The glucose result as the meter measured it; encoded in the record's `unit`.
    public enum Result: Sendable, Equatable {
        /// A concentration in mg/dL (encoded as kg/L x 10^-5, or converted to mol/L).
        case mgPerDL(Double)
        /// A concentration in mmol/L (encoded as mol/L x 10^-3, or converted to kg/L).
        case mmolPerL(Double)
        /// An exact SFLOAT, sent as is in the record's unit.
        case sfloat(SFloat)
        /// Above the meter's range: SFLOAT +INFINITY and sensor status bit 5.
        case high
        /// Below the meter's range: SFLOAT -INFINITY and sensor status bit 6.
        case low
        /// No concentration field at all (flag bit 1 clear).
        case absent
    }

    public var sequenceNumber: UInt16
    public var baseTime: GlucoseDateTime
    /// Minutes added to the base time to give the user-facing time; nil leaves the field out.
    public var timeOffset: Int16?
    public var result: Result
    public var unit: ConcentrationUnit
    /// Type nibble (1 capillary whole blood ... 10 control solution).
    public var type: UInt8
    /// Sample location nibble (1 finger ... 4 control solution, 15 not available).
    public var sampleLocation: UInt8
    /// Sensor status bits besides the HI/LO bits that `result` implies; nil with no other bits leaves the field out.
    public var sensorStatus: UInt16?
    /// The context the meter sends after (or before) the measurement; its sequence number is this record's.
    public var context: GlucoseMeasurementContext?
    /// Bytes sent verbatim instead of the encoded measurement (a meter with odd firmware).
    public var rawMeasurement: [UInt8]?
    /// Bytes sent verbatim as the record's context (a replayed capture), whether or not `context` is set.
    public var rawContext: [UInt8]?

    public init(
        sequenceNumber: UInt16,
        baseTime: GlucoseDateTime,
        timeOffset: Int16? = nil,
        result: Result,
        unit: ConcentrationUnit = .kilogramPerLitre,
        type: UInt8 = 1,
        sampleLocation: UInt8 = 1,
        sensorStatus: UInt16? = nil,
        context: GlucoseMeasurementContext? = nil,
        rawMeasurement: [UInt8]? = nil,
        rawContext: [UInt8]? = nil
    ) {
        self.sequenceNumber = sequenceNumber
        self.baseTime = baseTime
        self.timeOffset = timeOffset
        self.result = result
        self.unit = unit
        self.type = type
        self.sampleLocation = sampleLocation
        self.sensorStatus = sensorStatus
        self.context = context
        self.rawMeasurement = rawMeasurement
        self.rawContext = rawContext
    }

    /// A control-solution test: type 10 and sample location 4, as meters mark them.
    public var isControlSolution: Bool { type == 10 || sampleLocation == 4 }

    /// Base time plus time offset.
    public var userFacingTime: GlucoseDateTime { baseTime.adding(minutes: Int(timeOffset ?? 0)) }

    /// The concentration SFLOAT in the record's unit, nil when the field is absent.
    public var concentration: SFloat? {
        switch result {
        case .absent: return nil
        case .high: return .positiveInfinity
        case .low: return .negativeInfinity
        case .sfloat(let s): return s
        case .mgPerDL(let mg):
            switch unit {
            case .kilogramPerLitre: return SFloat.encoding(mg, baseExponent: -5)
            case .molePerLitre: return SFloat.encoding(mg / 18.0156, baseExponent: -3, roundingDigits: 1)
            }
        case .mmolPerL(let mmol):
            switch unit {
            case .molePerLitre: return SFloat.encoding(mmol, baseExponent: -3)
            case .kilogramPerLitre: return SFloat.encoding(mmol * 18.0156, baseExponent: -5, roundingDigits: 0)
            }
        }
    }

    /// Sensor status with the HI/LO bit the result implies.
    public var effectiveSensorStatus: UInt16? {
        var bits = sensorStatus ?? 0
        switch result {
        case .high: bits |= 0x0020
        case .low: bits |= 0x0040
        default: break
        }
        if sensorStatus == nil && bits == 0 { return nil }
        return bits
    }

    /// The Glucose Measurement this record is sent as.
    public var measurement: GlucoseMeasurement {
        let concentration = self.concentration
        return GlucoseMeasurement(
            sequenceNumber: sequenceNumber,
            baseTime: baseTime,
            timeOffset: timeOffset,
            concentration: concentration,
            unit: unit,
            type: concentration == nil ? nil : type & 0x0F,
            sampleLocation: concentration == nil ? nil : sampleLocation & 0x0F,
            sensorStatus: effectiveSensorStatus.map { SensorStatus(rawValue: $0) },
            contextFollows: context != nil
        )
    }

    /// The 0x2A18 value bytes.
    public var measurementBytes: [UInt8] { rawMeasurement ?? measurement.encoded() }

    /// The 0x2A34 value bytes, when the record has context.
    public var contextBytes: [UInt8]? {
        if let rawContext { return rawContext }
        guard var context else { return nil }
        context.sequenceNumber = sequenceNumber
        return context.encoded()
    }
}

extension SFloat {
    /// `value x 10^(-baseExponent)` scaled into an SFLOAT in SI units. `value` is in the everyday unit
    /// (mg/dL or mmol/L); `baseExponent` is the exponent at which one everyday unit is one mantissa step
    /// (-5 for mg/dL as kg/L, -3 for mmol/L as mol/L). Finer exponents are used for fractional values,
    /// coarser ones for values that do not fit the 12-bit mantissa. `roundingDigits` limits the decimals kept.
    static func encoding(_ value: Double, baseExponent: Int, roundingDigits: Int = 2) -> SFloat? {
        guard value.isFinite else { return value > 0 ? .positiveInfinity : (value < 0 ? .negativeInfinity : .nan) }
        var scale = 1.0
        for _ in 0..<roundingDigits { scale *= 10 }
        let rounded = (value * scale).rounded() / scale
        // Try the finest exponent first that keeps the rounded value exact and the mantissa in range.
        for decimals in stride(from: roundingDigits, through: -3, by: -1) {
            var factor = 1.0
            if decimals >= 0 { for _ in 0..<decimals { factor *= 10 } } else { for _ in 0..<(-decimals) { factor /= 10 } }
            let m = (rounded * factor).rounded()
            guard abs(m) <= 2045 else { continue }
            if decimals > 0, abs(m / factor - rounded) > 1e-9 { continue }
            let exponent = baseExponent - decimals
            guard (-8...7).contains(exponent) else { continue }
            // Prefer the shortest exact form: strip trailing zeros from fractional encodings.
            var mantissa = Int(m)
            var e = exponent
            while e < baseExponent, mantissa % 10 == 0, mantissa != 0 { mantissa /= 10; e += 1 }
            return .value(mantissa: Int16(mantissa), exponent: Int8(e))
        }
        return nil
    }
}
