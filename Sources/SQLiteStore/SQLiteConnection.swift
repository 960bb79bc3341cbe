#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import GatewayCore
import Support

/// The raw handle types, named so signatures say what they hold.
typealias SQLiteHandle = OpaquePointer
typealias SQLiteStatementHandle = OpaquePointer

/// The libsqlite3 calls that can fail, as named by the fault injector.
package enum SQLiteOperation: String, Sendable, CaseIterable {
    case open, prepare, bind, step, exec
}

/// A failure a test asks the choke point to produce instead of calling SQLite.
package struct SQLiteFault: Sendable {
    package var operation: SQLiteOperation
    /// Only statements whose SQL contains this text; nil for any.
    package var sqlContains: String?
    package var code: ResultCode
    /// How many matching calls pass before the first forced failure.
    package var skip: Int
    /// How many failures to force; nil for every matching call from then on.
    package var count: Int?

    package init(_ operation: SQLiteOperation, sqlContains: String? = nil, code: ResultCode, skip: Int = 0, count: Int? = 1) {
        self.operation = operation
        self.sqlContains = sqlContains
        self.code = code
        self.skip = skip
        self.count = count
    }
}

/// Process-wide SQLite settings, applied once before the first connection opens. Memory statistics are
/// off: the store never reads them, and they serialize every allocation behind one global mutex.
private let libraryConfigured: Bool = {
    _ = csqlite_disable_memory_statistics()
    return true
}()

/// One connection to a database file. Owns the `sqlite3*` and its prepared statements.
///
/// Not Sendable: it is confined to the `SQLiteStore` actor, whose executor is one serial queue, which is
/// why it is opened with `SQLITE_OPEN_NOMUTEX` (multi-thread mode: one thread at a time per connection).
final class SQLiteConnection {
    private(set) var handle: SQLiteHandle?
    private var statements: [String: SQLiteStatement] = [:]
    /// Failures to force at the choke point, in order of priority.
    var faults: [SQLiteFault] = [] {
        didSet { hasFaults = !faults.isEmpty }
    }
    /// `!faults.isEmpty`, kept as a plain flag for the per-parameter fast path.
    private(set) var hasFaults = false
    let path: String

    /// Opens (creating when missing) the database at `path`. A handle SQLite returns on a failed open is
    /// closed before throwing.
    init(path: String, flags: Int32 = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, faults: [SQLiteFault] = []) throws(SQLiteError) {
        self.path = path
        self.faults = faults
        self.hasFaults = !faults.isEmpty
        _ = libraryConfigured
        var raw: SQLiteHandle?
        if let forced = Self.takeFault(&self.faults, .open, sql: nil) {
            throw SQLiteError(code: forced, message: forced.explanation)
        }
        let rc = sqlite3_open_v2(path, &raw, flags, nil)
        guard rc == SQLITE_OK, let raw else {
            let message = raw.map { String(cString: sqlite3_errmsg($0)) } ?? ResultCode(rawValue: rc).explanation
            let extended = raw.map { sqlite3_extended_errcode($0) } ?? rc
            let systemErrno = raw.map { sqlite3_system_errno($0) } ?? 0
            if let raw { sqlite3_close_v2(raw) }
            throw SQLiteError(code: ResultCode(rawValue: extended), message: message, systemErrno: systemErrno)
        }
        handle = raw
        sqlite3_extended_result_codes(raw, 1)
    }

    deinit {
        // Owners close explicitly; this only catches a store dropped without `close()`, so the file is
        // never left with an open handle and unfinalized statements.
        close()
    }

    /// Finalizes every prepared statement and closes the handle. Safe to call twice.
    func close() {
        for statement in statements.values { statement.finalize() }
        statements.removeAll()
        if let handle {
            sqlite3_close_v2(handle)
            self.handle = nil
        }
    }

    var isClosed: Bool { handle == nil }

    /// How long a statement waits for another connection's lock before failing with `SQLITE_BUSY`.
    func setBusyTimeout(milliseconds: Int) {
        guard let handle else { return }
        sqlite3_busy_timeout(handle, Int32(clamping: max(0, milliseconds)))
    }

    // MARK: The choke point

    /// Every fallible call into libsqlite3 goes through here: a forced fault is thrown instead of the call,
    /// a real failure is turned into a `SQLiteError` with SQLite's own message. Returns the success code
    /// (`SQLITE_OK`, `SQLITE_ROW` or `SQLITE_DONE`).
    @discardableResult
    func call(_ operation: SQLiteOperation, sql: String?, _ body: () -> Int32) throws(SQLiteError) -> Int32 {
        try forcedFailure(operation, sql: sql)
        return try check(body(), sql: sql)
    }

    /// The first half of the choke point, for calls made inside a non-throwing closure: throws the fault a
    /// test asked for, if any. Follow the C call with `check`.
    @inline(__always)
    func forcedFailure(_ operation: SQLiteOperation, sql: String?) throws(SQLiteError) {
        if _slowPath(hasFaults), let forced = Self.takeFault(&faults, operation, sql: sql) {
            throw SQLiteError(code: forced, message: forced.explanation, sql: sql)
        }
    }

    /// The second half of the choke point: a C result code to its success code, or a `SQLiteError`.
    @discardableResult
    func check(_ rc: Int32, sql: String?) throws(SQLiteError) -> Int32 {
        switch rc {
        case SQLITE_OK, SQLITE_ROW, SQLITE_DONE:
            return rc
        default:
            throw lastError(rc, sql: sql)
        }
    }

    private static func takeFault(_ faults: inout [SQLiteFault], _ operation: SQLiteOperation, sql: String?) -> ResultCode? {
        for index in faults.indices where faults[index].operation == operation {
            if let needle = faults[index].sqlContains {
                guard let sql, sql.containsBytes(needle) else { continue }
            }
            if faults[index].skip > 0 {
                faults[index].skip -= 1
                return nil
            }
            let code = faults[index].code
            if let remaining = faults[index].count {
                if remaining <= 1 { faults.remove(at: index) } else { faults[index].count = remaining - 1 }
            }
            return code
        }
        return nil
    }

    func lastError(_ rc: Int32, sql: String?) -> SQLiteError {
        guard let handle else {
            return SQLiteError(code: ResultCode(rawValue: rc), message: ResultCode(rawValue: rc).explanation, sql: sql)
        }
        let extended = sqlite3_extended_errcode(handle)
        // The connection's last error belongs to this call when their primary codes agree.
        let code = (extended & 0xff) == (rc & 0xff) ? extended : rc
        let message = String(cString: sqlite3_errmsg(handle))
        // The errno belongs to this failure only for I/O-level codes; others leave an older one behind.
        let primary = code & 0xff
        let systemErrno = primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_FULL || primary == SQLITE_READONLY
            ? sqlite3_system_errno(handle) : 0
        return SQLiteError(code: ResultCode(rawValue: code), message: message, sql: sql, systemErrno: systemErrno)
    }

    private func requireHandle(sql: String?) throws(SQLiteError) -> SQLiteHandle {
        guard let handle else {
            throw SQLiteError(code: .misuse, message: "database connection is closed", sql: sql)
        }
        return handle
    }

    // MARK: Statements

    /// The cached prepared statement for `sql` (one statement, no trailing SQL), reset and unbound.
    func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        if let cached = statements[sql] { return cached }
        let handle = try requireHandle(sql: sql)
        var raw: SQLiteStatementHandle?
        try call(.prepare, sql: sql) { sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil) }
        guard let raw else {
            throw SQLiteError(code: .misuse, message: "no statement in SQL", sql: sql)
        }
        let statement = SQLiteStatement(raw, sql: sql, connection: self)
        statements[sql] = statement
        return statement
    }

    /// Runs one statement with bound values, ignoring any rows.
    func execute(_ sql: String, _ values: [SQLiteValue] = []) throws(SQLiteError) {
        let statement = try self.statement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        while try statement.step() {}
    }

    /// Runs one or more statements without bound values (schema, pragmas, transaction control).
    func executeScript(_ sql: String) throws(SQLiteError) {
        let handle = try requireHandle(sql: sql)
        var errorMessage: UnsafeMutablePointer<CChar>?
        defer { if let errorMessage { sqlite3_free(errorMessage) } }
        try forcedFailure(.exec, sql: sql)
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        guard rc == SQLITE_OK else {
            var error = lastError(rc, sql: sql)
            if let errorMessage { error.message = String(cString: errorMessage) }
            throw error
        }
    }

    /// Runs a query and maps each row.
    func query<T>(_ sql: String, _ values: [SQLiteValue] = [], _ row: (SQLiteStatement) throws -> T) throws -> [T] {
        let statement = try self.statement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        var rows: [T] = []
        while try statement.step() { rows.append(try row(statement)) }
        return rows
    }

    /// The first row of a query, mapped, or nil.
    func queryFirst<T>(_ sql: String, _ values: [SQLiteValue] = [], _ row: (SQLiteStatement) throws -> T) throws -> T? {
        let statement = try self.statement(sql)
        defer { statement.reset() }
        try statement.bind(values)
        guard try statement.step() else { return nil }
        return try row(statement)
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { handle.map { Int(sqlite3_changes($0)) } ?? 0 }
    var lastInsertRowID: Int64 { handle.map { sqlite3_last_insert_rowid($0) } ?? 0 }
    /// False while a transaction is open.
    var isAutocommit: Bool { handle.map { sqlite3_get_autocommit($0) != 0 } ?? true }

    // MARK: Time limit

    /// Runs `body`, interrupting its statements (SQLITE_INTERRUPT) once `milliseconds` have passed.
    func withTimeLimit<T>(milliseconds: Int, _ body: () throws -> T) rethrows -> T {
        guard let handle else { return try body() }
        let deadline = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
        deadline.initialize(to: monotonicNanoseconds() + UInt64(max(0, milliseconds)) * 1_000_000)
        defer {
            sqlite3_progress_handler(handle, 0, nil, nil)
            deadline.deallocate()
        }
        // Called every 1000 virtual-machine steps on this thread; `deadline` outlives the body.
        sqlite3_progress_handler(handle, 1000, { context in
            guard let context else { return 0 }
            return monotonicNanoseconds() > context.load(as: UInt64.self) ? 1 : 0
        }, deadline)
        return try body()
    }

    // MARK: Transactions

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction (the write lock is taken up front, so two writers
    /// wait on the busy timeout instead of failing at their first write). Commits when `body` returns,
    /// rolls back when it throws and rethrows that first error; a failing rollback never replaces it.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        let result: T
        do {
            result = try body()
            try execute("COMMIT")
        } catch {
            if !isAutocommit { try? executeScript("ROLLBACK") }
            throw error
        }
        return result
    }
}

@available(*, unavailable)
extension SQLiteConnection: Sendable {}

private func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}
