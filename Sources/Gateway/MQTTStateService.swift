import GatewayCore
import SQLiteStore
import Support
import SyncEngine
import Transport

/// The daemon's MQTT side: one broker connection, with the availability topic and its last will, shared
/// by the `mqtt` upload destination (reading events) and the Home Assistant publisher (discovery configs
/// and retained states), which follows the daemon's snapshots. Nil without an enabled `[mqtt]` section,
/// and then libmosquitto is never loaded.
public final class MQTTStateService: Service {
    public let client: MQTTClient
    private let publisher: HomeAssistantPublisher
    private let snapshots: AsyncStream<DaemonSnapshot>
    private let store: SQLiteStore
    private let logger: Logger

    /// The publisher keeps the list of retained topics it published (see `HomeAssistantPublisher`) beside
    /// the database (`recordPath`). The broker connection starts here, before the daemon's uploads can use
    /// it; it ends when the service does.
    public init?(feed: SnapshotFeed, settings: UploadSettings, store: SQLiteStore, database: String, logger: Logger) {
        guard let mqtt = settings.mqtt else { return nil }
        client = MQTTClient(settings: mqtt.broker, availabilityTopic: mqtt.availabilityTopic, logger: logger)
        publisher = HomeAssistantPublisher(settings: mqtt, client: client, recordPath: Self.recordPath(database: database), logger: logger)
        // Snapshots come in bursts; only the newest is worth publishing.
        snapshots = feed.reader(.latest)
        self.store = store
        self.logger = logger
        if !client.start() { logger.error("[mqtt] \(client.state)") }
    }

    /// The record of published retained topics for the database at `database`.
    public static func recordPath(database: String) -> String { database + ".mqtt-topics.json" }

    public func run() async {
        for await snapshot in snapshots {
            await publish(GatewayPresentation(pending: snapshot.pending, networkStateCode: snapshot.lastErrorCode ?? 0))
        }
        await client.stop()
    }

    /// Brings the retained states up to date.
    private func publish(_ gateway: GatewayPresentation) async {
        do {
            var meters: [MeterPresentation] = []
            for record in try await store.meters() {
                let newest = try await store.newestReadings(meterAddress: record.info.address, limit: 50).map(\.reading)
                meters.append(MeterPresentation(meter: record.info, newestFirst: newest))
            }
            await publisher.update(meters: meters, gateway: gateway)
        } catch {
            logger.warning("[mqtt] cannot read the meters' state: \(error)")
        }
    }
}
