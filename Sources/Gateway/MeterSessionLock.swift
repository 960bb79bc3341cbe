#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One process talks to a meter at a time: a manual `sync` and the daemon must not both run RACP
/// procedures on one meter (the second would get "procedure already in progress" and abort the first).
/// An advisory `flock` on `<database>.meter-<ADDRESS>.lock`, released when the holder exits, even by
/// SIGKILL.
public final class MeterSessionLock: Sendable {
    private let fd: Int32
    public let path: String

    public static func path(database: String, address: String) -> String {
        database + ".meter-" + String(address.filter { $0 != ":" }).uppercased() + ".lock"
    }

    /// Nil when another process holds the lock; throws a one-line message when the file cannot be opened.
    public static func acquire(database: String, address: String) throws(MeterSessionLockError) -> MeterSessionLock? {
        let path = path(database: database, address: address)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw MeterSessionLockError(path: path, errno: errno) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            close(fd)
            if e == EWOULDBLOCK { return nil }
            throw MeterSessionLockError(path: path, errno: e)
        }
        return MeterSessionLock(fd: fd, path: path)
    }

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }
}

public struct MeterSessionLockError: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var errno: Int32
    public var description: String { "cannot lock \(path): \(String(cString: strerror(errno)))" }
}
