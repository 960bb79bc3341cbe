import Gateway
import GatewayCore
import Support
import Synchronization
import SyncEngine
import Transport

/// The run command's heartbeat: the daemon's snapshots go in (in order, through one stream), the
/// `HeartbeatPinger` for the configured monitor decides and sends, and each attempt is written to
/// `<database>.heartbeat.json` for `status`. SIGHUP swaps the pinger when the heartbeat keys or the network
/// timeout changed.
final class RunHeartbeat: Sendable {
    private struct Setup: Equatable {
        var target: HeartbeatTarget
        var policy: HeartbeatPolicy
        var timeoutMs: Int
    }

    private final class Current: Sendable {
        let state = Mutex<(setup: Setup?, pinger: HeartbeatPinger?)>((nil, nil))
    }

    private let current = Current()
    private let snapshots: AsyncStream<(HeartbeatHealth?, UnixMillis)>.Continuation
    private let consumer: Task<Void, Never>
    private let logger: Logger
    private let statePath: String

    init(config: GatewayConfig, logger: Logger) {
        self.logger = logger
        self.statePath = HeartbeatStateFile.path(database: config.gateway.database)
        let (stream, continuation) = AsyncStream.makeStream(of: (HeartbeatHealth?, UnixMillis).self, bufferingPolicy: .unbounded)
        self.snapshots = continuation
        let current = self.current
        consumer = Task {
            for await (health, at) in stream {
                let pinger = current.state.withLock { $0.pinger }
                await pinger?.update(health, observedAt: at)
            }
        }
        configure(config)
    }

    /// Starts, replaces or stops the pinger for `config` (at start and on SIGHUP).
    func configure(_ config: GatewayConfig) {
        let setup = config.gateway.heartbeat.map {
            Setup(target: $0.target, policy: $0.policy, timeoutMs: config.network.networkTimeoutMilliseconds)
        }
        let statePath = self.statePath
        let logger = self.logger
        let (old, started): (HeartbeatPinger?, Bool) = current.state.withLock { state in
            guard state.setup != setup else { return (nil, false) }
            let old = state.pinger
            state.setup = setup
            state.pinger = setup.map { s in
                HeartbeatPinger(target: s.target, policy: s.policy, http: CurlHTTPClient(), networkTimeoutMs: s.timeoutMs,
                                clock: ContinuousClock(), logger: logger, report: { report in
                                    HeartbeatStateFile.write(report, monitor: s.target.shown, to: statePath, logger: logger)
                                })
            }
            return (old, true)
        }
        if let old { Task { await old.stop() } }
        if started, setup == nil, old != nil { logger.notice("heartbeat: off") }
    }

    /// Each daemon snapshot (the daemon's snapshot hook; synchronous, never blocks).
    func observe(_ snapshot: DaemonSnapshot) {
        let now = SystemClock.now()
        snapshots.yield((snapshot.heartbeatHealth(now: now), now))
    }

    func stop() {
        snapshots.finish()
        consumer.cancel()
        let pinger = current.state.withLock { $0.pinger }
        if let pinger { Task { await pinger.stop() } }
    }
}

/// `<database>.heartbeat.json`: the heartbeat's last attempt, for `status`. The monitor appears as
/// scheme://host only.
enum HeartbeatStateFile {
    static func path(database: String) -> String { database + ".heartbeat.json" }

    struct Contents: Equatable {
        var monitor: String
        var report: HeartbeatReport
    }

    static func json(_ report: HeartbeatReport, monitor: String) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("monitor", monitor)
        o.add("at", Int64(report.at))
        o.add("signal", report.signal)
        o.add("reason", report.reason.map(JSONValue.string) ?? .null)
        o.add("delivered", report.delivered)
        o.add("error", report.error.map(JSONValue.string) ?? .null)
        return o.value
    }

    static func write(_ report: HeartbeatReport, monitor: String, to path: String, logger: Logger) {
        do {
            try AtomicFile.write(json(report, monitor: monitor).compactText + "\n", to: path, mode: 0o600)
        } catch {
            logger.warning("\(error)")
        }
    }

    static func read(database: String) -> Contents? {
        guard let bytes = FileContents.read(path(database: database), limit: 1 << 16),
              let object = try? JSONParser.parse(bytes), case .object = object,
              let monitor = object["monitor"]?.stringValue, let at = object["at"]?.int64Value,
              let signal = object["signal"]?.stringValue, let delivered = object["delivered"]?.boolValue else { return nil }
        return Contents(monitor: monitor, report: HeartbeatReport(at: at, signal: signal, reason: object["reason"]?.stringValue,
                                                                   delivered: delivered, error: object["error"]?.stringValue))
    }
}
