#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An advisory, exclusive `flock` on a lock file (created mode 0600 when missing), held for the life of
/// this object and released when it is deinitialized or the process exits, even by SIGKILL. Prefer
/// `withLock(path:_:)`, whose scope shows how long the lock is held.
public final class LockFile: Sendable {
    private let fd: Int32
    public let path: String

    /// Nil when another process holds the lock; throws a one-line message when the file cannot be opened
    /// or locked.
    public static func acquire(path: String) throws(LockFileError) -> LockFile? {
        // Only a regular file is a lock file: opening a device can have effects of its own (a watchdog
        // starts on open), so it is looked at before the open and again after.
        var st = stat()
        if stat(path, &st) == 0, st.st_mode & S_IFMT != S_IFREG { throw LockFileError(path: path, errno: EEXIST, notRegular: true) }
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0o600)
        guard fd >= 0 else { throw LockFileError(path: path, errno: errno) }
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw LockFileError(path: path, errno: EEXIST, notRegular: true)
        }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            close(fd)
            if e == EWOULDBLOCK { return nil }
            throw LockFileError(path: path, errno: e)
        }
        return LockFile(fd: fd, path: path)
    }

    /// Runs `body` while holding the lock on `path`, released when `body` returns or throws; `body` does not
    /// run when another process holds the lock or the file cannot be opened or locked. Rethrows what `body`
    /// throws.
    public static func withLock<R, E: Error>(path: String, isolation: isolated (any Actor)? = #isolation,
                                             _ body: () async throws(E) -> sending R) async throws(E) -> LockAttempt<R> {
        let lock: LockFile?
        do {
            lock = try acquire(path: path)
        } catch {
            return .unavailable(error)
        }
        guard let lock else { return .held }
        defer { withExtendedLifetime(lock) {} }
        return .ran(try await body())
    }

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }
}

/// What `LockFile.withLock` did.
public enum LockAttempt<R> {
    /// The body ran, holding the lock, and returned this.
    case ran(R)
    /// Another process holds the lock: the body did not run.
    case held
    /// The lock file cannot be opened or locked: the body did not run.
    case unavailable(LockFileError)
}

extension LockAttempt: Sendable where R: Sendable {}
extension LockAttempt: Equatable where R: Equatable {}

public struct LockFileError: Error, CustomStringConvertible, Sendable, Equatable {
    public var path: String
    public var errno: Int32
    /// Something other than a regular file is at `path`.
    public var notRegular = false
    public init(path: String, errno: Int32, notRegular: Bool = false) {
        self.path = path
        self.errno = errno
        self.notRegular = notRegular
    }
    public var description: String {
        "cannot lock \(path): " + (notRegular ? "exists and is not a regular file" : String(cString: strerror(errno)))
    }
}
