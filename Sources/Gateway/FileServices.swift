import GatewayCore
import Support
import Synchronization

/// Writes each daemon snapshot to the run-state file (`<database>.daemon.json`, for `status`), in order;
/// the last one it writes is the daemon's final snapshot (phase `stopped`).
public struct StateFileService: Service {
    let snapshots: AsyncStream<DaemonSnapshot>
    let path: String
    let logger: Logger

    public init(feed: SnapshotFeed, database: String, logger: Logger) {
        snapshots = feed.reader(.every)
        path = DaemonStateFile.path(database: database)
        self.logger = logger
    }

    public func run() async {
        for await snapshot in snapshots {
            do {
                try AtomicFile.write(DaemonStateFile.json(snapshot).compactText + "\n", to: path)
            } catch {
                logger.warning("\(error)")
            }
        }
    }
}

/// Writes each daemon snapshot's figures to the Prometheus textfile (`metrics_file`), when one is set.
/// SIGHUP may set, move or clear it (`setPath`).
public final class MetricsService: Service {
    private let snapshots: AsyncStream<DaemonSnapshot>
    private let path: Mutex<String?>
    private let logger: Logger

    public init(feed: SnapshotFeed, path: String?, logger: Logger) {
        snapshots = feed.reader(.every)
        self.path = Mutex(path)
        self.logger = logger
    }

    public func setPath(_ path: String?) { self.path.withLock { $0 = path } }

    public func run() async {
        for await snapshot in snapshots {
            guard let path = path.withLock({ $0 }) else { continue }
            do {
                try PrometheusTextfile.write(snapshot.metrics(now: SystemClock.now()), to: path)
            } catch {
                logger.warning("\(error)")
            }
        }
    }
}
