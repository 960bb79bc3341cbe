import GatewayCore

/// One uploading process per database: the daemon and a manual `upload` must never both send (two
/// requests in flight to one server can create duplicates), and only the owner may move in-flight rows
/// back to pending. An advisory `flock` on `<database>.upload.lock`, released when the process exits,
/// even by SIGKILL.
public final class UploadLock: Sendable {
    private let file: LockFile
    public var path: String { file.path }

    /// Nil when another process holds the lock. Throws when the lock file cannot be opened.
    public static func acquire(database: String) throws(UploadLockError) -> UploadLock? {
        try LockFile.acquire(path: database + ".upload.lock").map(UploadLock.init)
    }

    /// Runs `body` while this process holds the upload lock (see `LockFile.withLock`).
    public static func withLock<R, E: Error>(database: String, isolation: isolated (any Actor)? = #isolation,
                                             _ body: () async throws(E) -> R) async throws(E) -> LockAttempt<R> {
        try await LockFile.withLock(path: database + ".upload.lock", body)
    }

    private init(_ file: LockFile) { self.file = file }
}

public typealias UploadLockError = LockFileError
