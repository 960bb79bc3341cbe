import CSQLite

/// A value bound to or read from a statement.
enum SQLiteValue {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    init(_ value: Int?) { self = value.map { .integer(Int64($0)) } ?? .null }
    init(_ value: Int64?) { self = value.map { .integer($0) } ?? .null }
    init(_ value: Double?) { self = value.map { .real($0) } ?? .null }
    init(_ value: String?) { self = value.map { .text($0) } ?? .null }
    init(_ value: [UInt8]?) { self = value.map { .blob($0) } ?? .null }
}

/// A prepared statement, owned by its connection's cache.
final class SQLiteStatement {
    private(set) var handle: SQLiteStatementHandle?
    let sql: String
    /// Unowned and unchecked: the connection's cache is the statement's only owner, and `close()` finalizes
    /// every statement before the connection goes, so a statement never outlives its connection in use.
    unowned(unsafe) let connection: SQLiteConnection

    init(_ handle: SQLiteStatementHandle, sql: String, connection: SQLiteConnection) {
        self.handle = handle
        self.sql = sql
        self.connection = connection
    }

    func finalize() {
        if let handle { sqlite3_finalize(handle) }
        handle = nil
    }

    /// Ends the current run and drops the bindings, so the statement holds no lock while cached.
    func reset() {
        guard let handle else { return }
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Runs `body` (which binds and steps this statement), then `reset()`s whether `body` threw or not.
    /// For actor-isolated callers: Swift 6.0.3 crashes on a `defer` there that uses a captured statement.
    func resetting<T>(_ body: () throws -> T) rethrows -> T {
        defer { reset() }
        return try body()
    }

    private func live() throws(SQLiteError) -> SQLiteStatementHandle {
        guard let handle else { throw SQLiteError(code: .misuse, message: "statement is finalized", sql: sql) }
        return handle
    }

    /// Binds values to parameters 1...n.
    func bind(_ values: [SQLiteValue]) throws(SQLiteError) {
        var index: Int32 = 1
        for value in values {
            try bind(value, at: index)
            index += 1
        }
    }

    func bind(_ value: SQLiteValue, at index: Int32) throws(SQLiteError) {
        let handle = try live()
        if _slowPath(connection.hasFaults) { try connection.forcedFailure(.bind, sql: sql) }
        let rc: Int32
        switch value {
        case .null:
            rc = sqlite3_bind_null(handle, index)
        case let .integer(number):
            rc = sqlite3_bind_int64(handle, index, number)
        case let .real(number):
            rc = sqlite3_bind_double(handle, index, number)
        case let .text(string):
            var string = string
            rc = string.withUTF8 { buffer in
                // An empty buffer may have no address; SQLite reads a null pointer as NULL, so give it "".
                guard let base = buffer.baseAddress else { return sqlite3_bind_text(handle, index, "", 0, csqlite_transient()) }
                return base.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                    // The 64-bit length never traps; SQLite answers SQLITE_TOOBIG past its own limit.
                    sqlite3_bind_text64(handle, index, $0, UInt64(buffer.count), csqlite_transient(), UInt8(SQLITE_UTF8))
                }
            }
        case let .blob(bytes):
            rc = bytes.withUnsafeBytes { buffer in
                // A zero-length blob must stay a blob, not become NULL.
                guard let base = buffer.baseAddress, buffer.count > 0 else { return sqlite3_bind_zeroblob(handle, index, 0) }
                return sqlite3_bind_blob64(handle, index, base, UInt64(buffer.count), csqlite_transient())
            }
        }
        // The second half of the choke point; the SQL is only read on failure.
        if _slowPath(rc != SQLITE_OK) { try connection.check(rc, sql: sql) }
    }

    /// One step: true when a row is available, false when done.
    func step() throws(SQLiteError) -> Bool {
        let handle = try live()
        if _slowPath(connection.hasFaults) { try connection.forcedFailure(.step, sql: sql) }
        let rc = sqlite3_step(handle)
        if _fastPath(rc == SQLITE_DONE) { return false }
        if rc == SQLITE_ROW { return true }
        try connection.check(rc, sql: sql)
        return false
    }

    // MARK: Columns of the current row

    func isNull(_ column: Int32) -> Bool {
        guard let handle else { return true }
        return sqlite3_column_type(handle, column) == SQLITE_NULL
    }

    func int64(_ column: Int32) -> Int64 {
        guard let handle else { return 0 }
        return sqlite3_column_int64(handle, column)
    }

    func int(_ column: Int32) -> Int { Int(int64(column)) }

    func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }
    func optionalInt(_ column: Int32) -> Int? { isNull(column) ? nil : int(column) }

    func double(_ column: Int32) -> Double {
        guard let handle else { return 0 }
        return sqlite3_column_double(handle, column)
    }

    func optionalDouble(_ column: Int32) -> Double? { isNull(column) ? nil : double(column) }

    func optionalText(_ column: Int32) -> String? {
        guard let handle, !isNull(column), let text = sqlite3_column_text(handle, column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    func text(_ column: Int32) -> String { optionalText(column) ?? "" }

    func optionalBlob(_ column: Int32) -> [UInt8]? {
        guard let handle, !isNull(column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let bytes = sqlite3_column_blob(handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: bytes, count: count))
    }

    func blob(_ column: Int32) -> [UInt8] { optionalBlob(column) ?? [] }
}

@available(*, unavailable)
extension SQLiteStatement: Sendable {}
