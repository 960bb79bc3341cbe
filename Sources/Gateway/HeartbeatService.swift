import GatewayCore
import Support
import Synchronization
import SyncEngine
import Transport

/// The heartbeat's driver: the daemon's snapshots go in, in order, each as the health the heartbeat judges
/// (`DaemonSnapshot.heartbeatHealth`); the `HeartbeatPinger` for the configured monitor decides and sends,
/// and each attempt is written to `<database>.heartbeat.json` for `status`. SIGHUP swaps the pinger when
/// the heartbeat keys or the network timeout changed (`configure`).
public final class HeartbeatService: Service {
    private struct Setup: Equatable {
        var target: HeartbeatTarget
        var policy: HeartbeatPolicy
        var timeoutMs: Int
    }

    private let snapshots: AsyncStream<DaemonSnapshot>
    private let current = Mutex<(setup: Setup?, pinger: HeartbeatPinger?)>((nil, nil))
    private let logger: Logger
    private let statePath: String

    public init(feed: SnapshotFeed, config: GatewayConfig, logger: Logger) {
        snapshots = feed.reader(.every)
        self.logger = logger
        statePath = HeartbeatStateFile.path(database: config.gateway.database)
        _ = swap(to: config)
    }

    /// Starts, replaces or stops the pinger for `config` (SIGHUP); the one it replaces has stopped on return.
    public func configure(_ config: GatewayConfig) async {
        guard let (old, started) = swap(to: config) else { return }
        await old?.stop()
        if !started, old != nil { logger.notice("heartbeat: off") }
    }

    /// The new pinger in place; nil when the setup did not change, else the one replaced and whether a new one runs.
    private func swap(to config: GatewayConfig) -> (old: HeartbeatPinger?, started: Bool)? {
        let setup = config.gateway.heartbeat.map {
            Setup(target: $0.target, policy: $0.policy, timeoutMs: config.network.networkTimeoutMilliseconds)
        }
        let statePath = self.statePath
        let logger = self.logger
        return current.withLock { state in
            guard state.setup != setup else { return nil }
            let old = state.pinger
            state.setup = setup
            state.pinger = setup.map { s in
                HeartbeatPinger(target: s.target, policy: s.policy, http: CurlHTTPClient(), networkTimeoutMs: s.timeoutMs,
                                clock: ContinuousClock(), logger: logger, report: { report in
                                    HeartbeatStateFile.write(report, monitor: s.target.shown, to: statePath, logger: logger)
                                })
            }
            return (old, setup != nil)
        }
    }

    public func run() async {
        for await snapshot in snapshots {
            let now = SystemClock.now()
            let pinger = current.withLock { $0.pinger }
            await pinger?.update(snapshot.heartbeatHealth(now: now), observedAt: now)
        }
        let pinger = current.withLock { $0.pinger }
        await pinger?.stop()
    }
}
