import GatewayCore

/// What the service manager hears of the daemon, from its snapshots: `READY=1` with the first status line
/// once the daemon runs (or holds an alert), `STATUS=` with each later one, `STOPPING=1` when it stops.
public struct ServiceManagerNotes: Sendable, Equatable {
    public enum Note: Sendable, Equatable {
        case ready(String)
        case status(String)
        case stopping
    }

    private var ready = false
    private var stopping = false

    public init() {}

    /// The notes a snapshot calls for, in order.
    public mutating func notes(for snapshot: DaemonSnapshot) -> [Note] {
        switch snapshot.phase {
        case .running, .alert:
            guard !stopping else { return [] }
            if ready { return [.status(snapshot.statusLine)] }
            ready = true
            return [.ready(snapshot.statusLine)]
        case .stopping, .stopped:
            guard !stopping else { return [] }
            stopping = true
            return [.stopping]
        default:
            return []
        }
    }
}

/// Passes the daemon's snapshots to the service manager (`sd_notify`; see `ServiceManagerNotes`).
public struct ServiceManagerService: Service {
    let snapshots: AsyncStream<DaemonSnapshot>
    let notifier: SystemdNotifier

    public init(feed: SnapshotFeed, notifier: SystemdNotifier) {
        snapshots = feed.reader(.every)
        self.notifier = notifier
    }

    public func run() async {
        var notes = ServiceManagerNotes()
        for await snapshot in snapshots {
            for note in notes.notes(for: snapshot) {
                switch note {
                case .ready(let line): notifier.ready(status: line)
                case .status(let line): notifier.status(line)
                case .stopping: notifier.stopping()
                }
            }
        }
    }
}

/// systemd's watchdog (`WatchdogSec=`): `WATCHDOG=1` at half the interval while `alive` says the daemon's
/// own loop runs (see `GatewayDaemon.isResponsive`), until cancelled. Does nothing without a watchdog.
public struct WatchdogService: Service {
    let notifier: SystemdNotifier
    let alive: @Sendable () -> Bool

    public init(notifier: SystemdNotifier, alive: @escaping @Sendable () -> Bool = { true }) {
        self.notifier = notifier
        self.alive = alive
    }

    public func run() async { await notifier.runWatchdog(alive: alive) }
}
