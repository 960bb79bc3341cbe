import GatewayCore
import Support

/// One uploading process per database: the daemon and a manual `upload` must never both send (two
/// requests in flight to one server can create duplicates), and only the owner may move in-flight rows
/// back to pending. An advisory `flock` on `<database>.upload.lock`, released when the process exits,
/// even by SIGKILL.
public enum UploadLock {
    /// Runs `body` while this process holds the upload lock (see `LockFile.withLock`).
    public static func withLock<R, E: Error>(database: String, isolation: isolated (any Actor)? = #isolation,
                                             _ body: () async throws(E) -> sending R) async throws(E) -> LockAttempt<R> {
        try await LockFile.withLock(path: database + ".upload.lock", body)
    }
}
