import GatewayCore
#if canImport(Glibc)
import Glibc
#endif
import Support
import Synchronization
import Transport

/// Keeps the broker's retained discovery configs and states in line with the store (the client publishes
/// only what changed, and everything again after each reconnection), and clears what is no longer wanted.
///
/// Retained messages outlive the gateway on the broker: a meter that was unpaired, configs after
/// `discovery = false`, topics under an earlier `topic_prefix` would stay in Home Assistant for ever. So
/// the publisher keeps a record of every retained topic it published (`recordPath`, written before it
/// publishes them), and clears each recorded topic it no longer wants with an empty retained payload, which
/// deletes a retained message. A topic stays in the record until the broker acknowledged its clearing, so a
/// broker that is down is cleared once it is back, also after a restart of the gateway.
public final class HomeAssistantPublisher: Sendable {
    public let settings: MQTTSettings
    public let client: MQTTClient
    /// The record file; nil keeps the record in memory only.
    public let recordPath: String?
    private let logger: Logger
    /// The record, once read.
    private let record = Mutex<Set<String>?>(nil)
    /// How long a clearing waits for its acknowledgement.
    static let clearTimeoutMs = 5000

    public init(settings: MQTTSettings, client: MQTTClient, recordPath: String? = nil, logger: Logger = .silent) {
        self.settings = settings
        self.client = client
        self.recordPath = recordPath
        self.logger = logger
    }

    /// The retained topics the publisher wants now, with their payloads.
    public func wanted(meters: [MeterPresentation], gateway: GatewayPresentation) -> [MQTTMessage] {
        var out: [MQTTMessage] = []
        if settings.discovery { out += HomeAssistantDiscovery.configs(meters: meters, settings: settings) }
        for meter in meters { out += HomeAssistantDiscovery.states(meter: meter, settings: settings) }
        out += HomeAssistantDiscovery.gatewayStates(gateway, settings: settings)
        return out
    }

    /// Publishes what changed and clears the recorded topics no longer wanted. Call it from one task at a time.
    public func update(meters: [MeterPresentation], gateway: GatewayPresentation) async {
        let messages = wanted(meters: meters, gateway: gateway)
        var wantedTopics = Set(messages.map(\.topic))
        if let availability = client.availabilityTopic { wantedTopics.insert(availability) }
        var known = loadRecord(meters: meters)
        let stale = known.subtracting(wantedTopics)
        if !wantedTopics.isSubset(of: known) {
            known.formUnion(wantedTopics)
            saveRecord(known)
        }
        for message in messages { client.setRetained(message) }
        guard !stale.isEmpty else { return }
        var cleared: Set<String> = []
        for topic in stale.sorted() {
            client.removeRetained(topic)
            let empty = MQTTMessage(topic: topic, payload: [], retain: true)
            if case .success = await client.publish(empty, timeoutMs: Self.clearTimeoutMs) { cleared.insert(topic) }
        }
        if !cleared.isEmpty {
            known.subtract(cleared)
            saveRecord(known)
            logger.info("[mqtt] cleared \(cleared.count) retained topic(s) the gateway no longer publishes")
        }
    }

    /// The record: from memory, else the file, else (first run, or a gateway that kept none) the topics an
    /// earlier version published that this one does not.
    private func loadRecord(meters: [MeterPresentation]) -> Set<String> {
        if let known = record.withLock({ $0 }) { return known }
        var known = Set(HomeAssistantDiscovery.legacyTopics(meters: meters))
        if let path = recordPath {
            switch Self.read(path) {
            case .success(let topics?): known = topics
            case .success(nil): break
            case .failure(let why): logger.warning("[mqtt] the record of published topics is unreadable (\(why)); starting a new one")
            }
        }
        record.withLock { $0 = known }
        return known
    }

    private func saveRecord(_ topics: Set<String>) {
        record.withLock { $0 = topics }
        guard let path = recordPath else { return }
        var w = JSONWriter()
        w.beginObject()
        w.beginArray("topics")
        for topic in topics.sorted() { w.string(nil, topic) }
        w.endArray()
        w.endObject()
        do {
            try AtomicFile.write(w.bytes + [0x0A], to: path, mode: 0o600)
        } catch {
            logger.warning("[mqtt] \(error)")
        }
    }

    struct RecordProblem: Error, CustomStringConvertible {
        var description: String
    }

    /// The recorded topics; nil when there is no record file.
    static func read(_ path: String) -> Result<Set<String>?, RecordProblem> {
        let bytes: [UInt8]
        switch FileContents.contents(of: path, limit: 4 << 20) {
        case .success(let b): bytes = b
        case .failure(.missing): return .success(nil)
        case .failure(let e): return .failure(RecordProblem(description: e.text))
        }
        guard let json = try? JSONParser.parse(bytes), let list = json["topics"]?.arrayValue else {
            return .failure(RecordProblem(description: "not a topic list"))
        }
        return .success(Set(list.compactMap(\.stringValue)))
    }
}
