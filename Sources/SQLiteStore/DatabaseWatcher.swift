#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization

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
/// Other files in the directory cost next to nothing: the watch asks only for writes (`IN_MODIFY`) and
/// renames into the directory (`IN_MOVED_TO`), so files created, closed and deleted there raise no event
/// at all (every commit writes the database or its `-wal`, so no commit goes unseen); events that do
/// arrive are read in batches of up to 64 KiB into one buffer and matched by their name's bytes, and after
/// each batch the watch rests 20 ms so that a directory written without pause wakes it at most 50 times a
/// second.
///
/// `@unchecked Sendable`: all properties are constants, and a dispatch source may be cancelled from any
/// thread; the descriptor and the buffer are used only on the source's own queue, the descriptor closed by
/// its cancel handler.
public final class DatabaseWatcher: @unchecked Sendable {
    public let changes: AsyncStream<Void>
    private let source: any DispatchSourceRead
    private let counts = Counts()

    /// What the watch asks the kernel for.
    static let mask = UInt32(IN_MODIFY | IN_MOVED_TO)
    /// How long the watch rests after a batch of events.
    static let rest: DispatchTimeInterval = .milliseconds(20)

    /// Events read so far (for tests and benchmarks).
    public var eventsRead: Int { counts.events.load(ordering: .relaxed) }

    private final class Counts: Sendable {
        let events = Atomic<Int>(0)
    }

    /// The buffer events are read into, reused; touched only on the source's queue.
    private final class Buffer: @unchecked Sendable {
        var bytes = [UInt8](repeating: 0, count: 64 << 10)
    }

    /// The source, for its own handler to suspend and a timer to resume. `@unchecked Sendable`: both run
    /// on the source's serial queue, and suspend/resume are thread-safe. The handler holding the source
    /// is released when the source is cancelled.
    private final class Resting: @unchecked Sendable {
        let source: any DispatchSourceRead
        init(_ source: any DispatchSourceRead) { self.source = source }
    }

    /// Watches the directory of `database`; nil when inotify is unavailable (the caller goes on without).
    public init?(database given: String) {
        // SQLite follows a symbolic link to the database and keeps the -wal beside the target.
        let database = Self.resolved(given)
        let slash = database.lastIndex(of: "/")
        let directory = slash.map { $0 == database.startIndex ? "/" : String(database[..<$0]) } ?? "."
        let name = slash.map { String(database[database.index(after: $0)...]) } ?? database
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { return nil }
        guard inotify_add_watch(fd, directory, Self.mask) >= 0 else {
            close(fd)
            return nil
        }
        let watched = [Array(name.utf8), Array((name + "-wal").utf8)]
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        changes = stream
        let queue = DispatchQueue(label: "glucose-gateway.database-watch")
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        self.source = source
        let buffer = Buffer()
        let counts = self.counts
        let resting = Resting(source)
        source.setEventHandler {
            let (relevant, events) = Self.drain(fd, names: watched, buffer: buffer)
            counts.events.add(events, ordering: .relaxed)
            if relevant { continuation.yield() }
            guard events > 0 else { return }
            // Rest, letting events gather in the kernel's queue; a cancel meanwhile still runs its handler
            // once the source is resumed.
            resting.source.suspend()
            queue.asyncAfter(deadline: .now() + Self.rest) { resting.source.resume() }
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

    /// Reads every queued event; whether one concerns a watched name (or the queue overflowed), and how
    /// many were read.
    private static func drain(_ fd: Int32, names: [[UInt8]], buffer: Buffer) -> (relevant: Bool, events: Int) {
        var relevant = false
        var events = 0
        let headerSize = MemoryLayout<inotify_event>.size
        while true {
            let n = buffer.bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            buffer.bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset + headerSize <= n {
                    let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    let nameStart = offset + headerSize
                    let nameEnd = min(nameStart + length, n)
                    events += 1
                    if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                        relevant = true
                    } else if !relevant, nameEnd > nameStart {
                        // The name is padded with NULs to `length`.
                        let field = raw[nameStart..<nameEnd]
                        let nameLength = field.firstIndex(of: 0).map { $0 - nameStart } ?? field.count
                        relevant = names.contains { $0.count == nameLength && $0.elementsEqual(field.prefix(nameLength)) }
                    }
                    offset = nameStart + length
                }
            }
        }
        return (relevant, events)
    }
}
