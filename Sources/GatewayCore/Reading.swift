import GlucoseProfile

/// Milliseconds since the Unix epoch, UTC. The store and the uploaders use this one time type so that
/// no layer needs Foundation's `Date` to agree on an instant.
public typealias UnixMillis = Int64

/// What the gateway measured: glucose, or ketone on i-SENS CareSens meters (context meal value 6).
public enum Analyte: String, Sendable, Codable, Equatable {
    case glucose
    case ketone
}

/// Why a stored reading is kept out of numeric upload. Nil on a reading that may be uploaded.
public struct ExclusionReason: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let controlSolution = ExclusionReason(rawValue: "control-solution")
    public static let high = ExclusionReason(rawValue: "hi")
    public static let low = ExclusionReason(rawValue: "lo")
    public static let notANumber = ExclusionReason(rawValue: "nan")
    public static let notAtThisResolution = ExclusionReason(rawValue: "nres")
    public static let reservedValue = ExclusionReason(rawValue: "reserved-value")
    public static let sensorFault = ExclusionReason(rawValue: "sensor-fault")
    public static let timeUnresolved = ExclusionReason(rawValue: "time-unresolved")
    /// More than `future_tolerance_s` after the gateway's clock at download (a fast meter clock, a bogus
    /// far-future record): Nightscout hides data behind future items.
    public static let timeInFuture = ExclusionReason(rawValue: "time-in-future")
    public static let ketone = ExclusionReason(rawValue: "ketone")
    /// The meter sent another record with this one's sequence number and user-facing time but other
    /// bytes: which is right cannot be told. Never released for upload.
    public static let conflictingRecord = ExclusionReason(rawValue: "conflicting-record")
    public var description: String { rawValue }
}

/// The optional Glucose Measurement Context (0x2A34) fields, as numbers from the wire.
public struct ReadingContext: Sendable, Equatable, Codable {
    public var carbohydrateID: Int?
    public var carbohydrateKg: Double?
    public var meal: Int?
    public var tester: Int?
    public var health: Int?
    public var exerciseDurationSeconds: Int?
    public var exerciseIntensityPercent: Int?
    public var medicationID: Int?
    /// Medication amount; `medicationUnit` is "kg" or "L".
    public var medicationAmount: Double?
    public var medicationUnit: String?
    public var hba1cPercent: Double?
    public init() {}
}

/// A reading as the download procedure hands it to the store: the meter's bytes and times exactly as
/// sent, and what the clinical rules concluded from them. Times, unit and special value are typed; the
/// store turns them into text only in its rows.
public struct NewReading: Sendable, Equatable {
    /// Meter Bluetooth address.
    public var meterAddress: String
    public var sequence: Int
    /// Base time exactly as sent. Not a valid date (`isValid` false) when the meter's clock gave none
    /// (never set, or a firmware bug such as month 13): the reading is then `time-unresolved`.
    public var baseTime: GlucoseDateTime
    public var timeOffsetMinutes: Int
    /// Base time + offset, the time the meter shows the user; the base time as sent when that is not a
    /// valid date (no offset is applied to a time that cannot be placed).
    public var userFacingTime: GlucoseDateTime
    /// The meter's offset from UTC in minutes at `meterInstant`, as its time zone gave it (user-facing time
    /// minus meter instant). Set exactly when `meterInstant` is.
    public var utcOffsetMinutes: Int?
    /// The user-facing time read in the meter's time zone, as UTC, before clock-skew correction.
    /// Nil when it cannot be resolved (then the reading is excluded with `timeUnresolved`).
    public var meterInstant: UnixMillis?
    /// The instant after clock-skew correction; equals `meterInstant` when no correction applied.
    public var instant: UnixMillis?
    /// Concentration in mg/dL and mmol/L; nil when the value is special.
    public var mgdl: Double?
    public var mmoll: Double?
    /// Set when the SFLOAT is not a number (HI and LO are the infinities).
    public var special: SFloat.Special?
    /// The unit as the meter sent it.
    public var unit: ConcentrationUnit
    public var type: Int?
    public var sampleLocation: Int?
    public var sensorStatus: Int?
    public var analyte: Analyte
    public var context: ReadingContext?
    public var rawMeasurement: [UInt8]
    public var rawContext: [UInt8]?
    public var receivedAt: UnixMillis
    public var exclusion: ExclusionReason?

    public init(
        meterAddress: String, sequence: Int, baseTime: GlucoseDateTime, timeOffsetMinutes: Int,
        userFacingTime: GlucoseDateTime, utcOffsetMinutes: Int?,
        meterInstant: UnixMillis?, instant: UnixMillis?, mgdl: Double?, mmoll: Double?, special: SFloat.Special?,
        unit: ConcentrationUnit, type: Int?, sampleLocation: Int?, sensorStatus: Int?, analyte: Analyte,
        context: ReadingContext?, rawMeasurement: [UInt8], rawContext: [UInt8]?, receivedAt: UnixMillis,
        exclusion: ExclusionReason?
    ) {
        self.meterAddress = meterAddress
        self.sequence = sequence
        self.baseTime = baseTime
        self.timeOffsetMinutes = timeOffsetMinutes
        self.userFacingTime = userFacingTime
        self.utcOffsetMinutes = utcOffsetMinutes
        self.meterInstant = meterInstant
        self.instant = instant
        self.mgdl = mgdl
        self.mmoll = mmoll
        self.special = special
        self.unit = unit
        self.type = type
        self.sampleLocation = sampleLocation
        self.sensorStatus = sensorStatus
        self.analyte = analyte
        self.context = context
        self.rawMeasurement = rawMeasurement
        self.rawContext = rawContext
        self.receivedAt = receivedAt
        self.exclusion = exclusion
    }

    /// The offset of a user-facing time from the instant it was resolved to, in whole minutes (towards
    /// zero, as zones with second offsets such as local mean time have them).
    public static func utcOffsetMinutes(userFacingTime: GlucoseDateTime, meterInstant: UnixMillis) -> Int {
        Int((userFacingTime.naiveSeconds * 1000 - meterInstant) / 60_000)
    }
}

/// A reading as stored, with its row id.
public struct StoredReading: Sendable, Equatable {
    public var id: Int64
    public var reading: NewReading
    public init(id: Int64, reading: NewReading) {
        self.id = id
        self.reading = reading
    }
}

/// The identity of a paired meter, as read from Device Information at pairing.
public struct MeterInfo: Sendable, Equatable, Codable {
    public var address: String
    public var name: String?
    public var manufacturer: String?
    public var model: String?
    public var serial: String?
    public var firmware: String?
    /// Glucose Feature (0x2A51) bits.
    public var features: Int?
    /// IANA time zone the meter's clock is read in, e.g. `Europe/Berlin`.
    public var timeZone: String
    public var pairedAt: UnixMillis?
    public var highestSequence: Int?
    public var lastSync: UnixMillis?
    public var lastSeen: UnixMillis?
    /// Meter clock minus gateway clock, in seconds, at the last sync where the clock was readable.
    public var lastClockSkewSeconds: Int?
    /// When the gateway found that the meter lost its bond (state `re-pair needed`): nil while the bond
    /// works. Pairing again clears it; the daemon leaves the meter alone meanwhile.
    public var bondLostAt: UnixMillis?
    /// What the Bluetooth stack said when the bond was found lost (no secrets, no health values).
    public var bondLostMessage: String?
    /// The Device Information strings as the meter sent them (key: `manufacturer`, `model`, `serial`,
    /// `firmware`), for those whose stored text had characters removed (NUL and other control characters).
    public var rawIdentity: [String: [UInt8]] = [:]

    public init(address: String, timeZone: String) {
        self.address = address
        self.timeZone = timeZone
    }
}
