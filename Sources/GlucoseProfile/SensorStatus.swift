/// Sensor Status Annunciation of 0x2A18 (uint16, present with flag bit 3). GLS 1.0.1 defines bits 0...11;
/// bits 12...15 are reserved and kept in `rawValue` (named `reserved_12` ... in `names`).
///
/// Bit 5 is "sensor result higher than the device can process" (a HI reading, sent with +INFINITY) and
/// bit 6 "lower than the device can process" (LO, with -INFINITY). Some public libraries swap the two.
public struct SensorStatus: OptionSet, Hashable, Sendable {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Device battery low at time of measurement.
    public static let batteryLow = SensorStatus(rawValue: 1 << 0)
    /// Sensor malfunction or faulting at time of measurement.
    public static let sensorMalfunction = SensorStatus(rawValue: 1 << 1)
    /// Sample size for blood or control solution insufficient at time of measurement.
    public static let sampleSizeInsufficient = SensorStatus(rawValue: 1 << 2)
    /// Strip insertion error.
    public static let stripInsertionError = SensorStatus(rawValue: 1 << 3)
    /// Strip type incorrect for device.
    public static let stripTypeIncorrect = SensorStatus(rawValue: 1 << 4)
    /// Sensor result higher than the device can process (HI).
    public static let resultTooHigh = SensorStatus(rawValue: 1 << 5)
    /// Sensor result lower than the device can process (LO).
    public static let resultTooLow = SensorStatus(rawValue: 1 << 6)
    /// Sensor temperature too high for valid test/result at time of measurement.
    public static let temperatureTooHigh = SensorStatus(rawValue: 1 << 7)
    /// Sensor temperature too low for valid test/result at time of measurement.
    public static let temperatureTooLow = SensorStatus(rawValue: 1 << 8)
    /// Sensor read interrupted because strip was pulled too soon.
    public static let readInterrupted = SensorStatus(rawValue: 1 << 9)
    /// General device fault has occurred in the sensor.
    public static let generalDeviceFault = SensorStatus(rawValue: 1 << 10)
    /// Time fault has occurred in the sensor and time may be inaccurate.
    public static let timeFault = SensorStatus(rawValue: 1 << 11)

    /// Bits 1...10: conditions under which the measured value is not a valid glucose value
    /// (everything except low battery and time fault).
    public static let measurementFaults = SensorStatus(rawValue: 0x07FE)

    /// Names of bits 0...11 in order; index = bit number.
    public static let bitNames: [String] = [
        "battery_low", "sensor_malfunction", "sample_size_insufficient", "strip_insertion_error",
        "strip_type_incorrect", "result_too_high", "result_too_low", "temperature_too_high",
        "temperature_too_low", "read_interrupted", "general_device_fault", "time_fault",
    ]

    /// The names of the set bits, lowest bit first; reserved bits as `reserved_12` ... `reserved_15`.
    public var names: [String] { bitNameList(rawValue, SensorStatus.bitNames) }
}

func bitNameList(_ raw: UInt16, _ names: [String]) -> [String] {
    var result: [String] = []
    for bit in 0..<16 where raw & (1 << bit) != 0 {
        result.append(bit < names.count ? names[bit] : "reserved_\(bit)")
    }
    return result
}
