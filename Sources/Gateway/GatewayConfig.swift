import GatewayCore
import Meters
import Support
import SyncEngine

/// `[gateway]`: the daemon's own keys, with the keys its parts own read by them (the meter side's by
/// `MeterDownloadConfig`, the heartbeat's by `HeartbeatSettings`). Their fields read through this section
/// (`config.gateway.adapter`), as the file writes them.
@dynamicMemberLookup
public struct GatewaySection: Sendable, Equatable {
    public static let name = "gateway"
    /// The daemon's own keys.
    public static let keys = ["database", "log_level", "metrics_file", "on_meter_error"]
    public static let defaultDatabase = "/var/lib/glucose-gateway/gateway.sqlite3"

    /// SQLite database with readings, outbox and events.
    public var database: String = GatewaySection.defaultDatabase
    public var logLevel: LogLevel = .info
    /// Prometheus textfile written after every change; nil: none.
    public var metricsFile: String?
    /// `on_meter_error`: run like `on_network_error` when a meter needs a person (it lost its bond), with
    /// the meter's address in GATEWAY_METER; nil: none.
    public var onMeterError: [String]?
    public var meters = MeterDownloadConfig()
    public var heartbeatSettings = HeartbeatSettings()

    public init() {}

    public init(section s: inout ConfigSection) {
        if let v = s.path("database") { database = v.value }
        if let level = s.choice("log_level", { name in LogLevel.allCases.first { $0.name == name } },
                                expected: "one of error, warning, notice, info, debug") {
            logLevel = level
        }
        if let v = s.path("metrics_file") {
            if let why = ConfigFiles.replaceableProblem(v.value) { s.problem(v.line, "gateway.metrics_file: \(why)") } else { metricsFile = v.value }
        }
        meters = MeterDownloadConfig(section: &s)
        heartbeatSettings = HeartbeatSettings(section: &s)
        if let command = s.command("on_meter_error") { onMeterError = command }
    }

    public subscript<T>(dynamicMember keyPath: KeyPath<MeterDownloadConfig, T>) -> T { meters[keyPath: keyPath] }
    public subscript<T>(dynamicMember keyPath: KeyPath<HeartbeatSettings, T>) -> T { heartbeatSettings[keyPath: keyPath] }

    public var summaryLines: [String] {
        ["[gateway]", "database: \(database)", "log_level: \(logLevel.name)", "metrics_file: \(metricsFile ?? "(not set)")"]
            + meters.summaryLines + heartbeatSettings.summaryLines
            + ["on_meter_error: \(onMeterError.map(ShellWords.describe) ?? "(not set)")"]
    }
}

/// The whole configuration: each section as its owner read it. Every field has its default, so
/// `GatewayConfig()` is a valid configuration with no upload destination.
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

    /// What the uploader runs with.
    public var upload: UploadSettings { UploadSettings(nightscout: nightscout, fhir: fhir, mqtt: mqtt, network: network) }

    /// Secret-free lines describing the effective configuration, for `config check`.
    public func summaryLines() -> [String] {
        gateway.summaryLines + nightscout.summaryLines + fhir.summaryLines + mqtt.summaryLines + network.summaryLines
    }
}
