import GatewayCore
import GlucoseProfile

/// Everything that describes one simulated meter: identity, GATT content, stored records and faults.
/// Built from a JSON meter file (`MeterFile`) or from command-line flags.
public struct MeterDescription: Sendable, Equatable {
    /// `AA:BB:CC:DD:EE:FF`, upper case.
    public var address: String
    /// `public` or `random`, as BlueZ's `AddressType`.
    public var addressType: String
    /// The advertised local name.
    public var name: String
    /// The six-digit passkey the meter displays; the central must type it (`RequestPasskey`).
    public var passkey: UInt32
    /// When true, GLS characteristics refuse access until the central has bonded (real meters).
    public var requiresBonding: Bool
    public var rssi: Int16
    public var deviceInformation: DeviceInformation
    public var features: UInt16
    /// Whether the meter has the optional 0x2A34 characteristic at all.
    public var hasContextCharacteristic: Bool
    /// Whether RACP accepts the user-facing-time filter (else "operand not supported").
    public var supportsTimeFilter: Bool
    /// Stored records, in storage order, oldest first: ascending sequence number, or, on a meter whose
    /// counter went round from 65535 to 0, the numbers before the wrap first (see `storageOrder`).
    public var records: [MeterRecord]
    public var newRecords: NewRecordPlan?
    public var advertising: AdvertisingPlan
    public var faults: MeterFaults
    /// The meter's clock and how a central reaches it (`MeterClock`).
    public var clock: MeterClock
    /// How the meter's firmware departs from the profile (see `MeterProfile`).
    public var quirks: MeterQuirks
    /// How the meter pairs (method, who starts, how it answers).
    public var pairing: MeterPairingBehaviour

    public init(
        address: String,
        addressType: String = "public",
        name: String,
        passkey: UInt32,
        requiresBonding: Bool = true,
        rssi: Int16 = -60,
        deviceInformation: DeviceInformation = DeviceInformation(),
        features: UInt16 = 0x0020 | 0x0400,
        hasContextCharacteristic: Bool = true,
        supportsTimeFilter: Bool = true,
        records: [MeterRecord] = [],
        newRecords: NewRecordPlan? = nil,
        advertising: AdvertisingPlan = .always,
        faults: MeterFaults = MeterFaults(),
        clock: MeterClock = .none,
        quirks: MeterQuirks = MeterQuirks(),
        pairing: MeterPairingBehaviour = MeterPairingBehaviour()
    ) {
        self.address = address
        self.addressType = addressType
        self.name = name
        self.passkey = passkey
        self.requiresBonding = requiresBonding
        self.rssi = rssi
        self.deviceInformation = deviceInformation
        self.features = features
        self.hasContextCharacteristic = hasContextCharacteristic
        self.supportsTimeFilter = supportsTimeFilter
        self.records = Self.storageOrder(records)
        self.newRecords = newRecords
        self.advertising = advertising
        self.faults = faults
        self.clock = clock
        self.quirks = quirks
        self.pairing = pairing
    }

    /// The BlueZ object-path form of the address: `dev_AA_BB_CC_DD_EE_FF`.
    public var deviceNode: String { "dev_" + address.replacingColons() }

    /// The sequence number of the newest record stored (after a wrap not the largest one), nil when empty.
    public var lastSequenceNumber: UInt16? {
        quirks.numbering == .newestFirst ? records.first?.sequenceNumber : records.last?.sequenceNumber
    }

    /// Records as a meter stores them, oldest first. A list that ascends, goes from a number at or above
    /// 32768 to one below it once, and ends below where it started (65532...65535, 0...3) is a counter
    /// that went round from 65535 to 0: kept as listed. Any other list is put in ascending sequence order.
    static func storageOrder(_ records: [MeterRecord]) -> [MeterRecord] {
        let numbers = records.map(\.sequenceNumber)
        let descents = zip(numbers, numbers.dropFirst()).filter { $0 >= $1 }
        if descents.count == 1, let (before, after) = descents.first, before >= 0x8000, after < 0x8000,
           let first = numbers.first, let last = numbers.last, last < first {
            return records
        }
        return records.sorted { $0.sequenceNumber < $1.sequenceNumber }
    }

    /// Checks an address of the form `AA:BB:CC:DD:EE:FF` (hex digits, either case) and returns it upper case.
    public static func normalizedAddress(_ text: String) -> String? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && UInt8($0, radix: 16) != nil }) else { return nil }
        return text.uppercased()
    }
}

/// Device Information Service (0x180A) strings; absent ones are not offered as characteristics.
public struct DeviceInformation: Sendable, Equatable {
    public var manufacturer: String?
    public var model: String?
    public var serial: String?
    public var firmware: String?
    public var software: String?
    public init(manufacturer: String? = "Simulated Meters", model: String? = "GlucoSim 1", serial: String? = nil,
                firmware: String? = "1.0", software: String? = nil) {
        self.manufacturer = manufacturer
        self.model = model
        self.serial = serial
        self.firmware = firmware
        self.software = software
    }

    /// The characteristics offered, in handle order.
    public var characteristics: [(GATTUUID, String)] {
        var out: [(GATTUUID, String)] = []
        if let manufacturer { out.append((.manufacturerName, manufacturer)) }
        if let model { out.append((.modelNumber, model)) }
        if let serial { out.append((.serialNumber, serial)) }
        if let firmware { out.append((.firmwareRevision, firmware)) }
        if let software { out.append((.softwareRevision, software)) }
        return out
    }
}

/// Records that appear while the simulator runs (the user measuring again).
public struct NewRecordPlan: Sendable, Equatable {
    /// Simulated seconds between new records.
    public var intervalSeconds: Double
    /// Stop after this many (nil: no limit).
    public var limit: Int?
    /// The value each new record carries, in mg/dL.
    public var mgPerDL: Double
    public init(intervalSeconds: Double, limit: Int? = nil, mgPerDL: Double = 120) {
        self.intervalSeconds = intervalSeconds
        self.limit = limit
        self.mgPerDL = mgPerDL
    }
}

/// When the meter advertises. Real meters advertise only for a while after a measurement or a button press.
public enum AdvertisingPlan: Sendable, Equatable {
    case always
    /// Never on its own; only when told to (control interface `Advertise`, or a new record).
    case off
    /// On for `onSeconds`, off for `offSeconds`, repeating (simulated seconds).
    case bursts(onSeconds: Double, offSeconds: Double)
}

/// How the meter misbehaves.
public struct MeterFaults: Sendable, Equatable {
    public enum ContextOrder: String, Sendable, Equatable { case after, before }
    public enum MalformedKind: String, Sendable, Equatable {
        /// The measurement is cut short after the base time's year.
        case truncated
        /// The base time carries month 13 (an i-SENS firmware bug).
        case invalidTime = "invalid-time"
        /// A context whose sequence number matches no record.
        case strayContext = "stray-context"
        /// After the record, a context carrying its sequence number whose flags announce a carbohydrate
        /// field that is not there: a value no decoder can read.
        case garbageContext = "garbage-context"
    }

    /// Drop the link after this many measurements of a report procedure (nil: never).
    public var dropLinkAfter: Int?
    /// How many times the drop happens before the meter behaves (nil: every time).
    public var dropLinkTimes: Int?
    /// Answer "procedure not completed" (0x08) after this many measurements (nil: never).
    public var failProcedureAfter: Int?
    /// Simulated seconds before each notification or indication of a procedure.
    public var notificationDelay: Double
    public var contextOrder: ContextOrder
    /// Sequence numbers whose notifications are malformed, and how.
    public var malformed: [UInt16: MalformedKind]
    /// Answer a count of zero with "no records found" (`06 00 04 06`) instead of `05 00 00 00`.
    public var zeroCountAsNoRecords: Bool

    public init(dropLinkAfter: Int? = nil, dropLinkTimes: Int? = 1, failProcedureAfter: Int? = nil,
                notificationDelay: Double = 0, contextOrder: ContextOrder = .after,
                malformed: [UInt16: MalformedKind] = [:], zeroCountAsNoRecords: Bool = false) {
        self.dropLinkAfter = dropLinkAfter
        self.dropLinkTimes = dropLinkTimes
        self.failProcedureAfter = failProcedureAfter
        self.notificationDelay = notificationDelay
        self.contextOrder = contextOrder
        self.malformed = malformed
        self.zeroCountAsNoRecords = zeroCountAsNoRecords
    }
}

extension String {
    func replacingColons() -> String {
        String(map { $0 == ":" ? "_" : $0 })
    }
}
