#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Support

/// Upload figures of one destination.
public struct DestinationMetrics: Sendable, Equatable {
    public var name: String
    /// Acknowledged by the server.
    public var uploaded: Int
    /// Waiting (pending or in flight).
    public var pending: Int
    /// Set aside after a permanent refusal.
    public var quarantined: Int
    /// Age of the oldest reading not yet acknowledged; nil when none waits.
    public var oldestUnsentAgeSeconds: Int64?

    public init(name: String, uploaded: Int = 0, pending: Int = 0, quarantined: Int = 0, oldestUnsentAgeSeconds: Int64? = nil) {
        self.name = name
        self.uploaded = uploaded
        self.pending = pending
        self.quarantined = quarantined
        self.oldestUnsentAgeSeconds = oldestUnsentAgeSeconds
    }
}

extension DestinationMetrics {
    /// From the store's outbox counts; pending includes rows in flight.
    public init(_ destination: DestinationName, counts: OutboxCounts, now: UnixMillis) {
        self.init(
            name: destination.rawValue,
            uploaded: counts.acknowledged,
            pending: counts.pending + counts.inFlight,
            quarantined: counts.quarantined,
            oldestUnsentAgeSeconds: counts.oldestUnsent.map { max(0, (now - $0) / 1000) }
        )
    }
}

/// A plain snapshot of what the gateway has done, filled by the daemon from the store and its own
/// counters. No health values: counts, ages and codes only.
public struct MetricsSnapshot: Sendable, Equatable {
    public var readingsStored: Int
    /// Readings kept out of upload (clinical rules, unresolved time).
    public var readingsExcluded: Int
    public var destinations: [DestinationMetrics]
    /// Meter connections made since the daemon started.
    public var connects: Int
    /// Failed meter connections by reason (such as "timeout", "auth", "le-connection-abort").
    public var connectFailures: [String: Int]
    /// 0 when uploads go through, else the last error code: 1001 NETWORK_NOT_CONNECTED, 1002 NETWORK_TIMEOUT,
    /// or the HTTP status a server answered with.
    public var networkStateCode: Int
    /// Name of that code, for the status line.
    public var networkStateName: String?
    /// Paired meters that lost their bond (state `re-pair needed`).
    public var metersRepairNeeded: Int = 0
    /// When the snapshot was taken.
    public var generatedAt: UnixMillis

    public init(
        readingsStored: Int = 0, readingsExcluded: Int = 0, destinations: [DestinationMetrics] = [], connects: Int = 0,
        connectFailures: [String: Int] = [:], networkStateCode: Int = 0, networkStateName: String? = nil, generatedAt: UnixMillis = 0
    ) {
        self.readingsStored = readingsStored
        self.readingsExcluded = readingsExcluded
        self.destinations = destinations
        self.connects = connects
        self.connectFailures = connectFailures
        self.networkStateCode = networkStateCode
        self.networkStateName = networkStateName
        self.generatedAt = generatedAt
    }

    public var pendingTotal: Int { destinations.reduce(0) { $0 + $1.pending } }
    public var quarantinedTotal: Int { destinations.reduce(0) { $0 + $1.quarantined } }

    /// One line for systemd's STATUS= and `status`: "120 readings, 3 pending, 0 quarantined, network ok"
    /// or "..., last error 1001 NETWORK_NOT_CONNECTED".
    public var statusLine: String {
        var line = "\(readingsStored) readings, \(pendingTotal) pending, \(quarantinedTotal) quarantined"
        if let oldest = destinations.compactMap(\.oldestUnsentAgeSeconds).max() {
            line += ", oldest unsent \(Self.age(oldest))"
        }
        if networkStateCode == 0 {
            line += ", network ok"
        } else {
            line += ", last error \(networkStateCode)" + (networkStateName.map { " " + $0 } ?? "")
        }
        return line
    }

    static func age(_ seconds: Int64) -> String {
        if seconds < 120 { return "\(seconds)s" }
        if seconds < 7200 { return "\(seconds / 60)m" }
        if seconds < 172_800 { return "\(seconds / 3600)h" }
        return "\(seconds / 86_400)d"
    }
}

/// Prometheus text exposition format (version 0.0.4) for node_exporter's textfile collector.
public enum PrometheusTextfile {
    /// The whole file: HELP and TYPE lines, then samples, sorted by labels so the output is stable.
    public static func render(_ s: MetricsSnapshot) -> String {
        var out = ""
        func family(_ name: String, _ type: String, _ help: String, _ samples: [(labels: [(String, String)], value: String)]) {
            out += "# HELP \(name) \(escape(help, quote: false))\n# TYPE \(name) \(type)\n"
            for sample in samples {
                out += name
                if !sample.labels.isEmpty {
                    out += "{" + sample.labels.map { "\($0.0)=\"\(escape($0.1, quote: true))\"" }.joined(separator: ",") + "}"
                }
                out += " \(sample.value)\n"
            }
        }
        let destinations = s.destinations.sorted { $0.name < $1.name }
        func perDestination(_ value: (DestinationMetrics) -> String) -> [(labels: [(String, String)], value: String)] {
            destinations.map { ([("destination", $0.name)], value($0)) }
        }
        family("glucose_gateway_readings_stored_total", "counter", "Readings stored in the database.", [([], "\(s.readingsStored)")])
        family("glucose_gateway_readings_excluded_total", "counter", "Stored readings kept out of upload.", [([], "\(s.readingsExcluded)")])
        family("glucose_gateway_uploaded_total", "counter", "Readings acknowledged by each destination.", perDestination { "\($0.uploaded)" })
        family("glucose_gateway_pending", "gauge", "Readings waiting for upload, per destination.", perDestination { "\($0.pending)" })
        family("glucose_gateway_quarantined", "gauge", "Readings set aside after a permanent refusal, per destination.", perDestination { "\($0.quarantined)" })
        family("glucose_gateway_oldest_unsent_age_seconds", "gauge", "Age of the oldest reading not yet acknowledged (0 when none waits).",
               perDestination { "\($0.oldestUnsentAgeSeconds ?? 0)" })
        family("glucose_gateway_meter_connects_total", "counter", "Meter connections made since the daemon started.", [([], "\(s.connects)")])
        family("glucose_gateway_meter_connect_failures_total", "counter", "Failed meter connections since the daemon started, by reason.",
               s.connectFailures.sorted { $0.key < $1.key }.map { ([("reason", $0.key)], "\($0.value)") })
        family("glucose_gateway_meters_repair_needed", "gauge", "Paired meters that lost their bond and must be paired again (glucose-gateway pair ADDRESS).",
               [([], "\(s.metersRepairNeeded)")])
        family("glucose_gateway_network_state", "gauge", "0 when uploads go through, else the last error: 1001 not connected, 1002 timeout, or the HTTP status.",
               [([], "\(s.networkStateCode)")])
        family("glucose_gateway_metrics_timestamp_seconds", "gauge", "When these figures were taken (Unix time).",
               [([], "\(s.generatedAt / 1000)")])
        return out
    }

    /// Writes the file atomically: a temporary file in the same directory, flushed, given mode 0644 (the
    /// exporter runs as another user; the file holds counts only), then renamed over `path`.
    public static func write(_ snapshot: MetricsSnapshot, to path: String) throws(GatewayFailure) {
        do {
            try AtomicFile.write(render(snapshot), to: path, mode: 0o644)
        } catch {
            throw GatewayFailure(.failure, "metrics file: \(error.description)")
        }
    }

    /// The text format's escapes: backslash and newline everywhere, the double quote in label values only.
    static func escape(_ text: String, quote: Bool) -> String {
        var out = ""
        for ch in text {
            switch ch {
            case "\\": out += "\\\\"
            case "\"" where quote: out += "\\\""
            case "\n": out += "\\n"
            default: out.append(ch)
            }
        }
        return out
    }
}
