import GatewayCore
import GlucoseProfile
import Support
import Synchronization
import Transport

extension DestinationName {
    /// Reading events on an MQTT broker (`[mqtt]`).
    public static let mqtt = DestinationName(rawValue: "mqtt")
}

/// The `[mqtt]` section as the sync engine uses it.
public struct MQTTSettings: Sendable, Equatable {
    public static let defaultTopicPrefix = "glucose-gateway"
    /// Home Assistant's default discovery prefix.
    public static let discoveryPrefix = "homeassistant"

    public var broker: MQTTBrokerSettings
    /// First level of every topic the gateway publishes (except the discovery configs).
    public var topicPrefix: String
    /// Publish Home Assistant discovery configs.
    public var discovery: Bool

    public init(broker: MQTTBrokerSettings, topicPrefix: String = MQTTSettings.defaultTopicPrefix, discovery: Bool = true) {
        self.broker = broker
        self.topicPrefix = topicPrefix
        self.discovery = discovery
    }

    /// Retained "online"/"offline"; "offline" is the last will.
    public var availabilityTopic: String { "\(topicPrefix)/status" }

    /// One QoS 1 event per uploadable reading, not retained.
    public func readingTopic(meter: String) -> String { "\(topicPrefix)/\(meter)/reading" }
}

/// Topic-safe identifier of a meter: its Bluetooth address in lower-case hex without colons
/// (`c026da010203`). Home Assistant accepts only `[a-zA-Z0-9_-]` in discovery topic levels.
public enum MQTTMeterID {
    public static func of(address: String) -> String {
        let hex = address.lowercased().unicodeScalars.filter { ("0"..."9").contains($0) || ("a"..."f").contains($0) }
        return String(String.UnicodeScalarView(hex))
    }
}

/// The frozen event payload of one uploadable reading: the same readings Nightscout gets (an excluded
/// reading, a HI/LO, an unresolved time or a ketone reading are never published as a number).
///
/// `{"identifier", "meter", "sequence", "time" (ISO 8601 with the meter's offset), "timestamp" (ms),
/// "mg_dl" (integer), "mmol_l" (one decimal), "unit" (as the meter reported it)}`.
public struct MQTTBodyBuilder: OutboxBodyBuilder {
    public let destination = DestinationName.mqtt
    public init() {}

    /// What both the event and the Home Assistant state show of a reading, or nil when it is not uploadable.
    public struct Values: Sendable, Equatable {
        public var instant: Int64
        public var time: String
        public var mgdl: Int64
        public var mmoll: Double
        public var unit: String
    }

    public static func values(of reading: NewReading) -> Values? {
        guard let (instant, offset) = UploadableReading.time(of: reading) else { return nil }
        let mgdl: Double
        let mmoll: Double
        switch (reading.mgdl, reading.mmoll) {
        case let (mg?, mmol?): (mgdl, mmoll) = (mg, mmol)
        case let (mg?, nil): (mgdl, mmoll) = (mg, mg / NightscoutBodyBuilder.mmolToMgdl)
        case let (nil, mmol?): (mgdl, mmoll) = (mmol * NightscoutBodyBuilder.mmolToMgdl, mmol)
        case (nil, nil): return nil
        }
        guard mgdl.isFinite, mmoll.isFinite, mgdl >= 1, mgdl < 10_000 else { return nil }
        return Values(instant: instant, time: CivilCalendar.iso8601(millis: instant, offsetMinutes: offset),
                      mgdl: Int64(mgdl.rounded()), mmoll: (mmoll * 10).rounded() / 10,
                      unit: reading.unit == .molePerLitre ? "mmol/L" : "mg/dL")
    }

    public func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement? {
        guard let v = Self.values(of: reading) else { return nil }
        let key = UploadableReading.key(of: reading)
        var w = JSONWriter()
        w.beginObject()
        w.string("identifier", key)
        w.string("meter", MQTTMeterID.of(address: reading.meterAddress))
        w.integer("sequence", Int64(reading.sequence))
        w.string("time", v.time)
        w.integer("timestamp", v.instant)
        w.integer("mg_dl", v.mgdl)
        w.decimal("mmol_l", v.mmoll, fractionDigits: 1)
        w.string("unit", v.unit)
        w.endObject()
        return OutboxElement(key: key, body: w.bytes)
    }
}

/// Publishes each reading event with QoS 1 on `<prefix>/<meter>/reading`; a row is acknowledged only
/// when the broker sent its PUBACK. Never retries or sleeps itself: the dispatcher does.
public struct MQTTDestination: UploadDestination {
    public let name = DestinationName.mqtt
    public let settings: MQTTSettings
    public let client: MQTTClient

    public init(settings: MQTTSettings, client: MQTTClient) {
        self.settings = settings
        self.client = client
    }

    public var origin: String { settings.broker.origin }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        client.start()
        client.reconnectNow()
        switch await client.waitForConnection(timeoutMs: networkTimeoutMs) {
        case .connected: break
        case .refused(let code, let text):
            return .auth(status: Self.authStatus(code), answer: "\(text) (CONNACK \(code))")
        case .disconnected(let why):
            return .transient(TransientFailure(reason: "MQTT broker \(origin): \(why)"))
        case .idle, .connecting:
            return .transient(TransientFailure(reason: "MQTT broker \(origin): not connected before the timeout"))
        }
        var rejected: [Int64: String] = [:]
        var messages: [(Int64, MQTTMessage)] = []
        for item in items {
            guard let body = try? JSONParser.parse(item.body), let meter = body["meter"]?.stringValue, !meter.isEmpty else {
                rejected[item.id] = "stored event has no meter"
                continue
            }
            messages.append((item.id, MQTTMessage(topic: settings.readingTopic(meter: meter), payload: item.body, retain: false)))
        }
        let timeout = exchangeTimeout(networkTimeoutMs: networkTimeoutMs, bodyBytes: items.reduce(0) { $0 + $1.body.count })
        let results = await withTaskGroup(of: (Int64, Result<Void, MQTTPublishError>).self) { group in
            for (id, message) in messages {
                group.addTask { (id, await client.publish(message, timeoutMs: timeout)) }
            }
            var all: [Int64: Result<Void, MQTTPublishError>] = [:]
            for await (id, r) in group { all[id] = r }
            return all
        }
        let stored = items.map(\.id).filter { if case .success = results[$0] { true } else { false } }
        let retry = items.map(\.id).filter { if case .failure = results[$0] { true } else { false } }
        if stored.isEmpty, rejected.isEmpty {
            let first = retry.compactMap { id -> MQTTPublishError? in
                if case .failure(let e) = results[id] { return e }
                return nil
            }.first
            if case .refused(let code, let text)? = first { return .auth(status: Self.authStatus(code), answer: text) }
            return .transient(TransientFailure(reason: "MQTT broker \(origin): \(first?.description ?? "no acknowledgement")"))
        }
        return .perElement(stored: stored, duplicates: 0, rejected: rejected, retry: retry,
                           retryReason: "MQTT broker \(origin) acknowledged \(stored.count) of \(items.count) reading event(s)")
    }

    /// CONNACK 4 (bad user name or password) and 5 (not authorized) as the dispatcher's auth statuses.
    static func authStatus(_ code: Int) -> Int { code == 5 ? 403 : 401 }

    /// Connects (or looks at the connection) and reports what the broker said. The first attempt that
    /// fails (refused connection, TLS verification) is the answer: the long timeout is for a slow broker,
    /// not for retrying.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let failures = client.failureCount
        client.start()
        client.reconnectNow()
        switch await client.waitForConnection(timeoutMs: timeoutMs, failuresBefore: failures) {
        case .connected: return .accepted
        case .refused(let code, let text): return .refused("\(text) (CONNACK \(code))")
        case .disconnected(let why): return .unreachable(why)
        case .idle, .connecting: return .unreachable("no answer from the broker")
        }
    }
}
