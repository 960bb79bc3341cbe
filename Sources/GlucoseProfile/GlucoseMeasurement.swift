/// Glucose Measurement, characteristic 0x2A18 (GLS 1.0.1 §3.1), notified once per stored record.
///
///     Flags                            uint8
///     Sequence Number                  uint16
///     Base Time                        Date Time (7 bytes)
///     Time Offset                      sint16, minutes              if flags bit 0
///     Glucose Concentration            SFLOAT, kg/L or mol/L        if flags bit 1 (unit: flags bit 2)
///     Type-Sample Location             uint8: type low nibble,      if flags bit 1
///                                      sample location high nibble
///     Sensor Status Annunciation       uint16                       if flags bit 3
///     (flags bit 4: a Glucose Measurement Context with the same sequence number follows;
///      bits 5...7 reserved)
///
/// Decoding checks the length each flag announces and throws `truncated` naming the missing field; bytes
/// after the last announced field and reserved flag bits are ignored. Unknown type and sample-location
/// values are kept as their raw numbers. Encoding derives the flags from which fields are set.
public struct GlucoseMeasurement: Hashable, Sendable {
    public static let uuid: UInt16 = 0x2A18

    public var sequenceNumber: UInt16
    /// Base Time, exactly as sent.
    public var baseTime: GlucoseDateTime
    /// Time Offset in minutes (user-facing time = base time + offset); nil when flag bit 0 is clear.
    public var timeOffset: Int16?
    /// Concentration in `unit`; nil when flag bit 1 is clear.
    public var concentration: SFloat?
    /// Flag bit 2; meaningful when `concentration` is set.
    public var unit: ConcentrationUnit
    /// Type (low nibble of Type-Sample Location), raw: 1 capillary whole blood ... 10 control solution.
    /// Encoded with the concentration: when the concentration is set and this is nil, 0 is sent.
    public var type: UInt8?
    /// Sample Location (high nibble), raw: 1 finger, 2 alternate site, 3 earlobe, 4 control solution,
    /// 15 not available. Encoded like `type`.
    public var sampleLocation: UInt8?
    /// Sensor Status Annunciation; nil when flag bit 3 is clear.
    public var sensorStatus: SensorStatus?
    /// Flag bit 4: a context (0x2A34) with this sequence number follows.
    public var contextFollows: Bool

    public init(
        sequenceNumber: UInt16, baseTime: GlucoseDateTime, timeOffset: Int16? = nil,
        concentration: SFloat? = nil, unit: ConcentrationUnit = .kilogramPerLitre,
        type: UInt8? = nil, sampleLocation: UInt8? = nil, sensorStatus: SensorStatus? = nil,
        contextFollows: Bool = false
    ) {
        self.sequenceNumber = sequenceNumber
        self.baseTime = baseTime
        self.timeOffset = timeOffset
        self.concentration = concentration
        self.unit = unit
        self.type = type
        self.sampleLocation = sampleLocation
        self.sensorStatus = sensorStatus
        self.contextFollows = contextFollows
    }

    /// How strictly `decode(_:options:)` reads a value.
    public struct DecodingOptions: OptionSet, Hashable, Sendable {
        public var rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// A Base Time that is not a valid date (a meter whose clock was never set sends year 0; firmware
        /// bugs send month 13) does not fail the value: `baseTime` holds the seven fields as sent, with
        /// `isValid` false, so the rest of the record can be kept while its time stays unplaced. The Base
        /// Time must still be present (seven bytes).
        public static let keepingInvalidBaseTime = DecodingOptions(rawValue: 1 << 0)
    }

    @inlinable
    public init(bytes: some Collection<UInt8>, options: DecodingOptions = []) throws(GlucoseDecodingError) {
        self = try GlucoseMeasurement.decode(bytes, options: options).get()
    }

    /// Decodes without throwing: the value or the typed error.
    @inlinable
    public static func decode(_ bytes: some Collection<UInt8>, options: DecodingOptions = []) -> Result<GlucoseMeasurement, GlucoseDecodingError> {
        withContiguousBytes(bytes) { decode(raw: $0, options: options) }
    }

    @usableFromInline
    static func decode(raw: UnsafeRawBufferPointer, options: DecodingOptions) -> Result<GlucoseMeasurement, GlucoseDecodingError> {
        var r = ByteReader(raw)
        let flags = r.uint8("Flags")
        let sequence = r.uint16("Sequence Number")
        let base = r.dateTime("Base Time", keepingInvalid: options.contains(.keepingInvalidBaseTime))
        var value = GlucoseMeasurement(sequenceNumber: sequence, baseTime: base)
        if flags & 0x01 != 0 {
            value.timeOffset = r.int16("Time Offset")
        }
        value.unit = flags & 0x04 != 0 ? .molePerLitre : .kilogramPerLitre
        if flags & 0x02 != 0 {
            value.concentration = r.sfloat("Glucose Concentration")
            let typeAndLocation = r.uint8("Type-Sample Location")
            value.type = typeAndLocation & 0x0F
            value.sampleLocation = typeAndLocation >> 4
        }
        if flags & 0x08 != 0 {
            value.sensorStatus = SensorStatus(rawValue: r.uint16("Sensor Status Annunciation"))
        }
        value.contextFollows = flags & 0x10 != 0
        return r.result(value)
    }

    /// Flags derived from the fields (reserved bits 0).
    public var flags: UInt8 {
        var flags: UInt8 = 0
        if timeOffset != nil { flags |= 0x01 }
        if hasConcentrationField { flags |= 0x02 }
        if unit == .molePerLitre { flags |= 0x04 }
        if sensorStatus != nil { flags |= 0x08 }
        if contextFollows { flags |= 0x10 }
        return flags
    }

    private var hasConcentrationField: Bool { concentration != nil || type != nil || sampleLocation != nil }

    /// The value as a meter sends it. With `type` or `sampleLocation` set but no concentration, NaN is sent.
    public func encoded() -> [UInt8] {
        var w = ByteWriter(capacity: 17)
        w.uint8(flags)
        w.uint16(sequenceNumber)
        w.dateTime(baseTime)
        if let timeOffset { w.int16(timeOffset) }
        if hasConcentrationField {
            w.sfloat(concentration ?? .nan)
            w.uint8(((sampleLocation ?? 0) & 0x0F) << 4 | ((type ?? 0) & 0x0F))
        }
        if let sensorStatus { w.uint16(sensorStatus.rawValue) }
        return w.bytes
    }

    /// The time the meter showed the user: base time + time offset. Meaningless when `baseTime.isValid`
    /// is false (a value decoded with `keepingInvalidBaseTime`).
    public var userFacingTime: GlucoseDateTime {
        guard let timeOffset else { return baseTime }
        return baseTime.adding(minutes: Int(timeOffset))
    }

    /// Concentration in mg/dL (unrounded); nil when absent or special.
    public var mgPerDL: Double? { concentration.flatMap { GlucoseUnits.mgPerDL($0, unit: unit) } }
    /// Concentration in mmol/L (unrounded); nil when absent or special.
    public var mmolPerL: Double? { concentration.flatMap { GlucoseUnits.mmolPerL($0, unit: unit) } }

    /// A control-solution test (type 10 or sample location 4), which is not a blood glucose value.
    public var isControlSolution: Bool { type == 10 || sampleLocation == 4 }

    /// Names of the Type values 1...10 (index = value); 0 and 11...15 are reserved.
    public static let typeNames: [String] = [
        "reserved", "capillary_whole_blood", "capillary_plasma", "venous_whole_blood", "venous_plasma",
        "arterial_whole_blood", "arterial_plasma", "undetermined_whole_blood", "undetermined_plasma",
        "interstitial_fluid", "control_solution",
    ]

    /// `capillary_plasma` ...; `reserved` for values the specification has not defined.
    public static func typeName(_ type: UInt8) -> String {
        Int(type) < typeNames.count ? typeNames[Int(type)] : "reserved"
    }

    /// `finger`, `alternate_site_test`, `earlobe`, `control_solution`, `not_available`; else `reserved`.
    public static func sampleLocationName(_ location: UInt8) -> String {
        switch location {
        case 1: return "finger"
        case 2: return "alternate_site_test"
        case 3: return "earlobe"
        case 4: return "control_solution"
        case 15: return "not_available"
        default: return "reserved"
        }
    }
}
