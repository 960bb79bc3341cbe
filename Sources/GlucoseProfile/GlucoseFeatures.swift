/// Glucose Feature, characteristic 0x2A51 (GLS 1.0.1 §3.2): a uint16 of supported features, read once.
/// Bits 11...15 are reserved and kept in `rawValue`. A value shorter than 2 bytes is `truncated`; bytes
/// after the first two are ignored (room for later versions of the service).
public struct GlucoseFeatures: OptionSet, Hashable, Sendable {
    public static let uuid: UInt16 = 0x2A51

    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let lowBatteryDetection = GlucoseFeatures(rawValue: 1 << 0)
    public static let sensorMalfunctionDetection = GlucoseFeatures(rawValue: 1 << 1)
    public static let sensorSampleSize = GlucoseFeatures(rawValue: 1 << 2)
    public static let sensorStripInsertionErrorDetection = GlucoseFeatures(rawValue: 1 << 3)
    public static let sensorStripTypeErrorDetection = GlucoseFeatures(rawValue: 1 << 4)
    public static let sensorResultHighLowDetection = GlucoseFeatures(rawValue: 1 << 5)
    public static let sensorTemperatureHighLowDetection = GlucoseFeatures(rawValue: 1 << 6)
    public static let sensorReadInterruptDetection = GlucoseFeatures(rawValue: 1 << 7)
    public static let generalDeviceFault = GlucoseFeatures(rawValue: 1 << 8)
    public static let timeFault = GlucoseFeatures(rawValue: 1 << 9)
    /// The meter keeps bonds with more than one collector. Without it, pairing the gateway may remove the
    /// bond with the user's phone.
    public static let multipleBond = GlucoseFeatures(rawValue: 1 << 10)

    /// Names of bits 0...10; index = bit number.
    public static let bitNames: [String] = [
        "low_battery_detection", "sensor_malfunction_detection", "sensor_sample_size",
        "sensor_strip_insertion_error_detection", "sensor_strip_type_error_detection",
        "sensor_result_high_low_detection", "sensor_temperature_high_low_detection",
        "sensor_read_interrupt_detection", "general_device_fault", "time_fault", "multiple_bond",
    ]

    /// Names of the set bits, lowest first; reserved bits as `reserved_11` ... `reserved_15`.
    public var names: [String] { bitNameList(rawValue, GlucoseFeatures.bitNames) }

    public init(bytes: some Collection<UInt8>) throws(GlucoseDecodingError) {
        self = try GlucoseFeatures.decode(bytes).get()
    }

    /// Decodes without throwing: the value or the typed error.
    public static func decode(_ bytes: some Collection<UInt8>) -> Result<GlucoseFeatures, GlucoseDecodingError> {
        withContiguousBytes(bytes) { raw in
            var r = ByteReader(raw)
            let value = GlucoseFeatures(rawValue: r.uint16("Glucose Feature"))
            return r.result(value)
        }
    }

    public func encoded() -> [UInt8] {
        [UInt8(truncatingIfNeeded: rawValue), UInt8(truncatingIfNeeded: rawValue >> 8)]
    }
}
