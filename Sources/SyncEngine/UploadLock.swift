#if canImport(Glibc)
import Glibc
#endif

/// One uploading process per database: the daemon and a manual `upload` must never both send (two
/// requests in flight to one server can create duplicates), and only the owner may move in-flight rows
/// back to pending. An advisory `flock` on `<database>.upload.lock`, released when the process exits,
/// even by SIGKILL.
public final class UploadLock: Sendable {
    private let fd: Int32
    public let path: String

    /// Nil when another process holds the lock. Throws when the lock file cannot be opened.
    public static func acquire(database: String) throws(UploadLockError) -> UploadLock? {
        let path = database + ".upload.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw UploadLockError(path: path, errno: errno) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            close(fd)
            if e == EWOULDBLOCK { return nil }
            throw UploadLockError(path: path, errno: e)
        }
        return UploadLock(fd: fd, path: path)
    }

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }
}

public struct UploadLockError: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var errno: Int32
    public var description: String { "cannot lock \(path): \(String(cString: strerror(errno)))" }
}
