import GatewayCore
import Support

/// A secret (Nightscout API secret or token, FHIR bearer token). Its text is reachable only through
/// `value`; printing, interpolating, dumping or mirroring it shows `(secret)`.
public struct ConfigSecret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public let value: String
    /// Where it came from: `file` is the secret file's path, nil when written inline in the config.
    public let file: String?

    public init(_ value: String, file: String? = nil) {
        self.value = value
        self.file = file
    }

    public var description: String { "(secret)" }
    public var debugDescription: String { "(secret)" }
    public var customMirror: Mirror { Mirror(self, children: [:]) }

    /// `(set)` or `(set, from FILE)`: what status output may say about a secret.
    public var summary: String { file.map { "(set, from \($0))" } ?? "(set)" }
}

/// `[gateway]`: the local side.
public struct GatewaySection: Sendable, Equatable {
    public static let defaultDatabase = "/var/lib/glucose-gateway/gateway.sqlite3"
    public static let clockSkewThresholdRange = 0...86_400
    public static let downloadIdleTimeoutRange = 5...600
    public static let futureToleranceRange = 0...86_400

    /// SQLite database with readings, outbox and events.
    public var database: String = GatewaySection.defaultDatabase
    /// Adapter name (`hci0`) or address; nil: the first powered adapter.
    public var adapter: String?
    public var logLevel: LogLevel = .info
    /// Prometheus textfile written after every change; nil: none.
    public var metricsFile: String?
    /// IANA zone for meters paired without `--timezone`; nil: the system zone.
    public var timeZone: String?
    /// Correct meter times when the meter clock is off by more than the threshold.
    public var clockSkewCorrection: Bool = true
    public var clockSkewThresholdSeconds: Int = 120
    /// `set_meter_clock`: write the gateway's time to a meter whose clock is off by more than the threshold
    /// (opt-in: it writes to a medical device).
    public var setMeterClock: Bool = false
    /// Readings more than this far ahead of the gateway's clock at download are kept as `time-in-future`.
    public var futureToleranceSeconds: Int = 600
    /// A download with no data for this long is abandoned (and retried on the next connection).
    public var downloadIdleTimeoutSeconds: Int = 30
    public var scanMode: ScanMode = .discovery
    /// `heartbeat_url`: the monitor pinged while the gateway is healthy; nil: no heartbeat. A capability
    /// (anyone holding it can report for this gateway), so it is kept like a secret and shown as
    /// scheme://host only.
    public var heartbeatURL: ConfigSecret?
    public var heartbeatAPI: HeartbeatAPI = .healthchecks
    public var heartbeatIntervalSeconds: Int = HeartbeatPolicy.defaultIntervalSeconds
    public var heartbeatMaxPendingSeconds: Int = HeartbeatPolicy.defaultMaxPendingSeconds
    public var heartbeatOnFail: HeartbeatFailMode = .report
    /// `on_meter_error`: run like `on_network_error` when a meter needs a person (it lost its bond), with
    /// the meter's address in GATEWAY_METER; nil: none.
    public var onMeterError: [String]?

    public init() {}

    /// The heartbeat's monitor and policy, nil when `heartbeat_url` is not set.
    public var heartbeat: (target: HeartbeatTarget, policy: HeartbeatPolicy)? {
        guard let url = heartbeatURL else { return nil }
        return (HeartbeatTarget(url: url.value, api: heartbeatAPI),
                HeartbeatPolicy(interval: .seconds(heartbeatIntervalSeconds), maxPending: .seconds(heartbeatMaxPendingSeconds),
                                onFail: heartbeatOnFail))
    }
}

/// How the gateway proves itself to Nightscout.
public enum NightscoutCredential: Sendable, Equatable {
    /// `API_SECRET`, sent as its SHA-1 hex digest in the `api-secret` header.
    case apiSecret(ConfigSecret)
    /// An access token made in Nightscout's admin tools.
    case token(ConfigSecret)

    public var secret: ConfigSecret {
        switch self {
        case .apiSecret(let s), .token(let s): s
        }
    }
}

/// `[nightscout]`.
public struct NightscoutSection: Sendable, Equatable {
    /// Default: true when `url` is set.
    public var enabled: Bool = false
    /// Site URL, `http` or `https`, without a trailing slash.
    public var url: String?
    public var credential: NightscoutCredential?
    /// PEM bundle to trust instead of the system store.
    public var caFile: String?
    /// `api`: "v1" (the default) or "v3" (needs `token` or `token_file`).
    public var api: String = "v1"
    /// Each uploadable reading also as a `BG Check` treatment (AAPS and xDrip+ read those, not `mbg`).
    public var treatments: Bool = false
    /// The unit of those treatments' glucose.
    public var units: Units = .mgdl
    /// A HI or LO reading as a `Note` treatment without a number.
    public var outOfRangeNotes: Bool = false

    public enum Units: String, Sendable, Equatable {
        case mgdl = "mg/dl"
        case mmol
    }

    public init() {}
}

/// `[fhir]`.
public struct FHIRSection: Sendable, Equatable {
    public var enabled: Bool = false
    /// FHIR R4 base, without a trailing slash.
    public var baseURL: String?
    /// Reference for `Observation.subject`, such as `Patient/123`.
    public var subject: String?
    public var bearerToken: ConfigSecret?
    public var caFile: String?

    public init() {}
}

/// `[mqtt]`: reading events and Home Assistant discovery on an MQTT broker.
public struct MQTTSection: Sendable, Equatable {
    public static let defaultTopicPrefix = "glucose-gateway"
    /// Default: true when `url` is set.
    public var enabled: Bool = false
    public var tls: Bool = false
    public var host: String?
    /// 1883 for `mqtt://`, 8883 for `mqtts://` when the URL names none.
    public var port: Int?
    public var username: String?
    public var password: ConfigSecret?
    public var topicPrefix: String = MQTTSection.defaultTopicPrefix
    public var discovery: Bool = true
    public var caFile: String?

    public init() {}

    /// `mqtt://host:port`, without credentials.
    public var url: String? {
        guard let host, let port else { return nil }
        return (tls ? "mqtts://" : "mqtt://") + (host.contains(":") ? "[\(host)]" : host) + ":\(port)"
    }
}

/// `[network]`: retries, timeouts and recovery.
public struct NetworkSection: Sendable, Equatable {
    public static let retryCountRange = 0...10
    public static let networkTimeoutRange = 100...10_000

    /// Retries of one upload before it waits for the next round.
    public var retryCount: Int = 3
    public var networkTimeoutMilliseconds: Int = 3000
    /// Probed to tell "network down" from "server down"; never an upload server.
    public var healthCheckURL: String?
    /// Replay the outbox automatically when connectivity returns.
    public var recoveryMode: Bool = true
    /// Skip (quarantine) an upload the server keeps refusing instead of blocking the queue behind it.
    public var errorBypass: Bool = false
    /// Program and arguments run on each new network error (the code and message in its environment); nil: none.
    public var onNetworkError: [String]?

    public init() {}
}

/// The whole configuration, typed. Every field has its default, so `GatewayConfig()` is a valid
/// configuration with no upload destination.
public struct GatewayConfig: Sendable, Equatable {
    public static let defaultPath = "/etc/glucose-gateway/glucose-gateway.toml"
    public static let environmentVariable = "GLUCOSE_GATEWAY_CONFIG"

    /// The file this came from; nil for built-in defaults.
    public var path: String?
    public var gateway = GatewaySection()
    public var nightscout = NightscoutSection()
    public var fhir = FHIRSection()
    public var mqtt = MQTTSection()
    public var network = NetworkSection()

    public init() {}

    /// True when at least one upload destination is enabled.
    public var hasDestination: Bool { nightscout.enabled || fhir.enabled || mqtt.enabled }

    /// `PROGRAM (N arguments)`: how a command line is shown.
    public static func describeCommand(_ words: [String]) -> String {
        guard let program = words.first else { return "(empty)" }
        let n = words.count - 1
        return n == 0 ? program : "\(program) (\(n) argument\(n == 1 ? "" : "s"))"
    }

    /// ConfigSecret-free lines describing the effective configuration, for `config check` and `status`.
    public func summaryLines() -> [String] {
        func opt(_ s: String?) -> String { s ?? "(not set)" }
        var lines: [String] = []
        lines.append("[gateway]")
        lines.append("database: \(gateway.database)")
        lines.append("adapter: \(gateway.adapter ?? "(first powered)")")
        lines.append("log_level: \(gateway.logLevel.name)")
        lines.append("metrics_file: \(opt(gateway.metricsFile))")
        lines.append("time_zone: \(gateway.timeZone ?? "(system)")")
        lines.append("clock_skew_correction: \(gateway.clockSkewCorrection)")
        lines.append("clock_skew_threshold_s: \(gateway.clockSkewThresholdSeconds)")
        lines.append("set_meter_clock: \(gateway.setMeterClock)")
        lines.append("future_tolerance_s: \(gateway.futureToleranceSeconds)")
        lines.append("download_idle_timeout_s: \(gateway.downloadIdleTimeoutSeconds)")
        lines.append("scan_mode: \(gateway.scanMode.rawValue)")
        lines.append("heartbeat_url: \(gateway.heartbeatURL.map { HeartbeatTarget.origin($0.value) + " (path hidden)" } ?? "(not set)")")
        lines.append("heartbeat_api: \(gateway.heartbeatAPI.rawValue)")
        lines.append("heartbeat_interval_s: \(gateway.heartbeatIntervalSeconds)")
        lines.append("heartbeat_max_pending_s: \(gateway.heartbeatMaxPendingSeconds)")
        lines.append("heartbeat_on_fail: \(gateway.heartbeatOnFail.rawValue)")
        lines.append("on_meter_error: \(gateway.onMeterError.map(Self.describeCommand) ?? "(not set)")")
        lines.append("[nightscout]")
        lines.append("enabled: \(nightscout.enabled)")
        lines.append("url: \(opt(nightscout.url))")
        switch nightscout.credential {
        case .apiSecret(let s): lines.append("api_secret: \(s.summary)")
        case .token(let s): lines.append("token: \(s.summary)")
        case nil: lines.append("credential: (not set)")
        }
        lines.append("ca_file: \(nightscout.caFile ?? "(system)")")
        lines.append("api: \(nightscout.api)")
        lines.append("treatments: \(nightscout.treatments)")
        lines.append("units: \(nightscout.units.rawValue)")
        lines.append("out_of_range_notes: \(nightscout.outOfRangeNotes)")
        lines.append("[fhir]")
        lines.append("enabled: \(fhir.enabled)")
        lines.append("base_url: \(opt(fhir.baseURL))")
        lines.append("subject: \(opt(fhir.subject))")
        lines.append("bearer_token: \(fhir.bearerToken?.summary ?? "(not set)")")
        lines.append("ca_file: \(fhir.caFile ?? "(system)")")
        lines.append("[mqtt]")
        lines.append("enabled: \(mqtt.enabled)")
        lines.append("url: \(opt(mqtt.url))")
        lines.append("username: \(opt(mqtt.username))")
        lines.append("password: \(mqtt.password?.summary ?? "(not set)")")
        lines.append("topic_prefix: \(mqtt.topicPrefix)")
        lines.append("discovery: \(mqtt.discovery)")
        lines.append("ca_file: \(mqtt.caFile ?? "(system)")")
        lines.append("[network]")
        lines.append("retry_count: \(network.retryCount)")
        lines.append("network_timeout_ms: \(network.networkTimeoutMilliseconds)")
        lines.append("health_check_url: \(opt(network.healthCheckURL))")
        lines.append("recovery_mode: \(network.recoveryMode)")
        lines.append("error_bypass: \(network.errorBypass)")
        // Only the program: its arguments may carry a token or a phone number.
        lines.append("on_network_error: \(network.onNetworkError.map(Self.describeCommand) ?? "(not set)")")
        return lines
    }
}
