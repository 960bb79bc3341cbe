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
