import GatewayCore
import GlucoseProfile
import Support
import Transport

/// The newest glucose result of a meter, as Home Assistant is shown it: a number only when the newest
/// reading is an uploadable number; a HI, a LO or another result without a number replaces the last
/// number instead of leaving it on screen.
public struct NewestResult: Sendable, Equatable {
    /// The `glucose_result` sensor's states (an `enum` sensor: Home Assistant lists these options).
    public enum Kind: String, Sendable, CaseIterable {
        case normal
        case high = "HI"
        case low = "LO"
        /// A glucose reading without a number that is not HI or LO (sensor fault, NaN, a conflicting record).
        case noNumber = "no number"
    }

    public var kind: Kind
    /// The reading's idempotency key, the same as the reading event's `identifier`.
    public var readingID: String
    /// ISO 8601 with the meter's offset.
    public var time: String
    /// Set only for `normal`.
    public var values: MQTTBodyBuilder.Values?

    /// The first of `newestFirst` that is a glucose result with a resolved time; control solution and
    /// ketone readings are never shown, and a reading whose time is unknown cannot be told newest.
    public static func of(newestFirst readings: [NewReading]) -> NewestResult? {
        for reading in readings {
            guard reading.analyte == .glucose, reading.exclusion != .controlSolution, reading.exclusion != .ketone,
                  let (instant, offset) = UploadableReading.placed(reading) else { continue }
            let id = UploadableReading.key(of: reading)
            let time = CivilCalendar.iso8601(millis: instant, offsetMinutes: offset)
            if let values = MQTTBodyBuilder.values(of: reading) {
                return NewestResult(kind: .normal, readingID: id, time: time, values: values)
            }
            let kind: Kind
            if reading.exclusion == .high || reading.special == .positiveInfinity {
                kind = .high
            } else if reading.exclusion == .low || reading.special == .negativeInfinity {
                kind = .low
            } else {
                kind = .noNumber
            }
            return NewestResult(kind: kind, readingID: id, time: time, values: nil)
        }
        return nil
    }
}

/// What Home Assistant is shown of one meter.
public struct MeterPresentation: Sendable, Equatable {
    public var id: String
    public var name: String
    public var manufacturer: String?
    public var model: String?
    public var serial: String?
    /// Nil until the meter has a glucose result.
    public var newest: NewestResult?
    /// Sensor status bit 0 of the meter's newest reading; nil when it has none.
    public var batteryLow: Bool?
    /// The meter lost its bond (state `re-pair needed`): it is not downloaded until paired again.
    public var repairNeeded: Bool

    public init(id: String, name: String, manufacturer: String? = nil, model: String? = nil, serial: String? = nil,
                newest: NewestResult? = nil, batteryLow: Bool? = nil, repairNeeded: Bool = false) {
        self.id = id
        self.name = name
        self.manufacturer = manufacturer
        self.model = model
        self.serial = serial
        self.newest = newest
        self.batteryLow = batteryLow
        self.repairNeeded = repairNeeded
    }

    /// From the meter's row and its newest readings (newest first): the newest glucose result, and the
    /// battery state of the newest reading of all.
    public init(meter: MeterInfo, newestFirst readings: [NewReading]) {
        // Bounded as every meter string sent (`IdentityString`), also from a row stored before the bound.
        let meter = meter.withBoundedIdentity
        self.init(id: MQTTMeterID.of(address: meter.address), name: meter.name ?? meter.model ?? "Glucose meter \(meter.address)",
                  manufacturer: meter.manufacturer, model: meter.model, serial: meter.serial, repairNeeded: meter.bondLostAt != nil)
        newest = NewestResult.of(newestFirst: readings)
        batteryLow = readings.first.map { ($0.sensorStatus ?? 0) & Int(SensorStatus.batteryLow.rawValue) != 0 }
    }
}

/// The gateway-wide figures, shown on the gateway's own device.
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
/// Per meter, under `homeassistant/<component>/<meter id>/<field>/config`: the newest result (an `enum`
/// sensor: normal, HI, LO, no number), glucose in mg/dL and in mmol/L (device class
/// `blood_glucose_concentration`; `None`, which Home Assistant shows as unknown, while the newest result has
/// no number), the newest result's time (`timestamp`), battery low (a `binary_sensor` of class `battery`: on
/// means low) and needs pairing again (class `problem`). The two glucose sensors carry the attributes
/// `result`, `reading_id` and `time`, so a new reading equal to the last still changes their state object.
/// The gateway-wide two (readings pending, network state code) belong to one gateway device, which every
/// meter's device names as `via_device`. Every config names the availability topic.
public enum HomeAssistantDiscovery {
    public struct Field: Sendable {
        public var key: String
        public var component: String
        public var name: String
        public var gatewayWide: Bool
        /// The config names the meter's attributes topic (`json_attributes_topic`).
        public var attributes: Bool
        var configure: @Sendable (inout JSONWriter) -> Void
    }

    public static let fields: [Field] = [
        Field(key: "glucose_result", component: "sensor", name: "Glucose result", gatewayWide: false, attributes: false) { w in
            w.string("device_class", "enum")
            w.beginArray("options")
            for kind in NewestResult.Kind.allCases { w.string(nil, kind.rawValue) }
            w.endArray()
        },
        Field(key: "glucose_mgdl", component: "sensor", name: "Glucose", gatewayWide: false, attributes: true) { w in
            w.string("device_class", "blood_glucose_concentration")
            w.string("unit_of_measurement", "mg/dL")
            w.string("state_class", "measurement")
        },
        Field(key: "glucose_mmol", component: "sensor", name: "Glucose (mmol/L)", gatewayWide: false, attributes: true) { w in
            w.string("device_class", "blood_glucose_concentration")
            w.string("unit_of_measurement", "mmol/L")
            w.string("state_class", "measurement")
            w.integer("suggested_display_precision", 1)
        },
        Field(key: "glucose_time", component: "sensor", name: "Glucose time", gatewayWide: false, attributes: false) { w in
            w.string("device_class", "timestamp")
        },
        Field(key: "battery_low", component: "binary_sensor", name: "Battery low", gatewayWide: false, attributes: false) { w in
            w.string("device_class", "battery")
            w.string("payload_on", "ON")
            w.string("payload_off", "OFF")
        },
        Field(key: "repair_needed", component: "binary_sensor", name: "Needs pairing again", gatewayWide: false, attributes: false) { w in
            w.string("device_class", "problem")
            w.string("payload_on", "ON")
            w.string("payload_off", "OFF")
        },
        Field(key: "pending", component: "sensor", name: "Readings pending", gatewayWide: true, attributes: false) { w in
            w.string("state_class", "measurement")
            w.string("entity_category", "diagnostic")
        },
        Field(key: "network_state", component: "sensor", name: "Network state code", gatewayWide: true, attributes: false) { w in
            w.string("entity_category", "diagnostic")
        },
    ]

    /// What Home Assistant's MQTT sensor takes as "no value" (state unknown).
    public static let noValue = "None"

    /// The gateway's node in discovery topics and its device identifier: the topic prefix with every
    /// character Home Assistant does not accept there (`[a-zA-Z0-9_-]`) as `_`. Two gateways on one broker
    /// need two prefixes anyway (their availability topics would collide).
    public static func gatewayNode(_ settings: MQTTSettings) -> String {
        let safe = settings.topicPrefix.unicodeScalars.map { c -> Character in
            ("a"..."z").contains(c) || ("A"..."Z").contains(c) || ("0"..."9").contains(c) || c == "_" || c == "-" ? Character(c) : "_"
        }
        return String(safe)
    }

    public static func gatewayDeviceID(_ settings: MQTTSettings) -> String { "glucose_gateway_\(gatewayNode(settings))" }

    public static func stateTopic(_ field: Field, meter: String, settings: MQTTSettings) -> String {
        field.gatewayWide ? "\(settings.topicPrefix)/gateway/\(field.key)" : "\(settings.topicPrefix)/\(meter)/\(field.key)"
    }

    public static func attributesTopic(meter: String, settings: MQTTSettings) -> String {
        "\(settings.topicPrefix)/\(meter)/glucose_attributes"
    }

    /// A meter field's config topic, or a gateway-wide field's (under the gateway's node).
    public static func configTopic(_ field: Field, meter: String, settings: MQTTSettings) -> String {
        let node = field.gatewayWide ? gatewayNode(settings) : meter
        return "\(MQTTSettings.discoveryPrefix)/\(field.component)/\(node)/\(field.key)/config"
    }

    /// A meter field's config.
    public static func config(_ field: Field, meter: MeterPresentation, settings: MQTTSettings) -> MQTTMessage {
        config(field, uniqueID: "glucose_gateway_\(meter.id)_\(field.key)", stateTopic: stateTopic(field, meter: meter.id, settings: settings),
               attributesTopic: field.attributes ? attributesTopic(meter: meter.id, settings: settings) : nil,
               topic: configTopic(field, meter: meter.id, settings: settings), settings: settings) { w in
            w.beginArray("identifiers")
            w.string(nil, "glucose_gateway_\(meter.id)")
            w.endArray()
            w.string("name", meter.name)
            if let m = meter.manufacturer { w.string("manufacturer", m) }
            if let m = meter.model { w.string("model", m) }
            if let s = meter.serial { w.string("serial_number", s) }
            w.string("via_device", gatewayDeviceID(settings))
        }
    }

    /// A gateway-wide field's config, on the gateway's device.
    public static func gatewayConfig(_ field: Field, settings: MQTTSettings) -> MQTTMessage {
        let node = gatewayNode(settings)
        return config(field, uniqueID: "glucose_gateway_\(node)_\(field.key)", stateTopic: stateTopic(field, meter: "", settings: settings),
                      attributesTopic: nil, topic: configTopic(field, meter: "", settings: settings), settings: settings) { w in
            w.beginArray("identifiers")
            w.string(nil, gatewayDeviceID(settings))
            w.endArray()
            w.string("name", "Glucose gateway")
            w.string("manufacturer", "glucose-gateway")
        }
    }

    private static func config(_ field: Field, uniqueID: String, stateTopic: String, attributesTopic: String?, topic: String,
                               settings: MQTTSettings, device: (inout JSONWriter) -> Void) -> MQTTMessage {
        var w = JSONWriter()
        w.beginObject()
        w.string("name", field.name)
        w.string("unique_id", uniqueID)
        w.string("state_topic", stateTopic)
        if let attributesTopic { w.string("json_attributes_topic", attributesTopic) }
        w.string("availability_topic", settings.availabilityTopic)
        w.string("payload_available", MQTTClient.onlinePayload)
        w.string("payload_not_available", MQTTClient.offlinePayload)
        w.integer("qos", 1)
        field.configure(&w)
        w.beginObject("device")
        device(&w)
        w.endObject()
        w.beginObject("origin")
        w.string("name", "glucose-gateway")
        w.endObject()
        w.endObject()
        return MQTTMessage(topic: topic, payload: w.bytes, retain: true)
    }

    /// Every config: each meter's fields, then the gateway's.
    public static func configs(meters: [MeterPresentation], settings: MQTTSettings) -> [MQTTMessage] {
        var out: [MQTTMessage] = []
        for meter in meters {
            for field in fields where !field.gatewayWide { out.append(config(field, meter: meter, settings: settings)) }
        }
        for field in fields where field.gatewayWide { out.append(gatewayConfig(field, settings: settings)) }
        return out
    }

    /// A meter's state payloads known now; a field without a value is not published (Home Assistant shows
    /// it unknown rather than a guess).
    public static func states(meter: MeterPresentation, settings: MQTTSettings) -> [MQTTMessage] {
        var out: [MQTTMessage] = []
        func add(_ key: String, _ text: String) {
            guard let field = fields.first(where: { $0.key == key }) else { return }
            out.append(MQTTMessage(topic: stateTopic(field, meter: meter.id, settings: settings), text: text, retain: true))
        }
        if let newest = meter.newest {
            add("glucose_result", newest.kind.rawValue)
            // Never a number that is not the newest result's: without one, the sensors go unknown.
            add("glucose_mgdl", newest.values.map { String($0.mgdl) } ?? noValue)
            add("glucose_mmol", newest.values.map { JSONWriter.formatDecimal($0.mmoll, fractionDigits: 1) } ?? noValue)
            add("glucose_time", newest.time)
            var w = JSONWriter()
            w.beginObject()
            w.string("result", newest.kind.rawValue)
            w.string("reading_id", newest.readingID)
            w.string("time", newest.time)
            w.endObject()
            out.append(MQTTMessage(topic: attributesTopic(meter: meter.id, settings: settings), payload: w.bytes, retain: true))
        }
        if let low = meter.batteryLow { add("battery_low", low ? "ON" : "OFF") }
        add("repair_needed", meter.repairNeeded ? "ON" : "OFF")
        return out
    }

    /// The gateway-wide states.
    public static func gatewayStates(_ gateway: GatewayPresentation, settings: MQTTSettings) -> [MQTTMessage] {
        fields.filter(\.gatewayWide).map { field in
            let value = field.key == "pending" ? gateway.pending : gateway.networkStateCode
            return MQTTMessage(topic: stateTopic(field, meter: "", settings: settings), text: String(value), retain: true)
        }
    }

    /// The config topics an earlier version published for the gateway-wide fields on each meter's device;
    /// cleared once (see `PublishedTopics`).
    public static func legacyTopics(meters: [MeterPresentation]) -> [String] {
        meters.flatMap { m in
            fields.filter(\.gatewayWide).map { "\(MQTTSettings.discoveryPrefix)/\($0.component)/\(m.id)/\($0.key)/config" }
        }
    }
}
