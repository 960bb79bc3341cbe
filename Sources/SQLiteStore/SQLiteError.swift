import CSQLite

/// A SQLite result code, primary or extended. Open set: codes this program has no name for survive.
/// The corresponding C values are the `SQLITE_*` result codes.
public struct ResultCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The primary code (low eight bits) of an extended code.
    public var primary: ResultCode { ResultCode(rawValue: rawValue & 0xff) }

    public static let error = ResultCode(rawValue: SQLITE_ERROR)
    public static let abort = ResultCode(rawValue: SQLITE_ABORT)
    public static let busy = ResultCode(rawValue: SQLITE_BUSY)
    public static let locked = ResultCode(rawValue: SQLITE_LOCKED)
    public static let noMemory = ResultCode(rawValue: SQLITE_NOMEM)
    public static let readOnly = ResultCode(rawValue: SQLITE_READONLY)
    public static let ioError = ResultCode(rawValue: SQLITE_IOERR)
    public static let corrupt = ResultCode(rawValue: SQLITE_CORRUPT)
    public static let full = ResultCode(rawValue: SQLITE_FULL)
    public static let cannotOpen = ResultCode(rawValue: SQLITE_CANTOPEN)
    public static let constraint = ResultCode(rawValue: SQLITE_CONSTRAINT)
    public static let misuse = ResultCode(rawValue: SQLITE_MISUSE)
    public static let notADatabase = ResultCode(rawValue: SQLITE_NOTADB)

    /// A primary code matches every extended code built on it: `case .busy:` catches `SQLITE_BUSY_SNAPSHOT`.
    public static func ~= (pattern: ResultCode, code: ResultCode) -> Bool {
        if pattern.rawValue & ~0xff == 0 { return pattern.rawValue == code.primary.rawValue }
        return pattern == code
    }

    /// SQLite's English name for the code, e.g. "database is locked".
    public var explanation: String { String(cString: sqlite3_errstr(rawValue)) }

    public var description: String {
        switch primary {
        case .busy: "SQLITE_BUSY(\(rawValue))"
        case .locked: "SQLITE_LOCKED(\(rawValue))"
        case .full: "SQLITE_FULL(\(rawValue))"
        case .ioError: "SQLITE_IOERR(\(rawValue))"
        case .corrupt: "SQLITE_CORRUPT(\(rawValue))"
        case .constraint: "SQLITE_CONSTRAINT(\(rawValue))"
        case .cannotOpen: "SQLITE_CANTOPEN(\(rawValue))"
        case .readOnly: "SQLITE_READONLY(\(rawValue))"
        case .notADatabase: "SQLITE_NOTADB(\(rawValue))"
        default: "SQLite code \(rawValue)"
        }
    }
}

/// An error from libsqlite3: the extended result code, SQLite's message, the SQL that failed, and the
/// operating system's errno behind an I/O error. Bound values are never kept: they are health data.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public var code: ResultCode
    public var message: String
    /// The statement that failed, nil for errors outside a statement (open, close).
    public var sql: String?
    /// `sqlite3_system_errno` after the failure (ENOSPC behind a disk I/O error), 0 when none.
    public var systemErrno: Int32

    public init(code: ResultCode, message: String, sql: String? = nil, systemErrno: Int32 = 0) {
        self.code = code
        self.message = message
        self.sql = sql
        self.systemErrno = systemErrno
    }

    /// True when another connection held the lock longer than the busy timeout.
    public var isBusy: Bool { code.primary == .busy || code.primary == .locked }
    /// True when the disk (or the database's page limit) is full: `SQLITE_FULL`, or an I/O error whose
    /// cause was ENOSPC or EDQUOT (a full disk fails the `-shm` file's growth as SQLITE_IOERR_SHMSIZE).
    public var isFull: Bool { code.primary == .full || systemErrno == ENOSPC || systemErrno == EDQUOT }
    /// True when the file or its directory cannot be written: a read-only file system, or no permission.
    public var isNotWritable: Bool {
        guard !isFull else { return false }
        if code.primary == .readOnly { return true }
        switch code.primary {
        case .cannotOpen, .ioError, .error: return systemErrno == EROFS || systemErrno == EACCES || systemErrno == EPERM
        default: return false
        }
    }
    /// The operating system's words for `systemErrno`, nil when there is none.
    public var systemErrorText: String? { systemErrno == 0 ? nil : errnoString(systemErrno) }

    /// True when SQLite found the file damaged.
    public var isCorrupt: Bool { code.primary == .corrupt || code.primary == .notADatabase }

    /// One line, fit for a command's stderr: what went wrong, the code, and the statement if any.
    public var description: String {
        var line: String
        if isBusy {
            line = "database is locked by another process (\(message))"
        } else if isFull {
            line = "disk full: the change was not written, what was stored before is kept (\(message))"
        } else if isNotWritable {
            line = "database cannot be written" + (systemErrno == 0 ? "" : ": " + errnoString(systemErrno)) + " (\(message))"
        } else {
            line = message
        }
        line += " [\(code)]"
        if let sql { line += " in: " + Self.oneLine(sql) }
        return line
    }

    /// `text` on one line, whitespace runs as one space, at most 160 characters.
    public static func oneLine(_ sql: String) -> String {
        var out = ""
        var lastWasSpace = false
        for ch in sql {
            if ch.isWhitespace {
                if !lastWasSpace && !out.isEmpty { out.append(" ") }
                lastWasSpace = true
            } else {
                out.append(ch)
                lastWasSpace = false
            }
        }
        if out.hasSuffix(" ") { out.removeLast() }
        if out.count > 160 { out = String(out.prefix(157)) + "..." }
        return out
    }
}

/// Errors of the store that are not SQLite's own.
public enum SQLiteStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The database file could not be created or opened by the operating system.
    case file(path: String, operation: String, errno: Int32)
    /// The database was written by a newer version of the gateway.
    case schemaTooNew(found: Int, supported: Int)
    /// A stored column holds a value this version cannot read.
    case invalidColumn(table: String, column: String)
    /// The store was closed.
    case closed
    /// The database path names something that is not a regular file (a directory, a device, a socket).
    case notAFile(path: String, kind: String)
    /// The database path is a symbolic link whose target does not exist.
    case danglingLink(path: String, target: String)
    /// `PRAGMA user_version` holds a negative number: not a schema this program (or any) wrote.
    case schemaInvalid(found: Int)

    public var description: String {
        switch self {
        case let .file(path, operation, errno):
            "cannot \(operation) database file \(path): \(errnoString(errno))"
        case let .schemaTooNew(found, supported):
            "database schema version \(found) is newer than this program supports (\(supported)); upgrade glucose-gateway"
        case let .invalidColumn(table, column):
            "database holds an unreadable value in \(table).\(column)"
        case .closed:
            "database is closed"
        case let .notAFile(path, kind):
            "database \(path) is \(kind), not a database file; set [gateway] database to a file path"
        case let .danglingLink(path, target):
            "database \(path) is a symbolic link to \(target), which does not exist"
        case let .schemaInvalid(found):
            "database schema version \(found) is invalid (negative): the file was not written by glucose-gateway or is damaged; nothing was changed"
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

func errnoString(_ code: Int32) -> String {
    guard let text = strerror(code) else { return "errno \(code)" }
    return String(cString: text)
}
