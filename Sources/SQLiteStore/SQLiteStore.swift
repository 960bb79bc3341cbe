#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import Dispatch
import GatewayCore
import Support

/// The gateway's database: meters, readings, the upload outbox, destination state and the event log,
/// in one SQLite file (WAL, `synchronous=FULL`, foreign keys on, mode 0600).
///
/// An actor over one connection. Its executor is a private serial dispatch queue, so the connection and
/// its statements never leave one thread at a time and blocking I/O stays off the cooperative pool.
/// Only Swift values cross the actor boundary.
public actor SQLiteStore: ReadingStore, OutboxStore {
    private let executor: DispatchQueueExecutor
    private let db: SQLiteConnection
    let builders: [any OutboxBodyBuilder]
    let now: @Sendable () -> UnixMillis
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

    // MARK: Commit settings

    /// Runs `body`'s commit with `synchronous = NORMAL`, then sets the connection back to FULL whether
    /// `body` threw or not. Every other commit must be durable.
    func withoutOwnSync<T>(_ db: SQLiteConnection, _ body: () throws -> T) throws -> T {
        try with(db, "PRAGMA synchronous = NORMAL", restoring: "PRAGMA synchronous = FULL", body)
    }

    /// Runs `body` as one transaction without foreign-key enforcement, then turns it on again whether
    /// `body` threw or not. Only for writes that take every reference from rows of their own transaction
    /// (the id just inserted, a meter row read or created first): the checks cost a lookup per row.
    /// (The transaction starts here, not in the caller's closure: Swift 6.0 refuses the nested capture.)
    func transactionWithoutForeignKeyChecks<T>(_ db: SQLiteConnection, _ body: () throws -> T) throws -> T {
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
}
