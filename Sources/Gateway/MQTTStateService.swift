import GatewayCore
import SQLiteStore
import Support
import SyncEngine
import Transport

/// The daemon's MQTT side: one broker connection, with the availability topic and its last will, shared
/// by the `mqtt` upload destination (reading events) and the Home Assistant publisher (discovery configs
/// and retained states), which follows the daemon's snapshots. Nil without an enabled `[mqtt]` section,
/// and then libmosquitto is never loaded.
///
/// The gateway's states come with every snapshot; the meters' states are read from the store only when a
/// snapshot shows that they may have changed (`MeterStatesKey`), so an idle daemon reads nothing again.
public final class MQTTStateService: Service {
    public let client: MQTTClient
    private let publisher: HomeAssistantPublisher
    private let snapshots: AsyncStream<DaemonSnapshot>
    private let readMeters: MeterStateReader
    private let logger: Logger

    /// The publisher keeps the list of retained topics it published (see `HomeAssistantPublisher`) beside
    /// the database (`recordPath`). The broker connection starts here, before the daemon's uploads can use
    /// it; it ends when the service does.
    public convenience init?(feed: SnapshotFeed, settings: UploadSettings, store: SQLiteStore, database: String, logger: Logger) {
        guard let mqtt = settings.mqtt else { return nil }
        let client = MQTTClient(settings: mqtt.broker, availabilityTopic: mqtt.availabilityTopic, logger: logger)
        if !client.start() { logger.error("[mqtt] \(client.state)") }
        self.init(feed: feed, settings: mqtt, client: client, recordPath: Self.recordPath(database: database), logger: logger,
                  readMeters: { limit in try await store.meterStates(limit: limit) })
    }

    init(feed: SnapshotFeed, settings: MQTTSettings, client: MQTTClient, recordPath: String?, logger: Logger,
         readMeters: @escaping MeterStateReader) {
        self.client = client
        publisher = HomeAssistantPublisher(settings: settings, client: client, recordPath: recordPath, logger: logger)
        // Snapshots come in bursts; only the newest is worth publishing.
        snapshots = feed.reader(.latest)
        self.readMeters = readMeters
        self.logger = logger
    }

    /// The record of published retained topics for the database at `database`.
    public static func recordPath(database: String) -> String { database + ".mqtt-topics.json" }

    public func run() async {
        var meters = MeterStatesCache()
        for await snapshot in snapshots {
            do {
                let states = try await meters.states(at: snapshot) {
                    try await readMeters(50).map { MeterPresentation(meter: $0.info, newestFirst: $0.newestFirst) }
                }
                await publisher.update(meters: states, gateway: GatewayPresentation(pending: snapshot.pending,
                                                                                   networkStateCode: snapshot.lastErrorCode ?? 0))
            } catch {
                // The next snapshot tries again.
                logger.warning("[mqtt] cannot read the meters' state: \(error)")
            }
        }
        await client.stop()
    }
}

/// The meters' states as last read from the store, read again only when a snapshot shows that they may
/// have changed (`MeterStatesKey`).
struct MeterStatesCache {
    private var held: (key: MeterStatesKey, states: [MeterPresentation])?

    /// The meters' states at `snapshot`: those held, or what `read` gives when the key moved. When `read`
    /// throws, nothing is held, so the next snapshot reads again.
    mutating func states(at snapshot: DaemonSnapshot,
                         read: () async throws -> [MeterPresentation]) async rethrows -> [MeterPresentation] {
        let key = MeterStatesKey(snapshot)
        if let held, held.key == key { return held.states }
        held = nil
        let states = try await read()
        held = (key, states)
        return states
    }
}

/// What in a daemon snapshot moves when the meters' rows or readings may have changed: a download or a
/// failed session (the counters), a session starting or ending, readings stored, a meter paired, unpaired
/// or losing its bond, another process's commit. Two snapshots with the same key show the same meters.
struct MeterStatesKey: Equatable {
    var counters: DaemonCounters
    var activeSessions: [String]
    var pairedMeters: Int
    var repairNeeded: [String]
    var readingsTotal: Int?
    var readingsExcluded: Int?

    init(_ snapshot: DaemonSnapshot) {
        counters = snapshot.counters
        activeSessions = snapshot.activeSessions
        pairedMeters = snapshot.pairedMeters
        repairNeeded = snapshot.repairNeeded
        readingsTotal = snapshot.readingsTotal
        readingsExcluded = snapshot.readingsExcluded
    }
}
