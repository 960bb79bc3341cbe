import Gateway
import GatewayCore
import GlucoseProfile
import Meters
import Support

/// `status` for a terminal.
extension StatusReport {
    static func iso(_ ms: UnixMillis?) -> String {
        guard let ms else { return "never" }
        return CivilCalendar.isoUTC(millis: ms)
    }

    static func age(_ seconds: Int64) -> String {
        if seconds < 120 { return "\(seconds) s" }
        if seconds < 7200 { return "\(seconds / 60) min" }
        if seconds < 172_800 { return "\(seconds / 3600) h" }
        return "\(seconds / 86_400) days"
    }

    /// The report for a terminal. Text from outside (meter names, a server's error body, a config
    /// error, the daemon's state file) is escaped, so it cannot break a line or drive the terminal.
    var text: String {
        let e = TerminalText.escaped as (String) -> String
        var out = ""
        for problem in problems { out += "PROBLEM: \(e(problem))\n" }
        if daemon.running, let pid = daemon.pid {
            out += "daemon: running (pid \(pid)), \(e(daemon.phase?.rawValue ?? "?"))"
            if let w = daemon.watching { out += ", watching by \(e(w))" }
            if !daemon.activeSessions.isEmpty { out += ", downloading from \(e(daemon.activeSessions.joined(separator: ", ")))" }
            out += "\n"
            let connects = daemon.counters["connects"] ?? 0
            let failures = daemon.countersByReason["failures"] ?? [:]
            var line = "  since \(Self.iso(daemon.startedAt)): \(connects) meter connection\(connects == 1 ? "" : "s")"
            if !failures.isEmpty {
                line += ", failures " + failures.keys.sorted().map { "\(e($0)) \(failures[$0] ?? 0)" }.joined(separator: ", ")
            }
            out += line + "\n"
            if let reason = daemon.lastReloadError { out += "  last reload refused: \(e(reason))\n" }
            if let alert = daemon.alert { out += "  ALERT \(alert.code) \(e(alert.name)): \(e(alert.message))\n" }
        } else {
            out += "daemon: not running\n"
        }
        if let h = heartbeat {
            let r = h.report
            var line = "heartbeat: \(e(r.signal)) at \(Self.iso(r.at))"
            if let reason = r.reason { line += " (\(e(reason)))" }
            if r.signal == "silent" {
                line += ", not pinging \(e(h.monitor))"
            } else {
                line += r.delivered ? ", \(e(h.monitor)) answered" : ", \(e(h.monitor)) not reached: \(e(r.error ?? "?"))"
            }
            out += line + "\n"
        }
        if !bluetooth.busReachable {
            out += "bluetooth: \(e(bluetooth.error ?? "system bus not reachable"))\n"
        } else if !bluetooth.bluetoothdRunning {
            out += "bluetooth: bluetoothd is not running\n"
        } else if !bluetooth.bluetoothdAnswering {
            out += "bluetooth: \(bluetooth.error ?? "bluetoothd not answering")\n"
        } else if let adapter = bluetooth.adapter {
            var line = "bluetooth: bluetoothd running, adapter \(e(adapter))"
            if let a = bluetooth.address { line += " (\(e(a)))" }
            line += bluetooth.powered ? ", powered" : ", not powered"
            if bluetooth.powerState == "off-blocked" { line += " (blocked by rfkill)" }
            if bluetooth.discovering { line += ", discovering" }
            out += line + "\n"
        } else {
            out += "bluetooth: bluetoothd running, \(e(bluetooth.error ?? "no adapter"))\n"
        }
        if let error = store.error {
            out += "database: \(e(store.database)): cannot be read: \(e(error))\n"
        } else {
            out += "database: \(e(store.database))" + (store.readOnly.map { " (read-only: \(e($0)))" } ?? "")
                + (store.exists ? ", \(store.readings) readings (\(store.excluded) kept out of upload)\n" : " (not created yet)\n")
        }
        if store.meters.isEmpty {
            out += "meters: none paired (glucose-gateway pair ADDRESS --pin PIN)\n"
        }
        for m in store.meters {
            var line = "meter \(m.info.address)"
            if let n = m.info.name ?? m.info.model { line += " \(e(n))" }
            line += ": last seen \(Self.iso(m.info.lastSeen)), last sync \(Self.iso(m.info.lastSync))"
            line += ", highest sequence \(m.info.highestSequence.map(String.init) ?? "none"), \(m.readings) readings"
            if let skew = m.info.lastClockSkewSeconds { line += ", clock skew \(skew) s" }
            out += line + "\n"
            if m.info.bondLostAt != nil {
                out += "  re-pair needed since \(Self.iso(m.info.bondLostAt)): \(e(m.info.bondLostMessage ?? "the meter lost its bond"))\n"
            }
            if !m.info.handling.isEmpty { out += "  handling: \(m.info.handling)\n" }
            if m.info.keepsSingleBond {
                out += "  warning: this meter keeps one bond only; pairing it with a phone unpairs the gateway\n"
            }
        }
        if store.destinations.isEmpty { out += "uploads: no destination configured\n" }
        for dest in store.destinations {
            var line = "\(dest.name): \(e((dest.state?.state ?? .ok).rawValue))"
            if !dest.enabled { line += " (not enabled in the config)" }
            line += ", \(dest.counts.pending + dest.counts.inFlight) pending, \(dest.counts.quarantined) quarantined, \(dest.counts.acknowledged) uploaded"
            if let age = dest.oldestUnsentAgeSeconds { line += ", oldest unsent \(Self.age(age))" }
            line += ", last success \(Self.iso(dest.state?.lastSuccessAt))"
            out += line + "\n"
            if let state = dest.state, let code = state.lastErrorCode {
                out += "  last error \(code) \(DaemonSnapshot.codeName(code))"
                if let m = state.lastErrorMessage { out += ": \(e(m))" }
                if let at = state.lastErrorAt { out += " (\(Self.iso(at)))" }
                out += "\n"
            }
        }
        return out
    }
}
