import Gateway
import GatewayCore
import Meters
import Support

/// `status --json`: times as Unix milliseconds, null when unknown.
extension StatusReport {
    static func time(_ ms: UnixMillis?) -> JSONValue { ms.map { JSONValue.int($0) } ?? .null }
    static func int(_ v: Int?) -> JSONValue { v.map { JSONValue.int($0) } ?? .null }
    static func string(_ v: String?) -> JSONValue { v.map(JSONValue.string) ?? .null }

    var json: JSONValue {
        var root = JSONObjectBuilder()
        root.add("generated_at", Int(generatedAt))

        var d = JSONObjectBuilder()
        d.add("running", daemon.running)
        d.add("pid", daemon.pid.map { JSONValue.int($0) } ?? .null)
        d.add("phase", Self.string(daemon.phase?.rawValue))
        d.add("started_at", Self.time(daemon.startedAt))
        d.add("updated_at", Self.time(daemon.updatedAt))
        d.add("watching", Self.string(daemon.watching))
        d.add("active_sessions", daemon.activeSessions)
        var counters = JSONObjectBuilder()
        for key in Set(daemon.counters.keys).union(daemon.countersByReason.keys).sorted() {
            if let n = daemon.counters[key] {
                counters.add(key, n)
            } else if let map = daemon.countersByReason[key] {
                var inner = JSONObjectBuilder()
                for k in map.keys.sorted() { inner.add(k, map[k] ?? 0) }
                counters.add(key, inner.value)
            }
        }
        d.add("counters", counters.value)
        d.add("last_reaction_ms", Self.int(daemon.lastReactionMs))
        d.add("last_reload_error", Self.string(daemon.lastReloadError))
        if let alert = daemon.alert {
            var a = JSONObjectBuilder()
            a.add("code", alert.code)
            a.add("name", alert.name)
            a.add("message", alert.message)
            d.add("alert", a.value)
        } else {
            d.add("alert", JSONValue.null)
        }
        root.add("daemon", d.value)
        root.add("heartbeat", heartbeat.map { h -> JSONValue in
            var o = JSONObjectBuilder()
            o.add("monitor", h.monitor)
            o.add("at", Self.time(h.report.at))
            o.add("signal", h.report.signal)
            o.add("reason", Self.string(h.report.reason))
            o.add("delivered", h.report.delivered)
            o.add("error", Self.string(h.report.error))
            return o.value
        } ?? .null)

        var b = JSONObjectBuilder()
        b.add("bus_reachable", bluetooth.busReachable)
        b.add("bluetoothd_running", bluetooth.bluetoothdRunning)
        b.add("bluetoothd_answering", bluetooth.bluetoothdRunning && bluetooth.bluetoothdAnswering)
        b.add("adapter", Self.string(bluetooth.adapter))
        b.add("adapter_address", Self.string(bluetooth.address))
        b.add("powered", bluetooth.powered)
        b.add("power_state", Self.string(bluetooth.powerState))
        b.add("discovering", bluetooth.discovering)
        b.add("error", Self.string(bluetooth.error))
        root.add("bluetooth", b.value)

        var s = JSONObjectBuilder()
        s.add("database", store.database)
        s.add("exists", store.exists)
        s.add("readings", store.readings)
        s.add("excluded_readings", store.excluded)
        s.add("error", Self.string(store.error))
        s.add("read_only", Self.string(store.readOnly))
        root.add("store", s.value)

        root.add("meters", .array(store.meters.map { m in
            var o = JSONObjectBuilder()
            o.add("address", m.info.address)
            o.add("name", Self.string(m.info.name))
            o.add("model", Self.string(m.info.model))
            o.add("serial", Self.string(m.info.serial))
            o.add("time_zone", m.info.timeZone)
            o.add("paired_at", Self.time(m.info.pairedAt))
            o.add("last_seen", Self.time(m.info.lastSeen))
            o.add("last_sync", Self.time(m.info.lastSync))
            o.add("highest_sequence", Self.int(m.info.highestSequence))
            o.add("clock_skew_seconds", Self.int(m.info.lastClockSkewSeconds))
            o.add("readings", m.readings)
            o.add("single_bond", m.info.keepsSingleBond)
            o.add("state", m.info.bondLostAt == nil ? "ok" : "re-pair-needed")
            o.add("bond_lost_at", Self.time(m.info.bondLostAt))
            o.add("handling", .array(m.info.handling.kinds.map { .string($0.rawValue) }))
            return o.value
        }))
        root.add("problems", .array(problems.map(JSONValue.string)))

        root.add("destinations", .array(store.destinations.map { dest in
            var o = JSONObjectBuilder()
            o.add("name", dest.name.rawValue)
            o.add("enabled", dest.enabled)
            o.add("state", (dest.state?.state ?? .ok).rawValue)
            var e = JSONObjectBuilder()
            if let state = dest.state, let code = state.lastErrorCode {
                e.add("code", code)
                e.add("name", DaemonSnapshot.codeName(code))
                e.add("message", Self.string(state.lastErrorMessage))
                e.add("at", Self.time(state.lastErrorAt))
                o.add("last_error", e.value)
            } else {
                o.add("last_error", JSONValue.null)
            }
            o.add("pending", dest.counts.pending + dest.counts.inFlight)
            o.add("quarantined", dest.counts.quarantined)
            o.add("uploaded", dest.counts.acknowledged)
            o.add("oldest_unsent_age_seconds", dest.oldestUnsentAgeSeconds.map { JSONValue.int($0) } ?? .null)
            o.add("last_success_at", Self.time(dest.state?.lastSuccessAt))
            return o.value
        }))
        return root.value
    }
}
