import GatewayCore
import Support

/// The capture file: JSON, the header members one per line and each event on a line of its own, so two
/// captures compare line by line (docs/captures.md). Reading checks every member: a capture is untrusted
/// input (a file from a bug report), so a value out of range, an unknown member or a file that is not a
/// capture is a `CaptureError`, never a crash.
extension Capture {
    /// The most events a capture may hold: a full meter (a few thousand records, each a measurement and a
    /// context) fits many times over.
    public static let maximumEvents = 200_000
    /// ATT's largest attribute value.
    public static let maximumValueLength = 512

    /// The file's text.
    public var text: String {
        var header: [JSONMember] = [
            JSONMember("format", .string(Self.formatName)),
            JSONMember("version", .int(Self.formatVersion)),
        ]
        switch origin {
        case .meter:
            header.append(JSONMember("origin", .string("meter")))
        case let .simulator(profile):
            header.append(JSONMember("origin", .string("simulator")))
            if let profile { header.append(JSONMember("profile", .string(profile))) }
        }
        header.append(JSONMember("gateway", .string(gatewayVersion)))
        header.append(JSONMember("bluez", bluezVersion.map(JSONValue.string) ?? .null))
        header.append(JSONMember("address", .string(Self.placeholderAddress)))
        // For a reader of the file; the replay takes the identity from the read events themselves.
        var meter: [JSONMember] = []
        for (key, uuid) in Self.identityKeys {
            if let text = readText(uuid) { meter.append(JSONMember(key, .string(text))) }
        }
        header.append(JSONMember("meter", .object(meter)))
        header.append(JSONMember("redacted", .array(redacted.map(JSONValue.string))))
        var out = "{\n"
        for member in header {
            out += "  " + JSONValue.string(member.key).compactText + ": " + member.value.compactText + ",\n"
        }
        out += "  \"events\": ["
        for (i, event) in events.enumerated() {
            out += (i == 0 ? "\n    " : ",\n    ") + Self.json(event).compactText
        }
        out += events.isEmpty ? "]\n}\n" : "\n  ]\n}\n"
        return out
    }

    /// The Device Information strings the header shows, by key.
    static let identityKeys: [(String, GATTUUID)] = [
        ("manufacturer", .manufacturerName), ("model", .modelNumber), ("firmware", .firmwareRevision),
        ("software", .softwareRevision),
    ]

    static func json(_ event: CaptureEvent) -> JSONValue {
        var o = [JSONMember("ms", .int(event.milliseconds)), JSONMember("op", .string(event.kind.rawValue))]
        if let uuid = event.uuid { o.append(JSONMember("uuid", .string(uuidText(uuid)))) }
        if let value = event.value { o.append(JSONMember("value", .string(hexString(value)))) }
        if let error = event.error { o.append(JSONMember("error", .string(error))) }
        if event.withheld { o.append(JSONMember("withheld", .bool(true))) }
        return .object(o)
    }

    /// `2a18` for a Bluetooth SIG UUID, the 128-bit form for a vendor's.
    static func uuidText(_ uuid: GATTUUID) -> String {
        if let vendor = uuid.vendor { return vendor }
        let hex = String(uuid.rawValue, radix: 16)
        return String(repeating: "0", count: 4 - hex.count) + hex
    }

    /// True when `json` is a capture rather than a meter file: an object with a "format" member (a
    /// meter file has none; its unknown members are errors).
    public static func isCapture(_ json: JSONValue) -> Bool { json["format"] != nil }

    /// Reads a capture file's text.
    public static func parse(_ bytes: [UInt8]) throws(CaptureError) -> Capture {
        let json: JSONValue
        do { json = try JSONValue.parse(bytes) } catch { throw CaptureError("", "not JSON (\(error.description))") }
        return try parse(json)
    }

    public static func parse(_ json: JSONValue) throws(CaptureError) -> Capture {
        guard case let .object(members) = json else { throw CaptureError("", "a capture is a JSON object, not \(json.typeName)") }
        let known: Set<String> = ["format", "version", "origin", "profile", "gateway", "bluez", "address", "meter", "redacted", "events"]
        if let unknown = members.first(where: { !known.contains($0.key) }) {
            throw CaptureError(shown(unknown.key), "unknown member")
        }
        guard json["format"]?.stringValue == formatName else {
            throw CaptureError("format", "must be \"\(formatName)\"")
        }
        guard let version = json["version"]?.int64Value else { throw CaptureError("version", "must be an integer") }
        guard version == Int64(formatVersion) else {
            throw CaptureError("version", "\(version) is not a version this program reads (it reads \(formatVersion))")
        }
        let origin: Origin
        switch json["origin"]?.stringValue {
        case "meter":
            guard json["profile"] == nil else { throw CaptureError("profile", "only a capture made from the simulator names a profile") }
            origin = .meter
        case "simulator":
            origin = .simulator(profile: try optionalText(json, "profile"))
        default:
            throw CaptureError("origin", "must be \"meter\" or \"simulator\"")
        }
        guard let gateway = try optionalText(json, "gateway") else { throw CaptureError("gateway", "must be a string") }
        let bluez = try optionalText(json, "bluez")
        if let address = json["address"] {
            guard let text = address.stringValue, MeterAddress.normalize(text) != nil else {
                throw CaptureError("address", "must be an address AA:BB:CC:DD:EE:FF")
            }
        }
        if let meter = json["meter"] {
            guard case let .object(fields) = meter else { throw CaptureError("meter", "must be an object") }
            for field in fields where field.value.stringValue == nil {
                throw CaptureError("meter.\(shown(field.key))", "must be a string")
            }
        }
        var redacted: [String] = []
        if let list = json["redacted"] {
            guard let items = list.arrayValue else { throw CaptureError("redacted", "must be an array of strings") }
            for (i, item) in items.enumerated() {
                guard let text = item.stringValue, text.count <= 40 else { throw CaptureError("redacted[\(i)]", "must be a short string") }
                redacted.append(text)
            }
        }
        guard let list = json["events"]?.arrayValue else { throw CaptureError("events", "must be an array") }
        guard list.count <= maximumEvents else { throw CaptureError("events", "more than \(maximumEvents) events") }
        var events: [CaptureEvent] = []
        events.reserveCapacity(list.count)
        var previous: Int64 = 0
        for (i, item) in list.enumerated() {
            let event = try parse(event: item, field: "events[\(i)]")
            guard event.milliseconds >= previous else { throw CaptureError("events[\(i)].ms", "goes back in time") }
            previous = event.milliseconds
            events.append(event)
        }
        return Capture(origin: origin, gatewayVersion: gateway, bluezVersion: bluez, redacted: redacted, events: events)
    }

    static func parse(event json: JSONValue, field: String) throws(CaptureError) -> CaptureEvent {
        guard case let .object(members) = json else { throw CaptureError(field, "must be an object") }
        let known: Set<String> = ["ms", "op", "uuid", "value", "error", "withheld"]
        if let unknown = members.first(where: { !known.contains($0.key) }) {
            throw CaptureError("\(field).\(shown(unknown.key))", "unknown member")
        }
        // A day in milliseconds: no session with a meter lasts longer.
        guard let ms = json["ms"]?.int64Value, ms >= 0, ms <= 86_400_000 else {
            throw CaptureError("\(field).ms", "must be an integer of milliseconds in 0...86400000")
        }
        guard let opText = json["op"]?.stringValue, let kind = CaptureEvent.Kind(rawValue: opText) else {
            throw CaptureError("\(field).op", "must be one of \(CaptureEvent.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var uuid: GATTUUID?
        if let text = json["uuid"] {
            guard let s = text.stringValue, let parsed = GATTUUID(string: s) ?? GATTUUID(vendor: s) else {
                throw CaptureError("\(field).uuid", "must be a 16-bit UUID (2a18) or a 128-bit one")
            }
            uuid = parsed
        }
        if uuid == nil, kind != .disconnected { throw CaptureError("\(field).uuid", "is missing") }
        var value: [UInt8]?
        if let text = json["value"] {
            guard let s = text.stringValue, s.utf8.count <= 2 * maximumValueLength + 1024,
                  let bytes = hexBytes(s), bytes.count <= maximumValueLength else {
                throw CaptureError("\(field).value", "must be hex digits of at most \(maximumValueLength) bytes")
            }
            value = bytes
        }
        let error = try optionalText(json, "error", field: "\(field).error")
        var withheld = false
        if let flag = json["withheld"] {
            guard let b = flag.boolValue else { throw CaptureError("\(field).withheld", "must be true or false") }
            withheld = b
        }
        if kind == .value, value == nil, !withheld { throw CaptureError("\(field).value", "is missing") }
        return CaptureEvent(milliseconds: ms, kind: kind, uuid: uuid, value: value, error: error, withheld: withheld)
    }

    static func optionalText(_ json: JSONValue, _ key: String, field: String? = nil) throws(CaptureError) -> String? {
        guard let value = json[key], value != .null else { return nil }
        guard let text = value.stringValue, text.count <= 200 else { throw CaptureError(field ?? key, "must be a string of at most 200 characters") }
        return text
    }

    /// A member name from the file, in an error message: printable and short.
    static func shown(_ key: String) -> String { TerminalText.escaped(String(key.prefix(40))) }
}
