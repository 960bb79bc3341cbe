#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore

/// The daemon's run-state file (`<database>.daemon.json`): what only the running process knows
/// (radio, sessions, counters). `status` reads it beside the database. No secrets, no health values.
public enum DaemonStateFile {
    public static func path(database: String) -> String { database + ".daemon.json" }

    public static func json(_ s: DaemonSnapshot) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("pid", Int(s.pid))
        o.add("phase", s.phase)
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

extension DaemonSnapshot {
    /// The figures for the Prometheus textfile (`metrics_file`, written by `PrometheusTextfile`).
    public func metrics(now: UnixMillis) -> MetricsSnapshot {
        let code = lastErrorCode ?? 0
        return MetricsSnapshot(
            readingsStored: readingsTotal ?? 0, readingsExcluded: readingsExcluded ?? 0,
            destinations: destinations.map { d in
                DestinationMetrics(name: d.name.rawValue, uploaded: d.counts.acknowledged, pending: d.counts.pending + d.counts.inFlight,
                                   quarantined: d.counts.quarantined,
                                   oldestUnsentAgeSeconds: d.counts.oldestUnsent.map { max(0, (now - $0) / 1000) })
            },
            connects: counters.connects, connectFailures: counters.failures, networkStateCode: code,
            networkStateName: code == 0 ? nil : DaemonSnapshot.codeName(code), generatedAt: now
        )
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
        default: "HTTP \(code)"
        }
    }
}
