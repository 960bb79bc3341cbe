#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import Dispatch
import GatewayCore

/// The gateway's database: meters, readings, the upload outbox, destination state and the event log,
/// in one SQLite file (WAL, `synchronous=FULL`, foreign keys on, mode 0600).
///
/// An actor over one connection. Its executor is a private serial dispatch queue, so the connection and
/// its statements never leave one thread at a time and blocking I/O stays off the cooperative pool.
/// Only Swift values cross the actor boundary.
public actor SQLiteStore: ReadingStore, OutboxStore {
    private let executor: DispatchQueueExecutor
    private let db: SQLiteConnection
    private let builders: [any OutboxBodyBuilder]
    private let now: @Sendable () -> UnixMillis
    /// The database file, or `:memory:`.
    public nonisolated let path: String
    /// `PRAGMA data_version` when `changedByOtherProcesses()` last looked.
    private var seenDataVersion: Int?
    /// The streams of `changes()`.
    private nonisolated let feed = StoreChangeFeed()

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// Opens the database at `path`, creating it (mode 0600) and applying migrations as needed.
    ///
    /// - Parameters:
    ///   - builders: one per enabled destination; `insert` runs each inside the reading's transaction.
    ///   - busyTimeoutMilliseconds: how long a write waits for another process's lock before failing with
    ///     a `SQLiteError` whose `isBusy` is true.
    ///   - now: the clock for outbox and bookkeeping times.
    public init(
        path: String,
        builders: [any OutboxBodyBuilder] = [],
        busyTimeoutMilliseconds: Int = 5000,
        now: @escaping @Sendable () -> UnixMillis = SystemClock.now
    ) throws {
        try self.init(path: path, builders: builders, busyTimeoutMilliseconds: busyTimeoutMilliseconds, now: now, faults: [])
    }

    /// As the public initializer, with failures forced at the choke point from the first call on.
    package init(
        path: String,
        builders: [any OutboxBodyBuilder] = [],
        busyTimeoutMilliseconds: Int = 5000,
        now: @escaping @Sendable () -> UnixMillis = SystemClock.now,
        faults: [SQLiteFault]
    ) throws {
        let inMemory = path == ":memory:" || path.isEmpty
        if !inMemory { try DatabaseFile.prepare(path: path) }
        let db: SQLiteConnection
        do {
            db = try SQLiteConnection(path: path, faults: faults)
        } catch {
            throw inMemory ? error : DatabaseFile.explain(error, path: path)
        }
        do {
            try Self.configure(db, busyTimeoutMilliseconds: busyTimeoutMilliseconds, inMemory: inMemory)
            try Migrator(migrations: Schema.migrations).migrate(db, now: now())
            if !inMemory { try DatabaseFile.prepare(path: path) }
        } catch let error as SQLiteError {
            db.close()
            throw inMemory ? error : DatabaseFile.explain(error, path: path)
        } catch {
            db.close()
            throw error
        }
        self.seenDataVersion = try? Self.dataVersion(db)
        self.readAccess = .readWrite
        self.db = db
        self.path = path
        self.builders = builders
        self.now = now
        self.executor = DispatchQueueExecutor(label: "glucose-gateway.store")
    }

    /// How a store was opened for reading (`openForReading`).
    public enum ReadAccess: Sendable, Equatable {
        /// Read-write, as every other opening.
        case readWrite
        /// Read-only, because the read-write open failed with `reason` (disk full, read-only file system).
        case readOnly(reason: SQLiteError)

        public static func == (a: ReadAccess, b: ReadAccess) -> Bool {
            switch (a, b) {
            case (.readWrite, .readWrite): true
            case let (.readOnly(x), .readOnly(y)): x.code == y.code && x.message == y.message
            default: false
            }
        }
    }

    /// How this store was opened: read-write unless `openForReading` had to fall back.
    public nonisolated let readAccess: ReadAccess

    /// Opens the database for a command that only reads (`status`, `readings`, `meters`): read-write as
    /// usual, and when that fails because the disk is full or the file cannot be written, read-only.
    ///
    /// Read-only comes in three steps, as SQLite allows: an ordinary read-only connection (it still needs
    /// a `-shm` file it can size); one that maps an existing `-shm` read-only (SQLite then reads the WAL
    /// itself); and, when no WAL holds commits (missing or empty, as after a clean close), the main file
    /// opened as immutable, which needs no `-shm` at all. A WAL with commits and no usable `-shm` is not
    /// read past: the main file alone would show an older state as if it were the current one.
    /// A missing file is created as by the read-write open; other errors are thrown as they are.
    public static func openForReading(path: String, busyTimeoutMilliseconds: Int = 5000) throws -> SQLiteStore {
        try openForReading(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds, faults: [])
    }

    /// As the public `openForReading`, with failures forced on the read-write attempt (tests).
    package static func openForReading(path: String, busyTimeoutMilliseconds: Int = 5000, faults: [SQLiteFault]) throws -> SQLiteStore {
        let reason: SQLiteError
        do {
            return try SQLiteStore(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds, faults: faults)
        } catch let error as SQLiteError where error.isFull || error.isNotWritable {
            reason = error
        } catch let SQLiteStoreError.file(_, operation, code) where [ENOSPC, EDQUOT, EROFS, EACCES, EPERM].contains(code) {
            reason = SQLiteError(code: code == ENOSPC || code == EDQUOT ? .full : .readOnly,
                                 message: "cannot \(operation) the database file", systemErrno: code)
        }
        guard DatabaseFile.exists(path) else { throw reason }
        let walHoldsCommits = DatabaseFile.size(path + "-wal").map { $0 > 0 } ?? false
        for parameters in ["mode=ro", "mode=ro&readonly_shm=1", walHoldsCommits ? nil : "mode=ro&immutable=1"] {
            guard let parameters else { continue }
            do {
                return try SQLiteStore(readOnlyURI: DatabaseFile.uri(path, parameters), path: path,
                                       busyTimeoutMilliseconds: busyTimeoutMilliseconds, reason: reason)
            } catch {
                // The next way, or the read-write failure: it says why reading-only was needed.
                continue
            }
        }
        throw reason
    }

    private init(readOnlyURI uri: String, path: String, busyTimeoutMilliseconds: Int, reason: SQLiteError) throws {
        let db = try SQLiteConnection(path: uri, flags: SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX)
        do {
            db.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
            try db.executeScript("PRAGMA query_only = ON; PRAGMA trusted_schema = OFF;")
            let found = try Migrator(migrations: Schema.migrations).currentVersion(db)
            if found > Schema.migrations.count {
                throw SQLiteStoreError.schemaTooNew(found: found, supported: Schema.migrations.count)
            }
            if found < Schema.migrations.count {
                // The schema needs an upgrade this connection cannot write: report why it cannot write.
                throw reason
            }
            // The first read is where a missing -shm or WAL shows.
            _ = try db.queryFirst("SELECT count(*) FROM sqlite_schema") { $0.int(0) }
        } catch {
            db.close()
            throw error
        }
        self.seenDataVersion = nil
        self.db = db
        self.path = path
        self.builders = []
        self.now = SystemClock.now
        self.readAccess = .readOnly(reason: reason)
        self.executor = DispatchQueueExecutor(label: "glucose-gateway.store")
    }

    private static func configure(_ db: SQLiteConnection, busyTimeoutMilliseconds: Int, inMemory: Bool) throws {
        db.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
        if !inMemory {
            let mode = try db.queryFirst("PRAGMA journal_mode = WAL") { $0.text(0) } ?? ""
            guard mode.lowercased() == "wal" else {
                throw SQLiteError(code: .error, message: "could not switch the database to WAL (journal mode is \(mode))", sql: "PRAGMA journal_mode = WAL")
            }
        }
        try db.executeScript("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA trusted_schema = OFF;")
    }

    /// Closes the connection and ends the streams of `changes()`. Later calls throw `SQLiteStoreError.closed`.
    public func close() {
        db.close()
        feed.finish()
    }

    /// What this store commits from now on; see `ReadingStore.changes()`. A read-only store emits nothing.
    public nonisolated func changes() -> AsyncStream<StoreChange> {
        feed.stream()
    }

    /// Tells the streams of `changes()` about a commit of this store.
    func committed(_ change: StoreChange) {
        feed.emit(change)
    }

    func openConnection() throws -> SQLiteConnection {
        guard !db.isClosed else { throw SQLiteStoreError.closed }
        return db
    }

    /// Failures to force at the choke point from now on (tests).
    package func injectFaults(_ faults: [SQLiteFault]) {
        db.faults.append(contentsOf: faults)
    }

    /// Runs raw SQL on the store's own connection (tests: pragmas such as `max_page_count`).
    package func executeForTesting(_ sql: String) throws {
        try openConnection().executeScript(sql)
    }

    /// Refuses a database path that is not a regular file or is a symbolic link to nothing, without
    /// touching it (what opening the store checks first); a missing path is fine.
    public static func checkPath(_ path: String) throws(SQLiteStoreError) {
        try DatabaseFile.check(path: path)
    }

    /// The schema version (`PRAGMA user_version`).
    public func schemaVersion() throws -> Int {
        try Migrator(migrations: Schema.migrations).currentVersion(openConnection())
    }

    /// What `quickCheck` found.
    public enum QuickCheckResult: Sendable, Equatable {
        case ok
        /// SQLite's findings (at most 20), or the error that stopped the check on a damaged file.
        case damaged([String])
        /// The time limit passed first; nothing is known.
        case unfinished
    }

    /// `PRAGMA quick_check`: the structure of every table and index page (not index contents), within
    /// `milliseconds`. Reads only.
    public func quickCheck(milliseconds: Int) throws -> QuickCheckResult {
        let db = try openConnection()
        do {
            let rows = try db.withTimeLimit(milliseconds: milliseconds) {
                try db.query("PRAGMA quick_check(20)") { $0.text(0) }
            }
            return rows == ["ok"] ? .ok : .damaged(rows)
        } catch let error as SQLiteError {
            if error.code.primary == ResultCode(rawValue: SQLITE_INTERRUPT) { return .unfinished }
            if error.isCorrupt { return .damaged([error.description]) }
            throw error
        }
    }

    /// `PRAGMA integrity_check`: `["ok"]` on a sound database.
    public func integrityCheck() throws -> [String] {
        try openConnection().query("PRAGMA integrity_check") { $0.text(0) }
    }

    /// True when another connection (another process, or another store on the same file) committed since
    /// the store was opened or since the last call. Writes of this connection never count.
    ///
    /// The file-system event that prompts the question can come from a writer that has written its WAL
    /// frames but not yet published the commit. When nothing new is seen, the write lock is taken and
    /// released at once, which waits (within the busy timeout) for such a writer to finish, and the
    /// question is asked again. A writer holding the lock longer than that counts as a change: a look at
    /// the queue too many costs less than readings left waiting.
    public func changedByOtherProcesses() throws -> Bool {
        let db = try openConnection()
        let before = seenDataVersion
        var version = try Self.dataVersion(db)
        if version == before {
            do throws(SQLiteError) {
                try db.executeScript("BEGIN IMMEDIATE; ROLLBACK;")
            } catch {
                if !db.isAutocommit { try? db.executeScript("ROLLBACK") }
                guard error.isBusy else { throw error }
                return true
            }
            version = try Self.dataVersion(db)
        }
        seenDataVersion = version
        return before != nil && version != before
    }

    private static func dataVersion(_ db: SQLiteConnection) throws -> Int {
        try db.queryFirst("PRAGMA data_version") { $0.int(0) } ?? 0
    }

    // MARK: ReadingStore

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

    // MARK: OutboxStore

    static let claimSQL = "SELECT \(OutboxColumns.list) FROM \(OutboxColumns.tables) WHERE destination = ? AND state = 'pending' ORDER BY outbox.id LIMIT ?"
    static let markInFlightSQL = "UPDATE outbox SET state = 'in_flight', claimed_at = ? WHERE destination = ? AND state = 'pending' AND id <= ?"
    static let acknowledgeSQL = """
        UPDATE outbox SET state = 'acknowledged', acknowledged_at = ?
        WHERE id IN (SELECT value FROM json_each(?)) AND state <> 'acknowledged'
        """
    static let releaseSQL = """
        UPDATE outbox SET state = 'pending', attempts = attempts + 1
        WHERE id IN (SELECT value FROM json_each(?)) AND state = 'in_flight'
        """

    /// Row ids as a JSON array (`[3,4,9]`), the set `json_each` reads in one statement.
    static func idList(_ ids: [Int64]) -> String {
        var text = "["
        text.reserveCapacity(ids.count * 8 + 2)
        for (index, id) in ids.enumerated() {
            if index > 0 { text += "," }
            text += String(id)
        }
        return text + "]"
    }

    /// Marks the claimed rows in flight in a commit without an fsync of its own: `synchronous = NORMAL`
    /// for that one commit, so its WAL frames are written (a crash of the process keeps them) but not
    /// synced. Losing the marker to a power cut is harmless: the rows are pending again, as
    /// `requeueInFlight` makes them after a crash anyway (only the attempt it counts is missing), and the
    /// server deduplicates a re-sent reading. The next FULL commit (the acknowledgement) syncs the WAL,
    /// these frames with it. A checkpoint under NORMAL still syncs the WAL before and the database after.
    public func claimPending(_ destination: DestinationName, limit: Int) throws -> [OutboxItem] {
        guard limit > 0 else { return [] }
        let db = try openConnection()
        let claimedAt = now()
        let claimed = try withoutOwnSync(db) {
            try db.transaction {
                let items = try db.query(Self.claimSQL, [.text(destination.rawValue), .integer(Int64(limit))]) { row in
                    try OutboxColumns.decodeClaimed(row, destination: destination)
                }
                guard let last = items.last else { return [OutboxItem]() }
                // The query took the destination's first pending rows by id, under this transaction's
                // write lock: its pending rows up to the last id taken are exactly those, marked at once.
                try db.execute(Self.markInFlightSQL, [.integer(claimedAt), .text(destination.rawValue), .integer(last.id)])
                guard db.changes == items.count else {
                    throw SQLiteError(code: .error, message: "claimed \(items.count) outbox rows but marked \(db.changes) in flight", sql: Self.markInFlightSQL)
                }
                return items
            }
        }
        if !claimed.isEmpty { committed(.uploads) }
        return claimed
    }

    /// Runs `body`'s commit with `synchronous = NORMAL`, then sets the connection back to FULL whether
    /// `body` threw or not. Every other commit must be durable.
    private func withoutOwnSync<T>(_ db: SQLiteConnection, _ body: () throws -> T) throws -> T {
        try with(db, "PRAGMA synchronous = NORMAL", restoring: "PRAGMA synchronous = FULL", body)
    }

    /// Runs `body` as one transaction without foreign-key enforcement, then turns it on again whether
    /// `body` threw or not. Only for writes that take every reference from rows of their own transaction
    /// (the id just inserted, a meter row read or created first): the checks cost a lookup per row.
    /// (The transaction starts here, not in the caller's closure: Swift 6.0 refuses the nested capture.)
    private func transactionWithoutForeignKeyChecks<T>(_ db: SQLiteConnection, _ body: () throws -> T) throws -> T {
        try with(db, "PRAGMA foreign_keys = OFF", restoring: "PRAGMA foreign_keys = ON") { try db.transaction(body) }
    }

    /// Runs `body` with `setting` in force, then runs `restore` whether `body` threw or not. A connection
    /// that cannot be set back is closed rather than left as `setting` made it.
    private func with<T>(_ db: SQLiteConnection, _ setting: String, restoring restore: String, _ body: () throws -> T) throws -> T {
        try db.execute(setting)
        let result: T
        do {
            result = try body()
        } catch {
            try restoreSetting(db, restore)
            throw error
        }
        try restoreSetting(db, restore)
        return result
    }

    private func restoreSetting(_ db: SQLiteConnection, _ restore: String) throws {
        do {
            try db.execute(restore)
        } catch {
            db.close()
            throw error
        }
    }

    /// Marks rows acknowledged (from any state but acknowledged, whose first time is kept). Unless
    /// `synced`, the commit runs with `synchronous = NORMAL`, as a claim's (see ``OutboxStore``).
    public func acknowledge(_ ids: [Int64], at: UnixMillis, synced: Bool) throws {
        guard !ids.isEmpty else { return }
        let db = try openConnection()
        let mark = {
            try db.transaction {
                try db.execute(Self.acknowledgeSQL, [.integer(at), .text(Self.idList(ids))])
            }
        }
        if synced {
            try mark()
        } else {
            try withoutOwnSync(db, mark)
        }
        committed(.uploads)
    }

    /// In-flight rows back to pending, one attempt more each.
    public func release(_ ids: [Int64]) throws {
        guard !ids.isEmpty else { return }
        let db = try openConnection()
        try db.transaction {
            try db.execute(Self.releaseSQL, [.text(Self.idList(ids))])
        }
        committed(.uploads)
    }

    static let quarantineSQL = """
        UPDATE outbox SET state = 'quarantined', attempts = attempts + 1, quarantined_at = ?, last_answer = ?
        WHERE id = ? AND state <> 'acknowledged'
        """

    /// Sets a row aside with the server's answer, counting the attempt. Acknowledged rows stay acknowledged.
    public func quarantine(_ id: Int64, answer: String) throws {
        try openConnection().execute(Self.quarantineSQL, [.integer(now()), .text(answer), .integer(id)])
        committed(.uploads)
    }

    public func redrive(_ destination: DestinationName) throws -> Int {
        let db = try openConnection()
        let redriven = try db.transaction {
            try db.execute("UPDATE outbox SET state = 'pending' WHERE destination = ? AND state = 'quarantined'", [.text(destination.rawValue)])
            return db.changes
        }
        committed(.uploads)
        return redriven
    }

    static let requeueSQL = "UPDATE outbox SET state = 'pending', attempts = attempts + 1 WHERE state = 'in_flight'"

    /// In-flight rows back to pending, counting an attempt each (their request may have reached the server).
    public func requeueInFlight() throws -> Int {
        let db = try openConnection()
        let requeued = try db.transaction {
            try db.execute(Self.requeueSQL)
            return db.changes
        }
        if requeued > 0 { committed(.uploads) }
        return requeued
    }

    public func counts(_ destination: DestinationName) throws -> OutboxCounts {
        let db = try openConnection()
        // One pass over the destination's rows: a GROUP BY would sort them in a temporary tree first.
        guard let (counts, all) = try db.queryFirst(Self.countsSQL, [.text(destination.rawValue)], { row in
            (OutboxCounts(pending: row.int(0), inFlight: row.int(1), acknowledged: row.int(2), quarantined: row.int(3),
                          oldestUnsent: row.optionalInt64(4)), row.int(5))
        }) else { return OutboxCounts() }
        guard counts.pending + counts.inFlight + counts.acknowledged + counts.quarantined == all else {
            throw SQLiteStoreError.invalidColumn(table: "outbox", column: "state")
        }
        return counts
    }

    /// The destination's pending, in-flight and quarantined rows and the oldest unsent, read through the
    /// `outbox_pending` and `outbox_held` indexes: as cheap with years of acknowledged history as without.
    /// `acknowledged` is not counted (0).
    public func unsentCounts(_ destination: DestinationName) throws -> OutboxCounts {
        try openConnection().queryFirst(Self.unsentCountsSQL, [.text(destination.rawValue)]) { row in
            OutboxCounts(pending: row.int(0), inFlight: row.int(1), quarantined: row.int(2), oldestUnsent: row.optionalInt64(3))
        } ?? OutboxCounts()
    }

    static let unsentCountsSQL = """
        SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'in_flight'),
               count(*) FILTER (WHERE state = 'quarantined'),
               min(created_at) FILTER (WHERE state = 'pending' OR state = 'in_flight')
        FROM (SELECT state, created_at FROM outbox WHERE destination = ?1 AND state = 'pending'
              UNION ALL
              SELECT state, created_at FROM outbox WHERE destination = ?1 AND (state = 'in_flight' OR state = 'quarantined'))
        """

    static let countsSQL = """
        SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'in_flight'),
               count(*) FILTER (WHERE state = 'acknowledged'), count(*) FILTER (WHERE state = 'quarantined'),
               min(created_at) FILTER (WHERE state = 'pending' OR state = 'in_flight'), count(*)
        FROM outbox WHERE destination = ?
        """

    public func saveDestinationState(_ state: DestinationState) throws {
        try openConnection().execute("""
            INSERT INTO destination_state (destination, state, last_error_code, last_error_message, last_error_at, last_success_at)
            VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (destination) DO UPDATE SET
                state = excluded.state, last_error_code = excluded.last_error_code,
                last_error_message = excluded.last_error_message, last_error_at = excluded.last_error_at,
                last_success_at = excluded.last_success_at
            """, [
                .text(state.destination.rawValue), .text(state.state.rawValue), SQLiteValue(state.lastErrorCode),
                SQLiteValue(state.lastErrorMessage), SQLiteValue(state.lastErrorAt), SQLiteValue(state.lastSuccessAt),
            ])
        committed(.uploads)
    }

    public func destinationState(_ destination: DestinationName) throws -> DestinationState? {
        try openConnection().queryFirst("""
            SELECT state, last_error_code, last_error_message, last_error_at, last_success_at
            FROM destination_state WHERE destination = ?
            """, [.text(destination.rawValue)]) { row in
            var state = DestinationState(destination: destination, state: UploadState(rawValue: row.text(0)))
            state.lastErrorCode = row.optionalInt(1)
            state.lastErrorMessage = row.optionalText(2)
            state.lastErrorAt = row.optionalInt64(3)
            state.lastSuccessAt = row.optionalInt64(4)
            return state
        }
    }
}

extension SQLiteStore {
    /// The connection's journal mode, synchronous level and foreign-key switch (tests).
    /// Rows `PRAGMA foreign_key_check` reports: references to rows that do not exist.
    package func foreignKeyViolationsForTesting() throws -> Int {
        try openConnection().query("PRAGMA foreign_key_check") { _ in 1 }.count
    }

    package func pragmaValuesForTesting() throws -> [String: String] {
        let db = try openConnection()
        var values: [String: String] = [:]
        for name in ["journal_mode", "synchronous", "foreign_keys"] {
            values[name] = try db.queryFirst("PRAGMA \(name)") { $0.text(0) }
        }
        return values
    }

    /// Pages in the database file (tests: to set `max_page_count` just above it).
    package func pageCountForTesting() throws -> Int {
        try openConnection().queryFirst("PRAGMA page_count") { $0.int(0) } ?? 0
    }
}

extension SQLiteStore {
    /// The plan SQLite chooses for the claim query (tests: the queue must be read through its index).
    package func claimQueryPlanForTesting() throws -> [String] {
        try openConnection().query("EXPLAIN QUERY PLAN " + Self.claimSQL, [.text("nightscout"), .integer(1)]) { $0.text(3) }
    }

    /// The plans of the statements that mark claimed rows in flight, acknowledge and release rows (tests:
    /// each must reach its rows through an index, never by scanning the history).
    package func outboxUpdatePlansForTesting() throws -> [String: [String]] {
        let db = try openConnection()
        return [
            "in_flight": try db.query("EXPLAIN QUERY PLAN " + Self.markInFlightSQL, [.integer(1), .text("nightscout"), .integer(1)]) { $0.text(3) },
            "acknowledge": try db.query("EXPLAIN QUERY PLAN " + Self.acknowledgeSQL, [.integer(1), .text("[1]")]) { $0.text(3) },
            "release": try db.query("EXPLAIN QUERY PLAN " + Self.releaseSQL, [.text("[1]")]) { $0.text(3) },
            "requeue": try db.query("EXPLAIN QUERY PLAN " + Self.requeueSQL) { $0.text(3) },
            "unsent counts": try db.query("EXPLAIN QUERY PLAN " + Self.unsentCountsSQL, [.text("nightscout")]) { $0.text(3) },
        ]
    }

    /// Every outbox row's state, attempts and times, by id (tests).
    package func outboxRowsForTesting() throws -> [OutboxRowForTesting] {
        try openConnection().query("""
            SELECT id, destination, state, attempts, claimed_at, acknowledged_at, quarantined_at FROM outbox ORDER BY id
            """) { row in
            OutboxRowForTesting(id: row.int64(0), destination: row.text(1), state: row.text(2), attempts: row.int(3),
                                claimedAt: row.optionalInt64(4), acknowledgedAt: row.optionalInt64(5), quarantinedAt: row.optionalInt64(6))
        }
    }
}

/// One outbox row's bookkeeping as stored (tests).
package struct OutboxRowForTesting: Sendable, Equatable {
    package var id: Int64
    package var destination: String
    package var state: String
    package var attempts: Int
    package var claimedAt: Int64?
    package var acknowledgedAt: Int64?
    package var quarantinedAt: Int64?
}

extension SQLiteStore {
    /// The bytes kept in `conflicting_record` for a meter, oldest first (tests).
    package func conflictingRecordsForTesting(_ meter: String) throws -> [(sequence: Int, time: String, measurement: [UInt8], context: [UInt8]?)] {
        try openConnection().query(
            "SELECT sequence, user_facing_time, raw_measurement, raw_context FROM conflicting_record WHERE meter = ? ORDER BY id",
            [.text(meter)]
        ) { ($0.int(0), $0.text(1), $0.blob(2), $0.optionalBlob(3)) }
    }
}

extension SQLiteStore {
    /// The value for `key` on the queue the store's work runs on (tests: which queue that is).
    package func queueSpecificForTesting<T: Sendable>(_ key: DispatchSpecificKey<T>) -> T? {
        DispatchQueue.getSpecific(key: key)
    }
}

extension SQLiteStore {
    /// The opcodes of `sql` as SQLite compiles it on this connection (tests: which statements build
    /// temporary tables). The statement is compiled only, never run.
    package func opcodesForTesting(_ sql: String) throws -> [String] {
        try openConnection().query("EXPLAIN " + sql) { $0.text(1) }
    }
}
