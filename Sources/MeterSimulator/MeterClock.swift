import GatewayCore
import GlucoseProfile

/// The clock a simulated meter keeps, and how a central reaches it.
///
/// Real meters differ here (see the reference notes on meters):
/// - `cts`: Current Time Service 0x1805 with Current Time 0x2A2B (read, notify; write where the meter
///   allows it), as on Ascensia Contour meters and in the GLS test profiles.
/// - `glsDateTime`: Date Time 0x2A08 inside the Glucose Service (read; write where allowed), as on Roche
///   Accu-Chek Guide and Instant.
/// - `vendor`: the i-SENS (CareSens, ReliOn) vendor clock, service 0xFFF0 with characteristic 0xFFF1
///   (write, notify). The central enables notifications and writes `C0 03 01 00` followed by a Date
///   Time; an all-zero Date Time asks for the time, a valid one sets it. The meter answers either with a
///   notification `05 .. .. ..` followed by its (new) Date Time at offset 4. Stopping notifications on
///   0xFFF1 switches the meter off (the link drops).
/// - `vendorV15`: the same vendor clock on newer firmware (protocol 1.5), service
///   c4dea010-5a9d-11e9-8647-d663bd873d93 with characteristic c4dea3bc-5a9d-11e9-8647-d663bd873d93.
/// - `none`: no clock a central can read (TaiDoc, older meters).
///
/// The clock shows the local time of a zone without daylight saving time (`utcOffsetMinutes`): a meter
/// does not follow DST. `skewSeconds` is the meter's clock minus that true local time when the simulator
/// starts; it changes when a central writes the time, and by `driftSecondsPerDay` per simulated day (so
/// `--time-scale` compresses drift as it compresses every other duration). Between those, the clock
/// runs with the wall clock, so a central reading it sees the skew it was given.
public struct MeterClock: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        case currentTime = "cts"
        case glsDateTime = "gls-date-time"
        case vendor
        /// The same protocol on newer i-SENS firmware (1.5): service c4dea010-..., characteristic c4dea3bc-....
        case vendorV15 = "vendor-v1.5"
        case none
    }

    public var kind: Kind
    /// Whether a central may set the clock (a write to 0x2A2B or 0x2A08, or the vendor set command).
    public var writable: Bool
    /// Meter clock minus true local time, in seconds, at start.
    public var skewSeconds: Double
    /// The fixed offset from UTC of the local time the meter shows, in minutes.
    public var utcOffsetMinutes: Int
    /// How many seconds the clock gains (negative: loses) per simulated day.
    public var driftSecondsPerDay: Double

    public init(kind: Kind, writable: Bool = true, skewSeconds: Double = 0, utcOffsetMinutes: Int = 0,
                driftSecondsPerDay: Double = 0) {
        self.kind = kind
        self.writable = writable
        self.skewSeconds = skewSeconds
        self.utcOffsetMinutes = utcOffsetMinutes
        self.driftSecondsPerDay = driftSecondsPerDay
    }

    /// No readable clock: the default for meter files and flags without one.
    public static let none = MeterClock(kind: .none, writable: false)

    public static let skewRange: ClosedRange<Double> = -(86_400 * 3650)...(86_400 * 3650)
    public static let utcOffsetRange = -14 * 60...14 * 60
    public static let driftRange: ClosedRange<Double> = -86_400...86_400

    /// The i-SENS vendor clock, either protocol version.
    public var isVendor: Bool { kind == .vendor || kind == .vendorV15 }

    /// The characteristic that carries the clock, nil for `none`.
    public var characteristic: GATTUUID? {
        switch kind {
        case .currentTime: return .currentTime
        case .glsDateTime: return .dateTime
        case .vendor: return .isensVendorClock
        case .vendorV15: return .isensVendorClockV15
        case .none: return nil
        }
    }
}

/// The i-SENS vendor clock command and answer on 0xFFF1.
public enum ISENSClockProtocol {
    /// The command prefix: `C0 03 01 00`, then a 7-byte Date Time (all zero: "tell me the time").
    public static let commandPrefix: [UInt8] = [0xC0, 0x03, 0x01, 0x00]
    /// The first byte of the meter's time answer.
    public static let answerOpCode: UInt8 = 0x05

    /// What a write to 0xFFF1 asks for.
    public enum Command: Sendable, Equatable {
        case getTime
        case setTime(GlucoseDateTime)
    }

    /// Nil when the bytes are not a clock command (wrong length or prefix, a Date Time that is neither
    /// all zero nor valid).
    public static func command(_ bytes: [UInt8]) -> Command? {
        guard bytes.count == 11, Array(bytes[0..<4]) == commandPrefix else { return nil }
        let date = Array(bytes[4...])
        if date.allSatisfy({ $0 == 0 }) { return .getTime }
        guard let value = try? GlucoseDateTime(bytes: date) else { return nil }
        return .setTime(value)
    }

    public static func getTimeCommand() -> [UInt8] { commandPrefix + [UInt8](repeating: 0, count: 7) }

    public static func setTimeCommand(_ time: GlucoseDateTime) -> [UInt8] { commandPrefix + time.encoded() }

    /// The meter's answer: `05 00 00 00` and its Date Time.
    public static func answer(_ time: GlucoseDateTime) -> [UInt8] { [answerOpCode, 0, 0, 0] + time.encoded() }
}

/// A meter clock at run time. Pure: callers pass the wall clock (Unix milliseconds) and the simulated
/// seconds elapsed, so tests drive it without waiting.
public struct MeterClockState: Sendable, Equatable {
    public private(set) var clock: MeterClock
    /// The skew when it was last set, and the simulated second at which that was.
    private var skewAtSet: Double
    private var setAtSimulated: Double

    public init(clock: MeterClock, simulatedSeconds: Double = 0) {
        self.clock = clock
        skewAtSet = clock.skewSeconds
        setAtSimulated = simulatedSeconds
    }

    /// Meter clock minus true local time, in seconds.
    public func skew(simulatedSeconds: Double) -> Double {
        skewAtSet + clock.driftSecondsPerDay * (simulatedSeconds - setAtSimulated) / 86_400
    }

    /// The time the meter shows (whole seconds, rounded down).
    public func time(utcMillis: UnixMillis, simulatedSeconds: Double) -> GlucoseDateTime {
        let localMillis = Double(utcMillis) + Double(clock.utcOffsetMinutes) * 60_000
            + skew(simulatedSeconds: simulatedSeconds) * 1000
        return GlucoseDateTime(naiveSeconds: Int64((localMillis / 1000).rounded(.down)))
    }

    /// Sets the clock to `time` as of now: the skew becomes `time` minus true local time.
    public mutating func set(to time: GlucoseDateTime, utcMillis: UnixMillis, simulatedSeconds: Double) {
        let trueLocal = Double(utcMillis) / 1000 + Double(clock.utcOffsetMinutes) * 60
        skewAtSet = Double(time.naiveSeconds) - trueLocal
        setAtSimulated = simulatedSeconds
    }

    // MARK: Characteristic values

    /// Current Time 0x2A2B: Date Time, day of week (1 Monday ... 7 Sunday), Fractions256 0, Adjust Reason.
    public static func currentTimeValue(_ time: GlucoseDateTime, adjustReason: UInt8 = 0) -> [UInt8] {
        time.encoded() + [dayOfWeek(time), 0, adjustReason]
    }

    /// 1 Monday ... 7 Sunday (1970-01-01 was a Thursday).
    public static func dayOfWeek(_ time: GlucoseDateTime) -> UInt8 {
        let days = Int((time.naiveSeconds - Int64(time.hour * 3600 + time.minute * 60 + time.second)) / 86_400)
        let mondayBased = ((days + 3) % 7 + 7) % 7
        return UInt8(mondayBased + 1)
    }
}

extension MeterFile {
    static let clockKeys: Set<String> = ["kind", "writable", "skewSeconds", "utcOffsetMinutes", "driftSecondsPerDay"]

    /// `"clock": {"kind": "cts" | "gls-date-time" | "vendor" | "none", "writable": true, "skewSeconds": -300,
    /// "utcOffsetMinutes": 60, "driftSecondsPerDay": 2}`
    static func clock(_ o: JSONObject) throws(MeterFileError) -> MeterClock {
        try o.onlyKeys(clockKeys)
        let kindText = try o.string("kind")
        guard let kind = MeterClock.Kind(rawValue: kindText) else {
            throw MeterFileError(o.field("kind"), "must be one of \(MeterClock.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let skew = try o.optionalNumber("skewSeconds") ?? 0
        guard MeterClock.skewRange.contains(skew) else {
            throw MeterFileError(o.field("skewSeconds"), "must be within ten years (±315360000)")
        }
        let offset = try o.optionalInt("utcOffsetMinutes", in: MeterClock.utcOffsetRange) ?? 0
        let drift = try o.optionalNumber("driftSecondsPerDay") ?? 0
        guard MeterClock.driftRange.contains(drift) else {
            throw MeterFileError(o.field("driftSecondsPerDay"), "must be within ±86400")
        }
        return MeterClock(kind: kind, writable: try o.optionalBool("writable") ?? (kind != .none),
                          skewSeconds: skew, utcOffsetMinutes: offset, driftSecondsPerDay: drift)
    }

    /// The meter flags `--clock KIND`, `--clock-skew S`, `--clock-read-only`, `--clock-utc-offset MIN`.
    public static func clock(kind: String?, skew: String?, readOnly: Bool, utcOffset: String?) throws(MeterFileError) -> MeterClock {
        guard let kind else {
            if skew != nil || readOnly || utcOffset != nil {
                throw MeterFileError("--clock", "is required with --clock-skew, --clock-read-only or --clock-utc-offset")
            }
            return .none
        }
        guard let k = MeterClock.Kind(rawValue: kind) else {
            throw MeterFileError("--clock", "must be one of \(MeterClock.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        if k == .none, skew != nil || readOnly || utcOffset != nil {
            // They would change nothing a central can see: refused rather than silently ignored.
            throw MeterFileError("--clock", "none: --clock-skew, --clock-read-only and --clock-utc-offset need a meter clock (--clock cts, gls-date-time, vendor or vendor-v1.5)")
        }
        var clock = MeterClock(kind: k, writable: k != .none && !readOnly)
        if let skew {
            guard let v = Double(skew), MeterClock.skewRange.contains(v) else {
                throw MeterFileError("--clock-skew", "must be seconds within ten years, got '\(skew)'")
            }
            clock.skewSeconds = v
        }
        if let utcOffset {
            guard let v = Int(utcOffset), MeterClock.utcOffsetRange.contains(v) else {
                throw MeterFileError("--clock-utc-offset", "must be minutes in -840...840, got '\(utcOffset)'")
            }
            clock.utcOffsetMinutes = v
        }
        return clock
    }
}
