import GatewayCore
import GlucoseProfile

extension ExclusionReason {
    /// A record whose flags say it carries no concentration at all.
    public static let noConcentration = ExclusionReason(rawValue: "no-concentration")
}

/// The settings of the clinical rules that are configurable.
public struct ClinicalSettings: Sendable, Equatable {
    /// Correct reading times by the meter's clock skew when its clock is readable (on by default).
    public var clockSkewCorrection: Bool
    /// Skews up to this many seconds (either way) are left alone.
    public var clockSkewThresholdSeconds: Int
    /// A reading more than this many seconds ahead of the gateway's clock at download is `time-in-future`.
    public var futureToleranceSeconds: Int

    public init(clockSkewCorrection: Bool = true, clockSkewThresholdSeconds: Int = 120, futureToleranceSeconds: Int = 600) {
        self.clockSkewCorrection = clockSkewCorrection
        self.clockSkewThresholdSeconds = clockSkewThresholdSeconds
        self.futureToleranceSeconds = futureToleranceSeconds
    }
}

/// A meter clock reading taken at connection, compared with the gateway's clock.
public struct ClockSkew: Sendable, Equatable {
    /// What the meter's clock showed.
    public var meterClock: GlucoseDateTime
    /// Meter minus gateway, in seconds.
    public var seconds: Int

    public init(meterClock: GlucoseDateTime, seconds: Int) {
        self.meterClock = meterClock
        self.seconds = seconds
    }

    /// Whether the clock is off by more than `threshold` seconds either way (no `abs`, which traps on Int.min).
    public func isBeyond(_ threshold: Int) -> Bool {
        threshold < 0 || seconds.magnitude > UInt(threshold)
    }

    /// Reads a Current Time (0x2A2B, 10 bytes) or Date Time (0x2A08, 7 bytes) value and compares it with
    /// `gatewayNow`; nil when the value is too short, not a valid date, or the zone cannot place it.
    public static func measure(clockValue: [UInt8], zone: MeterTimeZone, gatewayNow: UnixMillis) -> ClockSkew? {
        measure(clockValue: clockValue, zone: zone, asked: gatewayNow, answered: gatewayNow)
    }

    /// As `measure(clockValue:zone:gatewayNow:)` for a value asked for at `asked` and answered at `answered`:
    /// the clock is compared with the middle of the read, by the rule F is measured by
    /// (`ClockSync.offset(read:asked:answered:)`), so the skew shown and the F readings are placed with agree.
    public static func measure(clockValue: [UInt8], zone: MeterTimeZone, asked: UnixMillis, answered: UnixMillis) -> ClockSkew? {
        // Current Time begins with a Date Time; the day of week and fractions after it are not needed.
        guard let local = try? GlucoseDateTime(bytes: clockValue) else { return nil }
        guard let resolved = zone.resolve(local),
              let seconds = ClockSync.secondsAhead(resolved.instant, of: ClockSync.middle(asked, answered)),
              let exact = Int(exactly: seconds) else { return nil }
        return ClockSkew(meterClock: local, seconds: exact)
    }
}

/// A 0x2A18 value decoded for storage. When the base time is not a usable date (the meter's clock was
/// never set, or a firmware bug such as month 13), the record is still decoded with the base time kept as
/// sent, so the reading is kept with `time-unresolved` instead of being dropped or guessed.
public struct DecodedMeasurement: Sendable, Equatable {
    public var measurement: GlucoseMeasurement
    public var raw: [UInt8]

    /// Nil when the value cannot be decoded even without its time (truncated, inconsistent flags).
    public init?(_ bytes: [UInt8]) {
        guard let decoded = try? DecodedMeasurement(decoding: bytes) else { return nil }
        self = decoded
    }

    /// As `init?(_:)`, throwing the codec's reason when the value cannot be decoded even without its time.
    public init(decoding bytes: [UInt8]) throws(GlucoseDecodingError) {
        measurement = try GlucoseMeasurement(bytes: bytes, options: .keepingInvalidBaseTime)
        raw = bytes
    }

    /// False when the base time bytes were not a valid date.
    public var timeUsable: Bool { measurement.baseTime.isValid }
}

/// The clinical rules: turns one decoded record (and its context, when one arrived) into the reading the
/// store keeps. Wrong numbers or times are worse than none, so every doubt keeps the bytes and excludes
/// the reading from upload, with the reason.
///
/// - Time: user-facing time = base time + time offset, read in the meter's zone (see `MeterTimeZone` for
///   DST gaps and repeated hours) and stored as UTC. When the meter's clock was readable and off by more
///   than the threshold, the corrected instant (meter instant minus skew) is used and the meter's instant
///   kept beside it. A download that read the meter's clock passes each record's `ClockPlacement` (its
///   user-facing time minus the F that held when it was taken, `ClockPlacer`): a placed instant replaces
///   the corrected one (unless within the threshold of the zone's), and one that cannot be placed is
///   `time-uncertain` with no instant, whatever else is wrong with it.
/// - Control solution (type 10 or sample location 4), HI/LO (+INF/-INF), NaN, NRes, reserved values, a
///   record without a concentration, and any measurement fault in the sensor status (bits 1-10) are
///   stored and excluded. Battery low (bit 0) and time fault (bit 11) alone exclude nothing.
/// - Context meal value 6 (reserved by the specification, used by i-SENS CareSens for blood ketone) makes
///   the reading a ketone reading: mmol/L = the glucose-field value in mg/dL / 10.
/// - An instant (after any skew correction) before 2010 is `time-unresolved` (`earliestPlausibleInstant`).
/// - An instant (after any skew correction) more than `futureToleranceSeconds` after `receivedAt`, the
///   gateway's clock when the record arrived, is stored and excluded as `time-in-future`, whatever else
///   is wrong with it (the value, HI/LO or special value is still stored).
public struct ReadingInterpreter: Sendable {
    public var meterAddress: String
    /// Nil when the meter's zone cannot be loaded: every time is then unresolved.
    public var zone: MeterTimeZone?
    public var settings: ClinicalSettings
    public var skew: ClockSkew?

    public init(meterAddress: String, zone: MeterTimeZone?, settings: ClinicalSettings = ClinicalSettings(), skew: ClockSkew? = nil) {
        self.meterAddress = meterAddress
        self.zone = zone
        self.settings = settings
        self.skew = skew
    }

    /// Seconds to subtract from meter instants, or 0 when no correction applies.
    public var correctionSeconds: Int {
        guard settings.clockSkewCorrection, let skew, skew.isBeyond(settings.clockSkewThresholdSeconds) else { return 0 }
        return skew.seconds
    }

    /// 2010-01-01T00:00:00Z: no Bluetooth LE meter dated a reading earlier (Bluetooth 4.0 was adopted in
    /// June 2010, the Glucose Profile in 2012). A time before it, as the meter sent it or corrected, is a
    /// clock that was never set or was reset (1970-01-01, 2000-01-01 after a battery change), not when the
    /// reading was taken.
    public static let earliestPlausibleInstant: UnixMillis = 1_262_304_000_000
    public static let earliestCorrectedInstant = earliestPlausibleInstant

    /// Whether `instant` is more than `seconds` after `reference`, without overflow for any values.
    static func isAhead(_ instant: UnixMillis, of reference: UnixMillis, bySeconds seconds: Int) -> Bool {
        let (tolerance, o1) = Int64(seconds).multipliedReportingOverflow(by: 1000)
        let (ahead, o2) = instant.subtractingReportingOverflow(reference)
        if o2 { return instant > reference }
        if o1 { return seconds < 0 }
        return ahead > tolerance
    }

    public static let ketoneMeal: UInt8 = 6
    public static let controlSolutionType: UInt8 = 10
    public static let controlSolutionLocation: UInt8 = 4

    public func reading(
        _ decoded: DecodedMeasurement, context: GlucoseMeasurementContext?, rawContext: [UInt8]?, receivedAt: UnixMillis,
        placement: ClockPlacement? = nil
    ) -> NewReading {
        let m = decoded.measurement
        let offset = Int(m.timeOffset ?? 0)

        let userFacing = decoded.timeUsable ? m.userFacingTime : m.baseTime
        var meterInstant: UnixMillis?
        var instant: UnixMillis?
        var utcOffset: Int?
        if decoded.timeUsable, let zone, let resolved = zone.resolve(userFacing) {
            meterInstant = resolved.instant
            // Checked: a skew is any number a caller gives; one no clock can be off by leaves the time unresolved.
            let (shift, o1) = Int64(correctionSeconds).multipliedReportingOverflow(by: 1000)
            let (corrected, o2) = resolved.instant.subtractingReportingOverflow(shift)
            instant = o1 || o2 ? nil : corrected
            // Placed by the meter's clock history (`ClockPlacer`): that instant instead of the one correction.
            if let placed = placement?.instant(replacing: resolved.instant, settings: settings) { instant = placed }
            utcOffset = NewReading.utcOffsetMinutes(userFacingTime: userFacing, meterInstant: resolved.instant)
        }

        let isKetone = context?.meal == Self.ketoneMeal
        var mgdl = m.mgPerDL
        var mmoll = m.mmolPerL
        if isKetone {
            // i-SENS sends ketone in the glucose field scaled so that "mg/dL" / 10 = mmol/L ketone.
            if m.unit == .kilogramPerLitre {
                mmoll = mgdl.map { ($0 / 10 * 100).rounded() / 100 }
            }
            mgdl = nil
        }

        let status = m.sensorStatus
        var exclusion: ExclusionReason?
        if m.type == Self.controlSolutionType || m.sampleLocation == Self.controlSolutionLocation {
            exclusion = .controlSolution
        } else if let concentration = m.concentration {
            switch concentration {
            case .positiveInfinity: exclusion = .high
            case .negativeInfinity: exclusion = .low
            case .nan: exclusion = .notANumber
            case .nres: exclusion = .notAtThisResolution
            case .reserved: exclusion = .reservedValue
            case .value: break
            }
        } else {
            exclusion = .noConcentration
        }
        if exclusion == nil, let status, !status.intersection(.measurementFaults).isEmpty {
            exclusion = .sensorFault
        }
        if exclusion == nil, meterInstant == nil {
            exclusion = .timeUnresolved
        }
        if exclusion == nil, isKetone {
            exclusion = .ketone
        }
        // A time before any Bluetooth LE meter existed says the meter's clock is wrong, not when the reading
        // was taken: as sent (a clock never set, or reset by a battery change, with no readable clock to
        // correct it) or after a skew correction (a clock showing 9999 against readings dated now). Its
        // time stays the meter's and nothing is uploaded; a skew measured later may still correct it
        // (`ReadingStore.releaseHeldReadings`).
        if meterInstant != nil, instant.map({ $0 < Self.earliestPlausibleInstant }) ?? true {
            instant = nil
            exclusion = .timeUnresolved
        }
        // A time the clock history cannot place: kept with no instant, never uploaded, whatever else is wrong.
        if meterInstant != nil, placement?.excludes(settings) == true {
            instant = nil
            exclusion = .timeUncertain
        }
        // Before every other reason: a future HI or LO must not become a note at a time that has not come.
        // Checked: `receivedAt` of a reading re-evaluated from the store is a number from a file.
        if let instant, Self.isAhead(instant, of: receivedAt, bySeconds: settings.futureToleranceSeconds) {
            exclusion = .timeInFuture
        }

        return NewReading(
            meterAddress: meterAddress,
            sequence: Int(m.sequenceNumber),
            baseTime: m.baseTime,
            timeOffsetMinutes: offset,
            userFacingTime: userFacing,
            utcOffsetMinutes: utcOffset,
            meterInstant: meterInstant,
            instant: instant,
            mgdl: mgdl,
            mmoll: mmoll,
            special: m.concentration?.special,
            unit: m.unit,
            type: m.type.map(Int.init),
            sampleLocation: m.sampleLocation.map(Int.init),
            sensorStatus: status.map { Int($0.rawValue) },
            analyte: isKetone ? .ketone : .glucose,
            context: context.map(ReadingContext.init),
            rawMeasurement: decoded.raw,
            rawContext: rawContext,
            receivedAt: receivedAt,
            exclusion: exclusion
        )
    }
}

extension ReadingContext {
    init(_ c: GlucoseMeasurementContext) {
        self.init()
        carbohydrateID = c.carbohydrateID.map(Int.init)
        carbohydrateKg = c.carbohydrateKg?.doubleValue
        meal = c.meal.map(Int.init)
        tester = c.tester.map(Int.init)
        health = c.health.map(Int.init)
        exerciseDurationSeconds = c.exerciseDurationSeconds.map(Int.init)
        exerciseIntensityPercent = c.exerciseIntensityPercent.map(Int.init)
        medicationID = c.medicationID.map(Int.init)
        if let medication = c.medication {
            medicationAmount = medication.doubleValue
            medicationUnit = c.medicationUnit == .litres ? "L" : "kg"
        }
        hba1cPercent = c.hba1cPercent?.doubleValue
    }
}
