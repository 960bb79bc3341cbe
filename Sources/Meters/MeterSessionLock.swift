import GatewayCore
import Support

/// One process talks to a meter at a time: a manual `sync` and the daemon must not both run RACP
/// procedures on one meter (the second would get "procedure already in progress" and abort the first).
/// An advisory `flock` on `<database>.meter-<ADDRESS>.lock`, released when the holder exits, even by
/// SIGKILL.
public final class MeterSessionLock: Sendable {
    private let file: LockFile
    public var path: String { file.path }

    public static func path(database: String, address: String) -> String {
        database + ".meter-" + String(address.filter { $0 != ":" }).uppercased() + ".lock"
    }

    /// Nil when another process holds the lock; throws a one-line message when the file cannot be opened.
    /// For the tests of the lock itself; code holds the lock through `withLock`.
    static func acquire(database: String, address: String) throws(MeterSessionLockError) -> MeterSessionLock? {
        try LockFile.acquire(path: path(database: database, address: address)).map(MeterSessionLock.init)
    }

    /// Runs `body` while this process holds the meter's lock (see `LockFile.withLock`).
    public static func withLock<R, E: Error>(database: String, address: String, isolation: isolated (any Actor)? = #isolation,
                                             _ body: () async throws(E) -> sending R) async throws(E) -> LockAttempt<R> {
        try await LockFile.withLock(path: path(database: database, address: address), body)
    }

    private init(_ file: LockFile) { self.file = file }
}

public typealias MeterSessionLockError = LockFileError
