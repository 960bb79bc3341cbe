#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Support

/// The daemon's run-state file (`<database>.daemon.json`): what only the running process knows
/// (radio, sessions, counters). `status` reads it beside the database. No secrets, no health values.
public enum DaemonStateFile {
    public static func path(database: String) -> String { database + ".daemon.json" }

    public static func json(_ s: DaemonSnapshot) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("pid", Int(s.pid))
        o.add("phase", s.phase.rawValue)
        o.add("started_at", Int(s.startedAt))
        o.add("updated_at", Int(s.updatedAt))
        var radio = JSONObjectBuilder()
        radio.add("bluetoothd_running", s.radio.bluetoothdRunning)
        radio.add("bluetoothd_answering", s.bluetoothdAnswering)
        radio.add("adapter", s.radio.adapter.map(JSONValue.string) ?? .null)
        radio.add("adapter_powered", s.radio.adapterPowered)
        radio.add("power_state", s.radio.powerState.map(JSONValue.string) ?? .null)
        radio.add("discovering", s.radio.discovering)
        radio.add("watching", s.watching.map { JSONValue.string($0.rawValue) } ?? .null)
        o.add("radio", radio.value)
        o.add("paired_meters", s.pairedMeters)
        o.add("repair_needed", s.repairNeeded)
        o.add("active_sessions", s.activeSessions)
        var c = JSONObjectBuilder()
        c.add("connects", s.counters.connects)
        var failures = JSONObjectBuilder()
        for key in s.counters.failures.keys.sorted() { failures.add(key, s.counters.failures[key] ?? 0) }
        c.add("failures", failures.value)
        c.add("downloads", s.counters.downloads)
        c.add("readings_stored", s.counters.readingsStored)
        c.add("bluetoothd_restarts", s.counters.bluetoothdRestarts)
        c.add("reloads", s.counters.reloads)
        o.add("counters", c.value)
        o.add("last_reaction_ms", s.lastReactionMs.map { JSONValue.int($0) } ?? .null)
        o.add("last_reload_error", s.lastReloadError.map(JSONValue.string) ?? .null)
        if let alert = s.alert {
            var a = JSONObjectBuilder()
            a.add("code", alert.code)
            a.add("name", DaemonSnapshot.codeName(alert.code))
            a.add("message", alert.message)
            o.add("alert", a.value)
        } else {
            o.add("alert", JSONValue.null)
        }
        return o.value
    }
}

/// The daemon's run-state file as `status` reads it back. Every field is optional: the file may be
/// missing, from an older version, or left by a daemon that was killed.
public struct DaemonStatus: Sendable {
    /// The pid in the file is alive (and the file does not say it stopped).
    public var running = false
    public var pid: Int32?
    public var phase: DaemonPhase?
    public var startedAt: UnixMillis?
    public var updatedAt: UnixMillis?
    public var watching: String?
    public var activeSessions: [String] = []
    /// Plain counters (`connects`) and counters by reason (`failures`), as the daemon wrote them.
    public var counters: [String: Int] = [:]
    public var countersByReason: [String: [String: Int]] = [:]
    public var lastReloadError: String?
    public var lastReactionMs: Int?
    /// What keeps the daemon from working (phase `alert`): code, name, message.
    public var alert: (code: Int, name: String, message: String)?

    public init() {}
}

extension DaemonStateFile {
    /// Reads the file beside `database`; an empty status (not running) when it is missing or not JSON.
    public static func read(database: String) -> DaemonStatus {
        var status = DaemonStatus()
        let path = path(database: database)
        guard let bytes = FileContents.read(path, limit: 1 << 20),
              let object = try? JSONParser.parse(bytes), case .object = object else { return status }
        let pid = object["pid"]?.int64Value.flatMap { Int32(exactly: $0) }
        status.pid = pid
        status.phase = object["phase"]?.stringValue.map(DaemonPhase.init(rawValue:))
        status.startedAt = object["started_at"]?.int64Value
        status.updatedAt = object["updated_at"]?.int64Value
        status.watching = object["radio"]?["watching"]?.stringValue
        status.activeSessions = object["active_sessions"]?.arrayValue?.compactMap(\.stringValue) ?? []
        if case let .object(members)? = object["counters"] {
            for member in members {
                let (key, value) = (member.key, member.value)
                if let n = value.int64Value.flatMap({ Int(exactly: $0) }) {
                    status.counters[key] = n
                } else if case let .object(inner) = value {
                    var map: [String: Int] = [:]
                    for m in inner { map[m.key] = m.value.int64Value.flatMap { Int(exactly: $0) } ?? 0 }
                    status.countersByReason[key] = map
                }
            }
        }
        status.lastReloadError = object["last_reload_error"]?.stringValue
        status.lastReactionMs = object["last_reaction_ms"]?.int64Value.flatMap { Int(exactly: $0) }
        if let alert = object["alert"], let code = alert["code"]?.int64Value.flatMap({ Int(exactly: $0) }) {
            status.alert = (code, alert["name"]?.stringValue ?? DaemonSnapshot.codeName(code), alert["message"]?.stringValue ?? "")
        }
        if let pid, pid > 0, status.phase != .stopped {
            status.running = kill(pid, 0) == 0 || errno == EPERM
        }
        return status
    }
}

extension DaemonSnapshot {
    /// The figures for the Prometheus textfile (`metrics_file`, written by `PrometheusTextfile`).
    public func metrics(now: UnixMillis) -> MetricsSnapshot {
        let code = lastErrorCode ?? 0
        var metrics = MetricsSnapshot(
            readingsStored: readingsTotal ?? 0, readingsExcluded: readingsExcluded ?? 0,
            destinations: destinations.map { d in
                DestinationMetrics(name: d.name.rawValue, uploaded: d.counts.acknowledged, pending: d.counts.pending + d.counts.inFlight,
                                   quarantined: d.counts.quarantined,
                                   oldestUnsentAgeSeconds: d.counts.oldestUnsent.map { max(0, (now - $0) / 1000) })
            },
            connects: counters.connects, connectFailures: counters.failures, networkStateCode: code,
            networkStateName: code == 0 ? nil : DaemonSnapshot.codeName(code), generatedAt: now
        )
        metrics.metersRepairNeeded = repairNeeded.count
        return metrics
    }

    /// `NETWORK_NOT_CONNECTED` for 1001, `NETWORK_TIMEOUT` for 1002, `BLUETOOTHD_NOT_ANSWERING` for 2001,
    /// `DATABASE_DAMAGED` for 2002,
    /// `HTTP n` otherwise.
    public static func codeName(_ code: Int) -> String {
        switch code {
        case 1001: "NETWORK_NOT_CONNECTED"
        case 1002: "NETWORK_TIMEOUT"
        case DaemonAlert.bluetoothdNotAnswering: "BLUETOOTHD_NOT_ANSWERING"
        case DaemonAlert.databaseDamaged: "DATABASE_DAMAGED"
        case DaemonAlert.meterBondLost: "METER_BOND_LOST"
        default: "HTTP \(code)"
        }
    }
}
