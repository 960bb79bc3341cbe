#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The database holds health data: the file, its `-wal` and `-shm` companions are mode 0600.
///
/// SQLite creates `-wal` and `-shm` with the permissions of the main file, so creating the main file
/// 0600 before SQLite first opens it is what keeps the companions private; files left looser by an
/// earlier run are tightened here too. The process umask is not touched: it is shared by every thread.
enum DatabaseFile {
    static let mode: mode_t = 0o600

    static func prepare(path: String) throws(SQLiteStoreError) {
        try createParentDirectories(of: path)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, mode)
        guard fd >= 0 else { throw .file(path: path, operation: "create", errno: errno) }
        defer { close(fd) }
        try restrict(fd: fd, path: path)
        for suffix in ["-wal", "-shm", "-journal"] {
            let companion = path + suffix
            let fd = open(companion, O_RDWR | O_CLOEXEC)
            if fd < 0 { continue }
            defer { close(fd) }
            try restrict(fd: fd, path: companion)
        }
    }

    private static func restrict(fd: Int32, path: String) throws(SQLiteStoreError) {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .file(path: path, operation: "inspect", errno: errno) }
        if info.st_mode & 0o077 != 0 {
            guard fchmod(fd, mode) == 0 else { throw .file(path: path, operation: "restrict to mode 0600", errno: errno) }
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

/// Wall-clock time in milliseconds since the Unix epoch.
@Sendable
public func systemMillis() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}
