#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Support

/// The database holds health data: the file, its `-wal` and `-shm` companions are mode 0600.
///
/// SQLite creates `-wal` and `-shm` with the permissions of the main file, so creating the main file
/// 0600 before SQLite first opens it is what keeps the companions private; files left looser by an
/// earlier run are tightened here too. The process umask is not touched: it is shared by every thread.
enum DatabaseFile {
    static let mode: mode_t = 0o600

    /// Files are inspected and tightened by path (`stat`, `chmod`), never opened once the database may be
    /// open in this process: closing any descriptor of a file drops every POSIX lock the process holds on
    /// it, and SQLite's lock on `-shm` is what stops another process from deleting the live WAL.
    static func prepare(path: String) throws(SQLiteStoreError) {
        try check(path: path)
        try createParentDirectories(of: path)
        var info = stat()
        if stat(path, &info) != 0 {
            guard errno == ENOENT else { throw .file(path: path, operation: "inspect", errno: errno) }
            let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode)
            if fd >= 0 {
                close(fd)
            } else if errno != EEXIST {
                throw .file(path: path, operation: "create", errno: errno)
            }
        }
        try restrict(path: path)
        for suffix in ["-wal", "-shm", "-journal"] {
            try restrict(path: path + suffix)
        }
    }

    /// Refuses, without touching anything, a path that is not a regular file (a directory would otherwise
    /// be chmod 0600 and SQLite would then fail on it) or a symbolic link to nothing (SQLite would create
    /// its target, or fail where the target's directory is missing). A missing path is fine: it is created.
    static func check(path: String) throws(SQLiteStoreError) {
        var info = stat()
        if stat(path, &info) == 0 {
            let type = info.st_mode & S_IFMT
            guard type == S_IFREG else { throw .notAFile(path: path, kind: kindName(type)) }
            return
        }
        guard errno == ENOENT else { return }
        var link = stat()
        guard lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK else { return }
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buffer, buffer.count - 1)
        let target = n > 0 ? String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        throw .danglingLink(path: path, target: target)
    }

    private static func kindName(_ type: mode_t) -> String {
        switch type {
        case S_IFDIR: "a directory"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFIFO: "a named pipe"
        case S_IFSOCK: "a socket"
        default: "not a regular file"
        }
    }

    /// SQLite reports a file it cannot create or write (a read-only file system, a directory this user may
    /// not write) as "unable to open database file" or a disk I/O error, often with the errno of a later
    /// attempt (ENOENT). When the database or its directory is not writable, the error gets that errno,
    /// so it can say why.
    static func explain(_ error: SQLiteError, path: String) -> SQLiteError {
        guard !error.isFull else { return error }
        switch error.code.primary {
        case .cannotOpen, .ioError, .readOnly: break
        default: return error
        }
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        var explained = error
        if access(directory, W_OK) != 0 || (exists(path) && access(path, W_OK) != 0) {
            explained.systemErrno = errno
        }
        return explained
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0
    }

    /// The size of a file in bytes, nil when it does not exist.
    static func size(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }

    /// A `file:` URI for SQLite naming `path`, with query `parameters` (characters SQLite's URI parser
    /// would take for syntax are percent-encoded).
    static func uri(_ path: String, _ parameters: String) -> String {
        var out = "file:"
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "%"), UInt8(ascii: "?"), UInt8(ascii: "#"), 0..<0x21, 0x7f...:
                out += "%" + hexString([byte], uppercase: true)
            default:
                out += String(decoding: [byte], as: UTF8.self)
            }
        }
        return out + "?" + parameters
    }

    private static func restrict(path: String) throws(SQLiteStoreError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return }
            throw .file(path: path, operation: "inspect", errno: errno)
        }
        if info.st_mode & 0o077 != 0 {
            guard chmod(path, mode) == 0 else { throw .file(path: path, operation: "restrict to mode 0600", errno: errno) }
        }
    }

    /// Missing parent directories are created 0700.
    private static func createParentDirectories(of path: String) throws(SQLiteStoreError) {
        var components = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard components.count > 1 else { return }
        components.removeLast()
        var current = path.hasPrefix("/") ? "" : "."
        for component in components where !component.isEmpty {
            current += "/" + component
            var info = stat()
            if stat(current, &info) == 0 { continue }
            if mkdir(current, 0o700) != 0 && errno != EEXIST {
                throw .file(path: path, operation: "create the directory of", errno: errno)
            }
        }
    }
}
