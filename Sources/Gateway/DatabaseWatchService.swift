import GatewayCore
import SQLiteStore
import Support

/// Tells the daemon about writes to its database: what the upload side does to the queue (so status and
/// metrics follow without polling; from the store's own change stream) and rows another process stored
/// (a manual `sync` leaves its upload to the daemon; noticed through the file system, see
/// `DatabaseWatcher` for why).
public struct DatabaseWatchService: Service {
    let daemon: GatewayDaemon
    let changes: AsyncStream<StoreChange>
    let watcher: DatabaseWatcher?

    public init(daemon: GatewayDaemon, store: SQLiteStore, database: String, logger: Logger) {
        self.daemon = daemon
        // Taken now, so that no change between here and `run` is missed. The stream ends when the store closes.
        changes = store.changes()
        watcher = DatabaseWatcher(database: database)
        if watcher == nil {
            logger.warning("cannot watch \(database) for other writers (inotify); what another process stores is uploaded after the next download")
        }
    }

    public func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [changes, daemon] in
                for await change in changes where change == .uploads { await daemon.uploadStateChanged() }
            }
            if let watcher {
                group.addTask { [daemon] in
                    for await _ in watcher.changes { await daemon.databaseWritten() }
                }
            }
            await group.waitForAll()
        }
        watcher?.stop()
    }
}
