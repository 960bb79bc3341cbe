#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import SQLiteStore
import Support
import SyncEngine
import Transport

/// The gateway alive in Nightscout (`[nightscout] device_status = true`): follows the daemon's snapshots
/// (the newest only) and gives `DeviceStatusReporter` the gateway's state as the heartbeat judges it, the
/// pending readings and each meter's battery and last contact (read from the store only when the reporter
/// builds a document, not at every snapshot); a download that ended (the snapshot's download count went
/// up) is news. Nil unless the setting is on.
public final class DeviceStatusService: Service {
    private let reporter: DeviceStatusReporter
    private let snapshots: AsyncStream<DaemonSnapshot>
    private let readMeters: MeterStateReader
    private let maxPending: Duration
    private let logger: Logger

    public convenience init?(feed: SnapshotFeed, config: GatewayConfig, settings: UploadSettings, store: SQLiteStore,
                             clock: any SessionClock, logger: Logger) {
        self.init(feed: feed, config: config, settings: settings, http: CurlHTTPClient(), clock: clock, logger: logger,
                  readMeters: { limit in try await store.meterStates(limit: limit) })
    }

    init?(feed: SnapshotFeed, config: GatewayConfig, settings: UploadSettings, http: any HTTPClient, clock: any SessionClock,
          logger: Logger, readMeters: @escaping MeterStateReader) {
        guard let nightscout = settings.nightscout, let policy = nightscout.deviceStatus else { return nil }
        reporter = DeviceStatusReporter(settings: nightscout, http: http, device: Self.hostName(), policy: policy,
                                        networkTimeoutMs: settings.recovery.networkTimeoutMs, clock: clock, logger: logger)
        snapshots = feed.reader(.latest)
        self.readMeters = readMeters
        maxPending = config.gateway.heartbeat?.policy.maxPending ?? .seconds(HeartbeatPolicy.defaultMaxPendingSeconds)
        self.logger = logger
    }

    public func run() async {
        var downloads: Int?
        for await snapshot in snapshots {
            let now = SystemClock.now()
            guard let health = snapshot.heartbeatHealth(now: now) else { continue }
            await reporter.update { [weak self] in await self?.report(snapshot, health: health) }
            if let seen = downloads, snapshot.counters.downloads > seen { await reporter.downloadEnded() }
            downloads = snapshot.counters.downloads
        }
        await reporter.stop()
    }

    /// The document's content; nil when the store cannot be read (then the next snapshot is news, and its
    /// document goes out soon).
    private func report(_ snapshot: DaemonSnapshot, health: HeartbeatHealth) async -> DeviceStatusReport? {
        do {
            var meters: [DeviceStatusMeter] = []
            var names: [String: String] = [:]
            for state in try await readMeters(1) {
                let meter = DeviceStatusMeter(meter: state.info, newestFirst: state.newestFirst)
                names[state.info.address] = meter.name
                meters.append(meter)
            }
            // A Nightscout site may be readable by anyone with its link: the problem names meters, not addresses.
            var shown = health
            shown.repairNeeded = health.repairNeeded.map { names[$0] ?? "a meter" }
            return DeviceStatusReport(problem: shown.problem(maxPending: maxPending), pending: snapshot.pending,
                                      oldestPendingAge: health.oldestUnsentAge, meters: meters)
        } catch {
            logger.warning("[nightscout] device status: cannot read the meters' state: \(error)")
            return nil
        }
    }

    /// The host's name, which names the gateway in Nightscout; `glucose-gateway` when it has none.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "glucose-gateway" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return IdentityString.bounded(name).isEmpty ? "glucose-gateway" : IdentityString.bounded(name)
    }
}
