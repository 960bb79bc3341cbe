import Gateway
import GatewayCore
import SQLiteStore
import Support
import Synchronization
import SyncEngine
import Transport

/// The daemon's MQTT side: one broker connection, with the availability topic and its last will, shared
/// by the `mqtt` upload destination (reading events) and the Home Assistant publisher (discovery configs
/// and retained states). Nil without an enabled `[mqtt]` section, and then libmosquitto is never loaded.
final class DaemonMQTT: Sendable {
    let client: MQTTClient
    let publisher: HomeAssistantPublisher
    private let store: SQLiteStore
    private let logger: Logger
    /// A refresh is running / another was asked for meanwhile: snapshots come in bursts.
    private let refreshing = Mutex<(running: Bool, again: GatewayPresentation?)>((false, nil))

    /// `recordPath`: where the publisher keeps the list of retained topics it published (see
    /// `HomeAssistantPublisher`), beside the database.
    init?(settings: UploadSettings, store: SQLiteStore, recordPath: String, logger: Logger) {
        guard let mqtt = settings.mqtt else { return nil }
        self.client = MQTTClient(settings: mqtt.broker, availabilityTopic: mqtt.availabilityTopic, logger: logger)
        self.publisher = HomeAssistantPublisher(settings: mqtt, client: client, recordPath: recordPath, logger: logger)
        self.store = store
        self.logger = logger
    }

    func start() {
        if !client.start() { logger.error("[mqtt] \(client.state)") }
    }

    /// The daemon published a snapshot: bring the retained states up to date (coalesced).
    func refresh(_ snapshot: DaemonSnapshot) {
        let gateway = GatewayPresentation(pending: snapshot.pending, networkStateCode: snapshot.lastErrorCode ?? 0)
        let start = refreshing.withLock { r -> Bool in
            if r.running {
                r.again = gateway
                return false
            }
            r.running = true
            return true
        }
        guard start else { return }
        Task {
            var next: GatewayPresentation? = gateway
            while let current = next {
                await self.publish(current)
                next = self.refreshing.withLock { r -> GatewayPresentation? in
                    let again = r.again
                    r.again = nil
                    if again == nil { r.running = false }
                    return again
                }
            }
        }
    }

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

    func stop() async { await client.stop() }

    /// The record of published retained topics for the database at `database`.
    static func recordPath(database: String) -> String { database + ".mqtt-topics.json" }
}
