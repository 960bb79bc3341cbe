import GatewayCore
import Support
import Transport

// The upload sections of the config file, read and validated here, once: `[nightscout]`, `[fhir]` and
// `[mqtt]` (one per destination) and `[network]` (recovery). Each keeps what the file says even when the
// destination is off, for `config check`; `settings` is what the uploader runs with, nil when off.

/// How the gateway proves itself to Nightscout.
public enum NightscoutCredential: Sendable, Equatable {
    /// `API_SECRET`, sent as its SHA-1 hex digest in the `api-secret` header.
    case apiSecret(Secret)
    /// An access token made in Nightscout's admin tools.
    case token(Secret)

    public var secret: Secret {
        switch self {
        case .apiSecret(let s), .token(let s): s
        }
    }
}

/// `[nightscout]`.
public struct NightscoutSection: Sendable, Equatable {
    public static let name = "nightscout"
    public static let keys = [
        "enabled", "url", "api_secret", "api_secret_file", "token", "token_file", "ca_file", "api", "treatments", "units",
        "out_of_range_notes", "device_status", "device_status_interval_s",
    ]
    /// Nightscout refuses API secrets shorter than this.
    public static let minimumSecretLength = 12

    /// Default: true when `url` is set.
    public var enabled: Bool = false
    /// Site URL, `http` or `https`, without a trailing slash.
    public var url: String?
    public var credential: NightscoutCredential?
    /// PEM bundle to trust instead of the system store.
    public var caFile: String?
    /// `api`: v1 (the default) or v3 (needs `token` or `token_file`).
    public var api: NightscoutAPI = .v1
    /// Each uploadable reading also as a `BG Check` treatment (AAPS and xDrip+ read those, not `mbg`).
    public var treatments: Bool = false
    /// The unit of those treatments' glucose.
    public var units: NightscoutUnits = .mgdl
    /// A HI or LO reading as a `Note` treatment without a number.
    public var outOfRangeNotes: Bool = false
    /// `device_status`: the gateway reports itself in Nightscout's `devicestatus` (see `DeviceStatusReporter`).
    public var deviceStatus: Bool = false
    /// `device_status_interval_s`: how often while nothing happens.
    public var deviceStatusIntervalSeconds = DeviceStatusPolicy.defaultIntervalSeconds

    public init() {}

    public init(section s: inout ConfigSection) {
        let enabled = s.bool("enabled")
        let url = s.httpURL("url")
        self.url = url?.value.text
        self.enabled = enabled?.value ?? (url != nil)
        caFile = s.certificateFile("ca_file")
        if let v = s.bool("treatments") { treatments = v.value }
        if let v = s.bool("out_of_range_notes") { outOfRangeNotes = v.value }
        if let v = s.bool("device_status") { deviceStatus = v.value }
        if let v = s.integer("device_status_interval_s", in: DeviceStatusPolicy.intervalRange) { deviceStatusIntervalSeconds = v.value }
        if let v = s.choice("units", NightscoutUnits.init(rawValue:), expected: "\"mg/dl\" or \"mmol\"") { units = v }

        // One credential at most: the first one set wins, others are errors.
        var credential: (key: String, line: Int)?
        let credentialEntries = ["api_secret", "api_secret_file", "token", "token_file"]
            .compactMap { s.entries[$0] }
            .sorted { $0.line < $1.line }
        for entry in credentialEntries {
            let key = entry.key
            if let first = credential {
                s.problem(entry.line, "nightscout.\(key): set only one of api_secret, api_secret_file, token, token_file (\(first.key) is set on line \(first.line))")
                continue
            }
            let secret = key.hasSuffix("_file") ? s.secretFile(key).map { Secret($0.text, file: $0.file) } : s.inlineSecret(key).map { Secret($0) }
            credential = (key, entry.line)
            guard let secret else { continue }
            if key.hasPrefix("api_secret") && secret.value.count < Self.minimumSecretLength {
                s.problem(entry.line, "nightscout.\(key): Nightscout API secrets are at least \(Self.minimumSecretLength) characters long")
                continue
            }
            self.credential = key.hasPrefix("api_secret") ? .apiSecret(secret) : .token(secret)
        }
        if self.enabled {
            let line = enabled?.line ?? s.headerLine ?? 0
            if !s.has("url") { s.problem(line, "nightscout.url is required when [nightscout] is enabled") }
            if credential == nil { s.problem(line, "[nightscout] needs one of api_secret, api_secret_file, token or token_file") }
        }
        // `api = "v1" | "v3"`; v3 authenticates with an access token only.
        if let v = s.string("api") {
            if let api = NightscoutAPI(rawValue: v.value) {
                self.api = api
                if api == .v3, let key = credential?.key, key.hasPrefix("api_secret") {
                    s.problem(v.line, "nightscout.api = \"v3\" takes an access token (token or token_file), not \(key)")
                }
            } else {
                s.problem(v.line, "nightscout.api: expected \"v1\" or \"v3\"")
            }
        }
    }

    /// What the uploader runs with; nil when the destination is off.
    public var settings: NightscoutSettings? {
        guard enabled, let url else { return nil }
        var settings = NightscoutSettings(url: url, caFile: caFile, treatments: treatments, units: units, outOfRangeNotes: outOfRangeNotes)
        settings.api = api
        if deviceStatus { settings.deviceStatus = DeviceStatusPolicy(interval: .seconds(deviceStatusIntervalSeconds)) }
        switch credential {
        case .apiSecret(let s): settings.apiSecret = s
        case .token(let s): settings.token = s
        case nil: break
        }
        return settings
    }

    public var summaryLines: [String] {
        var lines = ["[nightscout]", "enabled: \(enabled)", "url: \(url ?? "(not set)")"]
        switch credential {
        case .apiSecret(let s): lines.append("api_secret: \(s.summary)")
        case .token(let s): lines.append("token: \(s.summary)")
        case nil: lines.append("credential: (not set)")
        }
        lines.append("ca_file: \(caFile ?? "(system)")")
        lines.append("api: \(api.rawValue)")
        lines.append("treatments: \(treatments)")
        lines.append("units: \(units.rawValue)")
        lines.append("out_of_range_notes: \(outOfRangeNotes)")
        lines.append("device_status: " + (deviceStatus ? "every \(deviceStatusIntervalSeconds) s and after downloads" : "false"))
        return lines
    }

    /// Keys whose secret is written in the config itself.
    public var inlineSecretKeys: [String] {
        switch credential {
        case .apiSecret(let s) where s.file == nil: ["nightscout.api_secret"]
        case .token(let s) where s.file == nil: ["nightscout.token"]
        default: []
        }
    }
}

/// `[fhir]`.
public struct FHIRSection: Sendable, Equatable {
    public static let name = "fhir"
    public static let keys = ["enabled", "base_url", "subject", "bearer_token", "bearer_token_file", "ca_file"]

    public var enabled: Bool = false
    /// FHIR R4 base, without a trailing slash.
    public var baseURL: String?
    /// Reference for `Observation.subject`, such as `Patient/123`.
    public var subject: String?
    public var bearerToken: Secret?
    public var caFile: String?

    public init() {}

    public init(section s: inout ConfigSection) {
        let enabled = s.bool("enabled")
        self.enabled = enabled?.value ?? false
        baseURL = s.httpURL("base_url")?.value.text
        if let v = s.string("subject") {
            if Self.isSubjectReference(v.value) { subject = v.value } else {
                s.problem(v.line, "fhir.subject: expected a reference such as \"Patient/123\" (Patient, Group, Device or Location; id of 1-64 letters, digits, '-' or '.')")
            }
        }
        caFile = s.certificateFile("ca_file")
        if let inline = s.entries["bearer_token"], let file = s.entries["bearer_token_file"] {
            let later = inline.line > file.line ? inline : file
            let earlier = inline.line > file.line ? file : inline
            s.problem(later.line, "fhir.\(later.key): set only one of bearer_token, bearer_token_file (\(earlier.key) is set on line \(earlier.line))")
        } else if s.has("bearer_token") {
            bearerToken = s.inlineSecret("bearer_token").map { Secret($0) }
        } else if s.has("bearer_token_file") {
            bearerToken = s.secretFile("bearer_token_file").map { Secret($0.text, file: $0.file) }
        }
        if self.enabled {
            let line = enabled?.line ?? s.headerLine ?? 0
            if !s.has("base_url") { s.problem(line, "fhir.base_url is required when [fhir] is enabled") }
            if !s.has("subject") { s.problem(line, "fhir.subject is required when [fhir] is enabled") }
        }
    }

    static func isSubjectReference(_ text: String) -> Bool {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, ["Patient", "Group", "Device", "Location"].contains(String(parts[0])) else { return false }
        let id = parts[1]
        return (1...64).contains(id.count)
            && id.unicodeScalars.allSatisfy { ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) || $0 == "-" || $0 == "." }
    }

    /// What the uploader runs with; nil when the destination is off.
    public var settings: FHIRSettings? {
        guard enabled, let baseURL, let subject else { return nil }
        return FHIRSettings(baseURL: baseURL, subject: subject, token: bearerToken, caFile: caFile)
    }

    public var summaryLines: [String] {
        ["[fhir]", "enabled: \(enabled)", "base_url: \(baseURL ?? "(not set)")", "subject: \(subject ?? "(not set)")",
         "bearer_token: \(bearerToken?.summary ?? "(not set)")", "ca_file: \(caFile ?? "(system)")"]
    }

    public var inlineSecretKeys: [String] {
        if let bearerToken, bearerToken.file == nil { return ["fhir.bearer_token"] }
        return []
    }
}

/// `[mqtt]`: reading events and Home Assistant discovery on an MQTT broker.
public struct MQTTSection: Sendable, Equatable {
    public static let name = "mqtt"
    public static let keys = ["enabled", "url", "username", "password_file", "topic_prefix", "discovery", "ca_file"]

    /// Default: true when `url` is set.
    public var enabled: Bool = false
    public var tls: Bool = false
    public var host: String?
    /// 1883 for `mqtt://`, 8883 for `mqtts://` when the URL names none.
    public var port: Int?
    public var username: String?
    public var password: Secret?
    public var topicPrefix: String = MQTTSettings.defaultTopicPrefix
    public var discovery: Bool = true
    public var caFile: String?

    public init() {}

    public init(section s: inout ConfigSection) {
        let enabled = s.bool("enabled")
        if let v = s.string("url") {
            switch ConfigURL.brokerURL(v.value) {
            case .success(let parts):
                tls = parts.tls
                host = parts.host
                port = parts.port
            case .failure(let reason):
                s.problem(v.line, "mqtt.url: \(reason.message)")
            }
        }
        self.enabled = enabled?.value ?? s.has("url")
        if let v = s.string("username") {
            if let message = ConfigSection.secretProblem(v.value) { s.problem(v.line, "mqtt.username: \(message)") } else { username = v.value }
        }
        // The password only from a file (mode 600), never written in the config itself.
        if let line = s.line(of: "password_file") {
            password = s.secretFile("password_file").map { Secret($0.text, file: $0.file) }
            if !s.has("username") { s.problem(line, "mqtt.password_file: a password needs a username") }
        }
        if let v = s.string("topic_prefix") {
            if let message = Self.topicPrefixProblem(v.value) { s.problem(v.line, "mqtt.topic_prefix: \(message)") } else { topicPrefix = v.value }
        }
        if let v = s.bool("discovery") { discovery = v.value }
        caFile = s.certificateFile("ca_file")
        if caFile != nil, !tls, let line = s.line(of: "ca_file"), host != nil {
            s.problem(line, "mqtt.ca_file: only used with an mqtts:// URL")
        }
        if self.enabled, !s.has("url") {
            s.problem(enabled?.line ?? s.headerLine ?? 0, "mqtt.url is required when [mqtt] is enabled")
        }
    }

    /// Topic levels of letters, digits, `_`, `-` and `.`, separated by single `/`: no wildcard, no `$`
    /// start (broker-reserved), no empty level.
    static func topicPrefixProblem(_ text: String) -> String? {
        if text.utf8.count > 128 { return "longer than 128 bytes" }
        let levels = text.split(separator: "/", omittingEmptySubsequences: false)
        if levels.contains(where: \.isEmpty) { return "must not start or end with '/' or contain '//'" }
        let ok = text.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "_-./".unicodeScalars.contains($0))
        }
        if !ok { return "expected topic levels of letters, digits, '_', '-' and '.' separated by '/' (no '+', '#' or spaces)" }
        let discovery = MQTTSettings.discoveryPrefix
        if text == discovery || text.hasPrefix(discovery + "/") {
            return "must not be under \(discovery)/, which holds the discovery configs"
        }
        return nil
    }

    /// `mqtt://host:port`, without credentials.
    public var url: String? {
        guard let host, let port else { return nil }
        return MQTTBrokerSettings(host: host, port: port, tls: tls).origin
    }

    /// What the uploader runs with; nil when the destination is off.
    public var settings: MQTTSettings? {
        guard enabled, let host, let port else { return nil }
        let broker = MQTTBrokerSettings(host: host, port: port, tls: tls, username: username, password: password, caFile: caFile)
        return MQTTSettings(broker: broker, topicPrefix: topicPrefix, discovery: discovery)
    }

    public var summaryLines: [String] {
        ["[mqtt]", "enabled: \(enabled)", "url: \(url ?? "(not set)")", "username: \(username ?? "(not set)")",
         "password: \(password?.summary ?? "(not set)")", "topic_prefix: \(topicPrefix)", "discovery: \(discovery)",
         "ca_file: \(caFile ?? "(system)")"]
    }
}

extension ConfigSection {
    /// An `http` or `https` URL (see `ConfigURL.normalizedHTTPURL`), normalized.
    mutating func httpURL(_ key: String) -> (value: HTTPURL, line: Int)? {
        guard let v = string(key) else { return nil }
        switch ConfigURL.normalizedHTTPURL(v.value) {
        case .success(let url): return (url, v.line)
        case .failure(let reason):
            problem(v.line, "\(name).\(key): \(reason.message)")
            return nil
        }
    }
}
