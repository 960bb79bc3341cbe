#if canImport(Glibc)
import Glibc
#endif
import Dispatch

/// Tells a long-running process (the daemon) that some process wrote to the database: an inotify watch on
/// the database's directory, reporting writes to the database file and its `-wal`.
///
/// Why the file system and not a message from the writer: every writer is noticed without taking part
/// (`sync`, `pair`, `upload --redrive`, the sqlite3 shell), whatever user it runs as, and nothing names a
/// process, so a stale file left by a dead daemon can never make a writer signal an unrelated pid. inotify
/// needs no capability and no device, and its calls are in systemd's `@system-service` set; it watches the
/// inode, so it also sees writes made from outside the service's private mount namespace.
///
/// A report says only "look again": the store's `changedByOtherProcesses()` tells whether another
/// connection committed (the daemon's own writes fire the watch too). Reports coalesce: a burst of writes
/// while the consumer is busy is one report.
///
/// `@unchecked Sendable`: both properties are constants, and a dispatch source may be cancelled from any
/// thread; the descriptor is used only on the source's own queue and closed by its cancel handler.
public final class DatabaseWatcher: @unchecked Sendable {
    public let changes: AsyncStream<Void>
    private let source: any DispatchSourceRead

    /// Watches the directory of `database`; nil when inotify is unavailable (the caller goes on without).
    public init?(database given: String) {
        // SQLite follows a symbolic link to the database and keeps the -wal beside the target.
        let database = Self.resolved(given)
        let slash = database.lastIndex(of: "/")
        let directory = slash.map { $0 == database.startIndex ? "/" : String(database[..<$0]) } ?? "."
        let name = slash.map { String(database[database.index(after: $0)...]) } ?? database
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { return nil }
        let mask = UInt32(IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE)
        guard inotify_add_watch(fd, directory, mask) >= 0 else {
            close(fd)
            return nil
        }
        let watched: Set<String> = [name, name + "-wal"]
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        changes = stream
        let queue = DispatchQueue(label: "glucose-gateway.database-watch")
        source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler {
            if Self.drain(fd, names: watched) { continuation.yield() }
        }
        source.setCancelHandler {
            close(fd)
            continuation.finish()
        }
        source.resume()
    }

    deinit { source.cancel() }

    private static func resolved(_ path: String) -> String {
        guard let real = realpath(path, nil) else { return path }
        defer { free(real) }
        return String(cString: real)
    }

    /// Stops watching; `changes` ends.
    public func stop() { source.cancel() }

    /// Reads every queued event; true when one concerns a watched name (or the queue overflowed).
    private static func drain(_ fd: Int32, names: Set<String>) -> Bool {
        var relevant = false
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            var offset = 0
            let headerSize = MemoryLayout<inotify_event>.size
            while offset + headerSize <= n {
                let (mask, length) = buffer.withUnsafeBytes { raw in
                    (raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                     Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)))
                }
                let nameStart = offset + headerSize
                let nameEnd = min(nameStart + length, n)
                if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                    relevant = true
                } else if nameEnd > nameStart {
                    let bytes = buffer[nameStart..<nameEnd].prefix { $0 != 0 }
                    if names.contains(String(decoding: bytes, as: UTF8.self)) { relevant = true }
                }
                offset = nameStart + length
            }
        }
        return relevant
    }
}
