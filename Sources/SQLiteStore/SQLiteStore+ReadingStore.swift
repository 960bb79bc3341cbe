import GatewayCore

/// Meters, readings and the event log: the store as the `ReadingStore` the download and the daemon use.
extension SQLiteStore {
    public func meter(_ address: String) throws -> MeterInfo? {
        try openConnection().queryFirst("SELECT \(MeterColumns.list) FROM meter WHERE address = ? AND unpaired_at IS NULL", [.text(address)]) {
            MeterColumns.decode($0).info
        }
    }

    public func pairedMeters() throws -> [MeterInfo] {
        try meters().map(\.info)
    }

    /// Inserts the meter or updates its row (identity, time zone, bookkeeping), and marks it paired.
    /// The highest sequence seen never goes down here; use `resetHighestSequence` for that.
    public func saveMeter(_ meter: MeterInfo) throws {
        try saveMeter(meter, logging: nil)
    }

    /// As `saveMeter`, with `event` inserted in the same transaction: one commit, one sync.
    public func saveMeter(_ meter: MeterInfo, logging event: GatewayEvent) throws {
        try saveMeter(meter, logging: Optional(event))
    }

    private func saveMeter(_ meter: MeterInfo, logging event: GatewayEvent?) throws {
        let db = try openConnection()
        try db.transaction {
            if let event { try Self.insertEvent(event, in: db) }
            try db.execute("""
                INSERT INTO meter (address, name, manufacturer, model, serial, firmware, features, time_zone,
                    paired_at, unpaired_at, highest_sequence, last_sync, last_seen, last_clock_skew_s,
                    bond_lost_at, bond_lost_message, identity_raw)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (address) DO UPDATE SET
                    name = excluded.name, manufacturer = excluded.manufacturer, model = excluded.model,
                    serial = excluded.serial, firmware = excluded.firmware, features = excluded.features,
                    time_zone = excluded.time_zone, paired_at = excluded.paired_at, unpaired_at = NULL,
                    highest_sequence = \(Self.laterPosition(stored: "meter.highest_sequence", new: "excluded.highest_sequence")),
                    last_sync = excluded.last_sync, last_seen = excluded.last_seen,
                    last_clock_skew_s = excluded.last_clock_skew_s,
                    bond_lost_at = excluded.bond_lost_at, bond_lost_message = excluded.bond_lost_message,
                    identity_raw = excluded.identity_raw
                """, [
                    .text(meter.address), SQLiteValue(meter.name), SQLiteValue(meter.manufacturer), SQLiteValue(meter.model),
                    SQLiteValue(meter.serial), SQLiteValue(meter.firmware), SQLiteValue(meter.features), .text(meter.timeZone),
                    SQLiteValue(meter.pairedAt), SQLiteValue(meter.highestSequence), SQLiteValue(meter.lastSync),
                    SQLiteValue(meter.lastSeen), SQLiteValue(meter.lastClockSkewSeconds),
                    SQLiteValue(meter.bondLostAt), SQLiteValue(meter.bondLostAt == nil ? nil : meter.bondLostMessage),
                    SQLiteValue(MeterColumns.encodeRawIdentity(meter.rawIdentity)),
                ])
        }
        committed(.meters)
        if event != nil { committed(.events) }
    }

    /// Sets or clears the meter's `re-pair needed` state, leaving the rest of its row alone.
    @discardableResult
    public func setBondLost(_ address: String, at: UnixMillis?, message: String?) throws -> Bool {
        let db = try openConnection()
        try db.execute("UPDATE meter SET bond_lost_at = ?, bond_lost_message = ? WHERE address = ? AND unpaired_at IS NULL",
                       [SQLiteValue(at), SQLiteValue(at == nil ? nil : message), .text(address)])
        guard db.changes == 1 else { return false }
        committed(.meters)
        return true
    }

    /// Inserts each reading not already stored, with one outbox row per builder that accepts it, all in
    /// one transaction: on any error nothing of the batch is stored. A reading is unique per meter by
    /// (sequence, user-facing time): a re-sent history adds nothing, a restarted counter adds new rows.
    /// A reading from a meter without a row gets a minimal row (time zone `UTC`) so it is never refused.
    /// Returns how many were new; conflicts are handled as by `insertReadings`.
    @discardableResult
    public func insert(_ readings: [NewReading]) throws -> Int {
        try insertReadings(readings).inserted
    }

    /// As `insert`; a reading whose key is stored with other measurement bytes is a conflict: its bytes go
    /// to `conflicting_record` (once per distinct bytes) and the stored reading, unless a destination
    /// acknowledged it, becomes `conflicting-record` and loses its outbox rows not acknowledged, all in
    /// the batch's transaction.
    public func insertReadings(_ readings: [NewReading]) throws -> InsertOutcome {
        guard !readings.isEmpty else { return InsertOutcome(inserted: 0) }
        // Confined to this actor like every use of the connection (the closures below run on it, before
        // this returns); unsafe only because Swift 6.0's region analysis takes their captures for a send.
        nonisolated(unsafe) let db = try openConnection()
        let createdAt = now()
        // Every reference below is to a row of this transaction: the meter row read or created first, the
        // reading and the outbox row just inserted.
        let outcome = try transactionWithoutForeignKeyChecks(db) {
            // Each meter's row and highest sequence, in the order first seen: a download's batch is one
            // meter's, so this is looked through once per reading without hashing its address.
            var meters: [(address: String, info: MeterInfo, highest: Int)] = []
            var outcome = InsertOutcome(inserted: 0)
            let insertReading = try db.statement(ReadingColumns.insertSQL)
            let insertOutbox = try OutboxInsert(db)
            for reading in readings {
                let index: Int
                if let known = meters.lastIndex(where: { $0.address == reading.meterAddress }) {
                    index = known
                } else {
                    meters.append((reading.meterAddress, try meterRow(reading.meterAddress, in: db), reading.sequence))
                    index = meters.count - 1
                }
                let meter = meters[index].info
                try insertReading.resetting {
                    try ReadingColumns.bind(reading, to: insertReading)
                    while try insertReading.step() {}
                }
                meters[index].highest = SequencePosition.advanced(meters[index].highest, by: reading.sequence)
                guard db.changes == 1 else {
                    if let conflict = try keepIfConflicting(reading, in: db) { outcome.conflicts.append(conflict) }
                    continue
                }
                outcome.inserted += 1
                try queueUploads(reading, id: db.lastInsertRowID, meter: meter, createdAt: createdAt, with: insertOutbox)
            }
            for (address, _, sequence) in meters {
                try db.execute(
                    "UPDATE meter SET highest_sequence = \(Self.laterPosition(stored: "highest_sequence", new: "?1")) WHERE address = ?2",
                    [.integer(Int64(sequence)), .text(address)]
                )
            }
            return outcome
        }
        if outcome.inserted > 0 || !outcome.conflicts.isEmpty { committed(.readings) }
        return outcome
    }

    /// For a reading whose key is already stored (inside the caller's transaction): nil when the stored
    /// one has the same measurement bytes (a resend) or these bytes are already kept as a conflict;
    /// otherwise keeps the bytes, withholds the stored reading unless a destination acknowledged it, and
    /// returns the conflict.
    private func keepIfConflicting(_ reading: NewReading, in db: SQLiteConnection) throws -> RecordConflict? {
        let key: [SQLiteValue] = [.text(reading.meterAddress), .integer(Int64(reading.sequence)), .text(reading.userFacingTime.isoString)]
        guard let (storedID, storedBytes) = try db.queryFirst(
            "SELECT id, raw_measurement FROM reading WHERE meter = ? AND sequence = ? AND user_facing_time = ?", key,
            { ($0.int64(0), $0.blob(1)) }
        ), storedBytes != reading.rawMeasurement else { return nil }
        let kept = try db.queryFirst("""
            SELECT count(*) FROM conflicting_record
            WHERE meter = ? AND sequence = ? AND user_facing_time = ? AND raw_measurement = ?
            """, key + [.blob(reading.rawMeasurement)]) { $0.int(0) } ?? 0
        guard kept == 0 else { return nil }
        try db.execute("""
            INSERT INTO conflicting_record (meter, sequence, user_facing_time, raw_measurement, raw_context, received_at)
            VALUES (?, ?, ?, ?, ?, ?)
            """, key + [.blob(reading.rawMeasurement), SQLiteValue(reading.rawContext), .integer(reading.receivedAt)])
        let acknowledgedBy = try db.query(
            "SELECT DISTINCT destination FROM outbox WHERE reading_id = ? AND state = 'acknowledged' ORDER BY destination",
            [.integer(storedID)]
        ) { $0.text(0) }
        if acknowledgedBy.isEmpty {
            try db.execute("UPDATE reading SET exclusion = ? WHERE id = ?",
                           [.text(ExclusionReason.conflictingRecord.rawValue), .integer(storedID)])
            try db.execute("DELETE FROM outbox_body WHERE outbox_id IN (SELECT id FROM outbox WHERE reading_id = ?)", [.integer(storedID)])
            try db.execute("DELETE FROM outbox WHERE reading_id = ?", [.integer(storedID)])
        }
        return RecordConflict(meterAddress: reading.meterAddress, sequence: reading.sequence,
                              userFacingTime: reading.userFacingTime, storedID: storedID, acknowledgedBy: acknowledgedBy)
    }

    static let insertOutboxSQL = """
        INSERT INTO outbox (destination, reading_id, idempotency_key, state, created_at)
        VALUES (?, ?, ?, 'pending', ?)
        """
    static let insertOutboxBodySQL = "INSERT INTO outbox_body (outbox_id, body) VALUES (?, ?)"

    /// One outbox row per builder that accepts the reading (inside the caller's transaction). Nonisolated
    /// (it uses no state but `builders`, a constant): Swift 6.0.3's region analysis crashes on the `defer`
    /// below in an actor-isolated method.
    private nonisolated func queueUploads(
        _ reading: NewReading, id readingID: Int64, meter: MeterInfo, createdAt: UnixMillis, with insert: OutboxInsert
    ) throws {
        for builder in builders {
            guard let element = builder.element(for: reading, meter: meter) else { continue }
            defer {
                insert.row.reset()
                insert.body.reset()
            }
            try insert.row.bind(.text(builder.destination.rawValue), at: 1)
            try insert.row.bind(.integer(readingID), at: 2)
            try insert.row.bind(.text(element.key), at: 3)
            try insert.row.bind(.integer(createdAt), at: 4)
            while try insert.row.step() {}
            try insert.body.bind(.integer(insert.db.lastInsertRowID), at: 1)
            try insert.body.bind(.blob(element.body), at: 2)
            while try insert.body.step() {}
        }
    }

    /// The two statements that queue one upload: the outbox row, then its body under the row's id.
    private struct OutboxInsert {
        let db: SQLiteConnection
        let row: SQLiteStatement
        let body: SQLiteStatement

        init(_ db: SQLiteConnection) throws {
            self.db = db
            row = try db.statement(SQLiteStore.insertOutboxSQL)
            body = try db.statement(SQLiteStore.insertOutboxBodySQL)
        }
    }

    /// Re-evaluates the meter's readings held for their time, `time-in-future` or `time-unresolved`:
    /// `reevaluate` gets each one as stored and returns it as the clinical rules would store it now (a
    /// corrected instant and its exclusion), or nil to leave it. One that is neither any more (same sequence,
    /// user-facing time, meter instant and bytes) is released: its instant and exclusion are updated and its
    /// outbox rows created, all in one transaction. Readings with any other exclusion are never read.
    /// Returns the released readings as now stored.
    @discardableResult
    public func releaseHeldReadings(
        _ meterAddress: String, reevaluate: @Sendable (NewReading) -> NewReading?
    ) throws -> [StoredReading] {
        // As in insertReadings: confined to this actor, unsafe only for Swift 6.0's region analysis.
        nonisolated(unsafe) let db = try openConnection()
        let createdAt = now()
        let released = try db.transaction {
            let held = try db.query(
                "SELECT id, \(ReadingColumns.list) FROM reading WHERE meter = ? AND exclusion IN (?, ?) ORDER BY id",
                [.text(meterAddress), .text(ExclusionReason.timeInFuture.rawValue), .text(ExclusionReason.timeUnresolved.rawValue)],
                ReadingColumns.decode
            )
            guard !held.isEmpty else { return [StoredReading]() }
            let meter = try meterRow(meterAddress, in: db)
            let insertOutbox = try OutboxInsert(db)
            var released: [StoredReading] = []
            for stored in held {
                let old = stored.reading
                guard let fresh = reevaluate(old), fresh.exclusion != .timeInFuture, fresh.exclusion != .timeUnresolved,
                      let heldAs = old.exclusion,
                      fresh.meterAddress == old.meterAddress, fresh.sequence == old.sequence,
                      fresh.userFacingTime == old.userFacingTime, fresh.meterInstant == old.meterInstant,
                      fresh.rawMeasurement == old.rawMeasurement, fresh.rawContext == old.rawContext
                else { continue }
                // Only the time and the exclusion change: what arrived, and when, stays as stored.
                var updated = old
                updated.instant = fresh.instant
                updated.exclusion = fresh.exclusion
                try db.execute(
                    "UPDATE reading SET instant = ?, exclusion = ? WHERE id = ? AND exclusion = ?",
                    [SQLiteValue(updated.instant), SQLiteValue(updated.exclusion?.rawValue), .integer(stored.id),
                     .text(heldAs.rawValue)]
                )
                guard db.changes == 1 else { continue }
                try queueUploads(updated, id: stored.id, meter: meter, createdAt: createdAt, with: insertOutbox)
                released.append(StoredReading(id: stored.id, reading: updated))
            }
            return released
        }
        if !released.isEmpty { committed(.readings) }
        return released
    }

    /// The meter's row, paired or not, created minimal when missing (inside the caller's transaction).
    private func meterRow(_ address: String, in db: SQLiteConnection) throws -> MeterInfo {
        if let row = try db.queryFirst("SELECT \(MeterColumns.list) FROM meter WHERE address = ?", [.text(address)], MeterColumns.decode) {
            return row.info
        }
        try db.execute("INSERT INTO meter (address, time_zone) VALUES (?, 'UTC')", [.text(address)])
        return MeterInfo(address: address, timeZone: "UTC")
    }

    /// The meter's counter position: the sequence of the newest record downloaded (advanced by every
    /// insert, wrapping, see `SequencePosition`), -1 for "from sequence 0", nil when none.
    public func highestSequence(_ address: String) throws -> Int? {
        let db = try openConnection()
        let recorded = try db.queryFirst("SELECT highest_sequence FROM meter WHERE address = ?", [.text(address)]) { $0.optionalInt(0) }
        if let recorded, let value = recorded { return value }
        return try db.queryFirst("SELECT max(sequence) FROM reading WHERE meter = ?", [.text(address)]) { $0.optionalInt(0) } ?? nil
    }

    /// The largest sequence number among the meter's stored readings, nil when none.
    public func largestStoredSequence(_ address: String) throws -> Int? {
        try openConnection().queryFirst("SELECT max(sequence) FROM reading WHERE meter = ?", [.text(address)]) { $0.optionalInt(0) } ?? nil
    }

    /// SQL for the later of two counter positions (`SequencePosition.advanced`): `new` when the stored one
    /// is unset or -1, or when `new` is 1 to 32767 steps after it, going round from 65535 to 0 (SQLite's
    /// `&` works on 64-bit two's complement, so a negative difference wraps as it should).
    static func laterPosition(stored: String, new: String) -> String {
        "CASE WHEN \(new) IS NULL THEN \(stored) WHEN \(stored) IS NULL OR \(stored) < 0"
            + " OR ((\(new) - \(stored)) & 65535) BETWEEN 1 AND \(SequencePosition.window) THEN \(new) ELSE \(stored) END"
    }

    /// Sets the highest sequence seen, also downwards (after the meter's counter restarted).
    public func resetHighestSequence(_ address: String, to sequence: Int?) throws {
        try openConnection().execute("UPDATE meter SET highest_sequence = ? WHERE address = ?", [SQLiteValue(sequence), .text(address)])
        committed(.meters)
    }

    public func readingTotals() throws -> (stored: Int, excluded: Int) {
        let db = try openConnection()
        let stored = try db.queryFirst("SELECT count(*) FROM reading") { $0.int(0) } ?? 0
        let excluded = try db.queryFirst("SELECT count(*) FROM reading WHERE exclusion IS NOT NULL") { $0.int(0) } ?? 0
        return (stored, excluded)
    }

    public func log(_ event: GatewayEvent) throws {
        try Self.insertEvent(event, in: openConnection())
        committed(.events)
    }

    /// Logs `event` in a commit without an fsync of its own (`synchronous = NORMAL` for that one commit, as
    /// `claimPending`): its WAL frames are written at once, so a crash of the process keeps it, and the
    /// next FULL commit (a batch of readings, the meter's bookkeeping) or the checkpoint at close syncs
    /// them. Only a power cut before either loses it, and with it nothing but that line of the log: for
    /// events whose loss says nothing wrong (a connection made, before anything of it was stored).
    public func logWithoutSync(_ event: GatewayEvent) throws {
        let db = try openConnection()
        try withoutOwnSync(db) { try Self.insertEvent(event, in: db) }
        committed(.events)
    }

    private static func insertEvent(_ event: GatewayEvent, in db: SQLiteConnection) throws {
        try db.execute(
            "INSERT INTO event (at, kind, meter, code, message) VALUES (?, ?, ?, ?, ?)",
            [.integer(event.at), .text(event.kind.rawValue), SQLiteValue(event.meterAddress), SQLiteValue(event.code), .text(event.message)]
        )
    }
}
