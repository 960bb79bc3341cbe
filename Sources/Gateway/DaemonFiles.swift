#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore

/// Writes a whole file or nothing: a temporary file beside it, fsync, rename. Readers (the `status`
/// command, node_exporter's textfile collector) never see half a file.
public enum AtomicFile {
    public struct WriteError: Error, CustomStringConvertible, Sendable {
        public var path: String
        public var operation: String
        public var errno: Int32
        public var description: String { "cannot \(operation) \(path): \(String(cString: strerror(errno)))" }
    }

    public static func write(_ text: String, to path: String, mode: mode_t = 0o644) throws(WriteError) {
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw WriteError(path: temporary, operation: "create", errno: errno) }
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { buffer in
                Glibc.write(fd, buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
            }
            if n < 0 {
                if errno == EINTR { continue }
                let e = errno
                close(fd)
                unlink(temporary)
                throw WriteError(path: temporary, operation: "write", errno: e)
            }
            offset += n
        }
        bytes.removeAll()
        _ = fchmod(fd, mode)
        if fsync(fd) != 0 {
            let e = errno
            close(fd)
            unlink(temporary)
            throw WriteError(path: temporary, operation: "sync", errno: e)
        }
        close(fd)
        if rename(temporary, path) != 0 {
            let e = errno
            unlink(temporary)
            throw WriteError(path: path, operation: "replace", errno: e)
        }
    }
}

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
        return o.value
    }
}

/// The Prometheus text exposition of a snapshot, for node_exporter's textfile collector (`metrics_file`).
public enum DaemonMetrics {
    public static func text(_ s: DaemonSnapshot, now: UnixMillis) -> String {
        var out = ""
        func metric(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, value: String)]) {
            out += "# HELP glucose_gateway_\(name) \(help)\n# TYPE glucose_gateway_\(name) \(type)\n"
            for sample in samples {
                out += "glucose_gateway_\(name)\(sample.labels.isEmpty ? "" : "{\(sample.labels)}") \(sample.value)\n"
            }
        }
        func dest(_ name: DestinationName) -> String { "destination=\"\(escape(name.rawValue))\"" }

        metric("readings_stored", "gauge", "Readings in the database.", [("", String(s.readingsTotal ?? 0))])
        metric("readings_downloaded_total", "counter", "Readings new to the database from downloads since the daemon started.",
               [("", String(s.counters.readingsStored))])
        metric("uploaded", "gauge", "Readings acknowledged by each destination.",
               s.destinations.map { (dest($0.name), String($0.counts.acknowledged)) })
        metric("pending", "gauge", "Readings waiting to be uploaded (pending or in flight).",
               s.destinations.map { (dest($0.name), String($0.counts.pending + $0.counts.inFlight)) })
        metric("quarantined", "gauge", "Readings a destination refused, kept aside.",
               s.destinations.map { (dest($0.name), String($0.counts.quarantined)) })
        metric("oldest_unsent_age_seconds", "gauge", "Age of the oldest reading not yet uploaded (0 when none).",
               s.destinations.map { d in (dest(d.name), String(d.counts.oldestUnsent.map { max(0, (now - $0) / 1000) } ?? 0)) })
        metric("network_state_code", "gauge", "Last upload error code: 0 ok, 1001 network not connected, 1002 network timeout, else HTTP status.",
               s.destinations.map { (dest($0.name), String($0.state?.lastErrorCode ?? 0)) })
        metric("meter_connects_total", "counter", "Meter connections since the daemon started.", [("", String(s.counters.connects))])
        let reasons = s.counters.failures.keys.sorted()
        metric("meter_failures_total", "counter", "Failed meter connections and downloads by reason.",
               reasons.map { ("reason=\"\(escape($0))\"", String(s.counters.failures[$0] ?? 0)) })
        metric("downloads_total", "counter", "Complete meter downloads since the daemon started.", [("", String(s.counters.downloads))])
        metric("bluetoothd_up", "gauge", "1 when bluetoothd is on the bus.", [("", s.radio.bluetoothdRunning ? "1" : "0")])
        metric("adapter_up", "gauge", "1 when a powered adapter is in use.", [("", s.radio.adapter != nil && s.radio.adapterPowered ? "1" : "0")])
        metric("paired_meters", "gauge", "Meters paired with this gateway.", [("", String(s.pairedMeters))])
        metric("last_update_timestamp_seconds", "gauge", "When these figures were written.", [("", String(now / 1000))])
        return out
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for ch in s {
            switch ch {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(ch)
            }
        }
        return out
    }
}
