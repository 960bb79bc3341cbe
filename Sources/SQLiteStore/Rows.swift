import GatewayCore
import GlucoseProfile
import Support

/// A meter row as stored: the identity and bookkeeping `MeterInfo` carries, plus when it was unpaired.
public struct MeterRecord: Sendable, Equatable {
    public var info: MeterInfo
    /// When `unpair` removed the pairing; nil while paired. Readings of an unpaired meter are kept.
    public var unpairedAt: UnixMillis?
    public init(info: MeterInfo, unpairedAt: UnixMillis?) {
        self.info = info
        self.unpairedAt = unpairedAt
    }
}

enum MeterColumns {
    static let list = """
        address, name, manufacturer, model, serial, firmware, features, time_zone, paired_at, unpaired_at,
        highest_sequence, last_sync, last_seen, last_clock_skew_s, bond_lost_at, bond_lost_message, identity_raw
        """

    /// `manufacturer=41420000,model=...` for the raw identity strings, nil when there are none.
    static func encodeRawIdentity(_ raw: [String: [UInt8]]) -> String? {
        guard !raw.isEmpty else { return nil }
        return raw.keys.sorted().map { "\($0)=\(hexString(raw[$0] ?? []))" }.joined(separator: ",")
    }

    /// The inverse of `encodeRawIdentity`; pairs that do not parse are left out.
    static func decodeRawIdentity(_ text: String?) -> [String: [UInt8]] {
        guard let text else { return [:] }
        var out: [String: [UInt8]] = [:]
        for pair in text.split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[1].count % 2 == 0 else { continue }
            var bytes: [UInt8] = []
            var i = parts[1].startIndex
            var ok = true
            while i < parts[1].endIndex {
                let j = parts[1].index(i, offsetBy: 2)
                guard let b = UInt8(parts[1][i..<j], radix: 16) else { ok = false; break }
                bytes.append(b)
                i = j
            }
            if ok { out[String(parts[0])] = bytes }
        }
        return out
    }

    static func decode(_ row: SQLiteStatement) -> MeterRecord {
        var info = MeterInfo(address: row.text(0), timeZone: row.text(7))
        info.name = row.optionalText(1)
        info.manufacturer = row.optionalText(2)
        info.model = row.optionalText(3)
        info.serial = row.optionalText(4)
        info.firmware = row.optionalText(5)
        info.features = row.optionalInt(6)
        info.pairedAt = row.optionalInt64(8)
        // -1 asks the next download for every record (see `MeterDownload.Run.saveBookkeeping`): no sequence seen.
        info.highestSequence = row.optionalInt(10).flatMap { $0 >= 0 ? $0 : nil }
        info.lastSync = row.optionalInt64(11)
        info.lastSeen = row.optionalInt64(12)
        info.lastClockSkewSeconds = row.optionalInt(13)
        info.bondLostAt = row.optionalInt64(14)
        info.bondLostMessage = row.optionalText(15)
        info.rawIdentity = decodeRawIdentity(row.optionalText(16))
        return MeterRecord(info: info, unpairedAt: row.optionalInt64(9))
    }
}

enum ReadingColumns {
    /// Every column but the id, in binding order.
    static let list = """
        meter, sequence, base_time, time_offset_min, user_facing_time, meter_instant, instant, mgdl, mmoll, special,
        unit, type, sample_location, sensor_status, analyte, has_context, carbohydrate_id, carbohydrate_kg, meal,
        tester, health, exercise_duration_s, exercise_intensity_pct, medication_id, medication_amount,
        medication_unit, hba1c_pct, raw_measurement, raw_context, received_at, exclusion
        """

    static let insertSQL = """
        INSERT INTO reading (\(list))
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (meter, sequence, user_facing_time) DO NOTHING
        """

    /// Binds parameter by parameter: this is the bulk-insert path, so no array of values is built.
    static func bind(_ r: NewReading, to statement: SQLiteStatement) throws(SQLiteError) {
        let c = r.context
        try statement.bind(.text(r.meterAddress), at: 1)
        try statement.bind(.integer(Int64(r.sequence)), at: 2)
        // Without a time offset both times are the same text: written once.
        let userFacingTime = r.userFacingTime.isoString
        try statement.bind(.text(r.baseTime == r.userFacingTime ? userFacingTime : r.baseTime.isoString), at: 3)
        try statement.bind(.integer(Int64(r.timeOffsetMinutes)), at: 4)
        try statement.bind(.text(userFacingTime), at: 5)
        try statement.bind(SQLiteValue(r.meterInstant), at: 6)
        try statement.bind(SQLiteValue(r.instant), at: 7)
        try statement.bind(SQLiteValue(r.mgdl), at: 8)
        try statement.bind(SQLiteValue(r.mmoll), at: 9)
        try statement.bind(SQLiteValue(r.special?.rawValue), at: 10)
        try statement.bind(.text(r.unit.rawValue), at: 11)
        try statement.bind(SQLiteValue(r.type), at: 12)
        try statement.bind(SQLiteValue(r.sampleLocation), at: 13)
        try statement.bind(SQLiteValue(r.sensorStatus), at: 14)
        try statement.bind(.text(r.analyte.rawValue), at: 15)
        try statement.bind(.integer(c == nil ? 0 : 1), at: 16)
        if let c {
            try statement.bind(SQLiteValue(c.carbohydrateID), at: 17)
            try statement.bind(SQLiteValue(c.carbohydrateKg), at: 18)
            try statement.bind(SQLiteValue(c.meal), at: 19)
            try statement.bind(SQLiteValue(c.tester), at: 20)
            try statement.bind(SQLiteValue(c.health), at: 21)
            try statement.bind(SQLiteValue(c.exerciseDurationSeconds), at: 22)
            try statement.bind(SQLiteValue(c.exerciseIntensityPercent), at: 23)
            try statement.bind(SQLiteValue(c.medicationID), at: 24)
            try statement.bind(SQLiteValue(c.medicationAmount), at: 25)
            try statement.bind(SQLiteValue(c.medicationUnit), at: 26)
            try statement.bind(SQLiteValue(c.hba1cPercent), at: 27)
        }
        // Without a context, parameters 17...27 stay NULL: `reset()` clears bindings after every run.
        try statement.bind(.blob(r.rawMeasurement), at: 28)
        try statement.bind(SQLiteValue(r.rawContext), at: 29)
        try statement.bind(.integer(r.receivedAt), at: 30)
        try statement.bind(SQLiteValue(r.exclusion?.rawValue), at: 31)
    }

    /// Decodes `SELECT id, <list>`.
    static func decode(_ row: SQLiteStatement) throws -> StoredReading {
        guard let analyte = Analyte(rawValue: row.text(15)) else {
            throw SQLiteStoreError.invalidColumn(table: "reading", column: "analyte")
        }
        // Times as written by `bind`: a base time that was not a date is stored as sent and read back so.
        guard let baseTime = GlucoseDateTime(isoString: row.text(3), requiringValidDate: false) else {
            throw SQLiteStoreError.invalidColumn(table: "reading", column: "base_time")
        }
        guard let userFacingTime = GlucoseDateTime(isoString: row.text(5), requiringValidDate: false) else {
            throw SQLiteStoreError.invalidColumn(table: "reading", column: "user_facing_time")
        }
        guard let unit = ConcentrationUnit(rawValue: row.text(11)) else {
            throw SQLiteStoreError.invalidColumn(table: "reading", column: "unit")
        }
        var special: SFloat.Special?
        if let text = row.optionalText(10) {
            guard let value = SFloat.Special(rawValue: text) else {
                throw SQLiteStoreError.invalidColumn(table: "reading", column: "special")
            }
            special = value
        }
        let meterInstant = row.optionalInt64(6)
        var context: ReadingContext?
        if row.int(16) != 0 {
            var c = ReadingContext()
            c.carbohydrateID = row.optionalInt(17)
            c.carbohydrateKg = row.optionalDouble(18)
            c.meal = row.optionalInt(19)
            c.tester = row.optionalInt(20)
            c.health = row.optionalInt(21)
            c.exerciseDurationSeconds = row.optionalInt(22)
            c.exerciseIntensityPercent = row.optionalInt(23)
            c.medicationID = row.optionalInt(24)
            c.medicationAmount = row.optionalDouble(25)
            c.medicationUnit = row.optionalText(26)
            c.hba1cPercent = row.optionalDouble(27)
            context = c
        }
        let reading = NewReading(
            meterAddress: row.text(1), sequence: row.int(2), baseTime: baseTime, timeOffsetMinutes: row.int(4),
            userFacingTime: userFacingTime,
            utcOffsetMinutes: meterInstant.map { NewReading.utcOffsetMinutes(userFacingTime: userFacingTime, meterInstant: $0) },
            meterInstant: meterInstant, instant: row.optionalInt64(7),
            mgdl: row.optionalDouble(8), mmoll: row.optionalDouble(9), special: special, unit: unit,
            type: row.optionalInt(12), sampleLocation: row.optionalInt(13), sensorStatus: row.optionalInt(14),
            analyte: analyte, context: context, rawMeasurement: row.blob(28), rawContext: row.optionalBlob(29),
            receivedAt: row.int64(30), exclusion: row.optionalText(31).map(ExclusionReason.init(rawValue:))
        )
        return StoredReading(id: row.int64(0), reading: reading)
    }
}

enum OutboxColumns {
    static let list = "outbox.id, destination, reading_id, idempotency_key, outbox_body.body, state, attempts, created_at"
    /// The queue rows with their bodies. A row without a body (never written so by the gateway) is read
    /// and refused by `decode`, never skipped: a claim must return every row it marks.
    static let tables = "outbox LEFT JOIN outbox_body ON outbox_body.outbox_id = outbox.id"

    static func decode(_ row: SQLiteStatement) throws -> OutboxItem {
        guard let state = OutboxState(rawValue: row.text(5)) else {
            throw SQLiteStoreError.invalidColumn(table: "outbox", column: "state")
        }
        guard !row.isNull(4) else {
            throw SQLiteStoreError.invalidColumn(table: "outbox_body", column: "body")
        }
        return OutboxItem(
            id: row.int64(0), destination: DestinationName(rawValue: row.text(1)), readingID: row.int64(2),
            key: row.text(3), body: row.blob(4), state: state, attempts: row.int(6), createdAt: row.int64(7)
        )
    }

    /// A row of `SQLiteStore.claimSQL`, as `decode` reads it and then marked in flight. The query takes
    /// only rows whose destination is `destination` and whose state is `pending` (both compared as the
    /// same bytes), so those two columns are not read again: the item has `destination` and `.inFlight`.
    static func decodeClaimed(_ row: SQLiteStatement, destination: DestinationName) throws -> OutboxItem {
        guard !row.isNull(4) else {
            throw SQLiteStoreError.invalidColumn(table: "outbox_body", column: "body")
        }
        return OutboxItem(
            id: row.int64(0), destination: destination, readingID: row.int64(2),
            key: row.text(3), body: row.blob(4), state: .inFlight, attempts: row.int(6), createdAt: row.int64(7)
        )
    }
}
