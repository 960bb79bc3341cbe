import GatewayCore
import GlucoseProfile
import Synchronization

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

// MARK: - Home Assistant

/// What Home Assistant is shown of one meter. Values are nil until the meter has an uploadable reading.
public struct MeterPresentation: Sendable, Equatable {
    public var id: String
    public var name: String
    public var manufacturer: String?
    public var model: String?
    public var serial: String?
    public var latest: MQTTBodyBuilder.Values?
    /// Sensor status bit 0 of the meter's newest reading; nil when it has none.
    public var batteryLow: Bool?
    /// The meter lost its bond (state `re-pair needed`): it is not downloaded until paired again.
    public var repairNeeded: Bool

    public init(id: String, name: String, manufacturer: String? = nil, model: String? = nil, serial: String? = nil,
                latest: MQTTBodyBuilder.Values? = nil, batteryLow: Bool? = nil, repairNeeded: Bool = false) {
        self.id = id
        self.name = name
        self.manufacturer = manufacturer
        self.model = model
        self.serial = serial
        self.latest = latest
        self.batteryLow = batteryLow
        self.repairNeeded = repairNeeded
    }

    /// From the meter's row and its newest readings (newest first): the first uploadable one gives the
    /// glucose values, the newest of all the battery state.
    public init(meter: MeterInfo, newestFirst readings: [NewReading]) {
        // Bounded as every meter string sent (`IdentityString`), also from a row stored before the bound.
        let meter = meter.withBoundedIdentity
        self.init(id: MQTTMeterID.of(address: meter.address), name: meter.name ?? meter.model ?? "Glucose meter \(meter.address)",
                  manufacturer: meter.manufacturer, model: meter.model, serial: meter.serial, repairNeeded: meter.bondLostAt != nil)
        latest = readings.lazy.compactMap(MQTTBodyBuilder.values).first
        batteryLow = readings.first.map { ($0.sensorStatus ?? 0) & Int(SensorStatus.batteryLow.rawValue) != 0 }
    }
}

/// The gateway-wide figures each meter's device also shows.
public struct GatewayPresentation: Sendable, Equatable {
    /// Readings waiting for upload, all destinations together (the `status` line's "pending").
    public var pending: Int
    /// 0 when uploads go through, else the last error code (1001, 1002, or the server's status).
    public var networkStateCode: Int
    public init(pending: Int, networkStateCode: Int) {
        self.pending = pending
        self.networkStateCode = networkStateCode
    }
}

/// Home Assistant MQTT discovery configs and state topics.
///
/// Per meter, under `homeassistant/<component>/<meter id>/<field>/config`: last glucose in mg/dL and in
/// mmol/L (device class `blood_glucose_concentration`), its time (`timestamp`), battery low (a
/// `binary_sensor` of class `battery`: on means low), needs pairing again (a `binary_sensor` of class
/// `problem`: on while the meter is in state `re-pair needed`), readings pending and the network state code
/// (diagnostic). Every config names the availability topic, so all go "unavailable" with the gateway.
/// States are on `<prefix>/<meter id>/<field>` and, for the gateway-wide two, `<prefix>/gateway/<field>`.
public enum HomeAssistantDiscovery {
    public struct Field: Sendable {
        public var key: String
        public var component: String
        public var name: String
        public var gatewayWide: Bool
        var configure: @Sendable (inout JSONWriter) -> Void
    }

    public static let fields: [Field] = [
        Field(key: "glucose_mgdl", component: "sensor", name: "Glucose", gatewayWide: false) { w in
            w.string("device_class", "blood_glucose_concentration")
            w.string("unit_of_measurement", "mg/dL")
            w.string("state_class", "measurement")
        },
        Field(key: "glucose_mmol", component: "sensor", name: "Glucose (mmol/L)", gatewayWide: false) { w in
            w.string("device_class", "blood_glucose_concentration")
            w.string("unit_of_measurement", "mmol/L")
            w.string("state_class", "measurement")
            w.integer("suggested_display_precision", 1)
        },
        Field(key: "glucose_time", component: "sensor", name: "Glucose time", gatewayWide: false) { w in
            w.string("device_class", "timestamp")
        },
        Field(key: "battery_low", component: "binary_sensor", name: "Battery low", gatewayWide: false) { w in
            w.string("device_class", "battery")
            w.string("payload_on", "ON")
            w.string("payload_off", "OFF")
        },
        Field(key: "repair_needed", component: "binary_sensor", name: "Needs pairing again", gatewayWide: false) { w in
            w.string("device_class", "problem")
            w.string("payload_on", "ON")
            w.string("payload_off", "OFF")
        },
        Field(key: "pending", component: "sensor", name: "Readings pending", gatewayWide: true) { w in
            w.string("state_class", "measurement")
            w.string("entity_category", "diagnostic")
        },
        Field(key: "network_state", component: "sensor", name: "Network state code", gatewayWide: true) { w in
            w.string("entity_category", "diagnostic")
        },
    ]

    public static func stateTopic(_ field: Field, meter: String, settings: MQTTSettings) -> String {
        field.gatewayWide ? "\(settings.topicPrefix)/gateway/\(field.key)" : "\(settings.topicPrefix)/\(meter)/\(field.key)"
    }

    public static func configTopic(_ field: Field, meter: String) -> String {
        "\(MQTTSettings.discoveryPrefix)/\(field.component)/\(meter)/\(field.key)/config"
    }

    public static func config(_ field: Field, meter: MeterPresentation, settings: MQTTSettings) -> MQTTMessage {
        var w = JSONWriter()
        w.beginObject()
        w.string("name", field.name)
        w.string("unique_id", "glucose_gateway_\(meter.id)_\(field.key)")
        w.string("state_topic", stateTopic(field, meter: meter.id, settings: settings))
        w.string("availability_topic", settings.availabilityTopic)
        w.string("payload_available", MQTTClient.onlinePayload)
        w.string("payload_not_available", MQTTClient.offlinePayload)
        w.integer("qos", 1)
        field.configure(&w)
        w.beginObject("device")
        w.beginArray("identifiers")
        w.string(nil, "glucose_gateway_\(meter.id)")
        w.endArray()
        w.string("name", meter.name)
        if let m = meter.manufacturer { w.string("manufacturer", m) }
        if let m = meter.model { w.string("model", m) }
        if let s = meter.serial { w.string("serial_number", s) }
        w.endObject()
        w.beginObject("origin")
        w.string("name", "glucose-gateway")
        w.endObject()
        w.endObject()
        return MQTTMessage(topic: configTopic(field, meter: meter.id), payload: w.bytes, retain: true)
    }

    /// The state payloads known now; a field without a value is not published (Home Assistant shows it
    /// unknown rather than a guess).
    public static func states(meter: MeterPresentation, gateway: GatewayPresentation, settings: MQTTSettings) -> [MQTTMessage] {
        var out: [MQTTMessage] = []
        func add(_ key: String, _ text: String) {
            guard let field = fields.first(where: { $0.key == key }) else { return }
            out.append(MQTTMessage(topic: stateTopic(field, meter: meter.id, settings: settings), text: text, retain: true))
        }
        if let v = meter.latest {
            add("glucose_mgdl", String(v.mgdl))
            add("glucose_mmol", JSONWriter.formatDecimal(v.mmoll, fractionDigits: 1))
            add("glucose_time", v.time)
        }
        if let low = meter.batteryLow { add("battery_low", low ? "ON" : "OFF") }
        add("repair_needed", meter.repairNeeded ? "ON" : "OFF")
        add("pending", String(gateway.pending))
        add("network_state", String(gateway.networkStateCode))
        return out
    }
}

/// Keeps the broker's retained discovery configs and states in line with the store (the client publishes
/// only what changed, and everything again after each reconnection).
public final class HomeAssistantPublisher: Sendable {
    public let settings: MQTTSettings
    public let client: MQTTClient

    public init(settings: MQTTSettings, client: MQTTClient) {
        self.settings = settings
        self.client = client
    }

    public func update(meters: [MeterPresentation], gateway: GatewayPresentation) {
        for meter in meters {
            if settings.discovery {
                for field in HomeAssistantDiscovery.fields {
                    client.setRetained(HomeAssistantDiscovery.config(field, meter: meter, settings: settings))
                }
            }
            for state in HomeAssistantDiscovery.states(meter: meter, gateway: gateway, settings: settings) {
                client.setRetained(state)
            }
        }
    }
}
