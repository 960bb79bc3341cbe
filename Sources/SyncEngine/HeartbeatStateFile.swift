import GatewayCore
import Support

/// `<database>.heartbeat.json`: the heartbeat's last attempt, for `status`. The monitor appears as
/// scheme://host only.
public enum HeartbeatStateFile {
    public static func path(database: String) -> String { database + ".heartbeat.json" }

    public struct Contents: Equatable, Sendable {
        public var monitor: String
        public var report: HeartbeatReport
    }

    public static func json(_ report: HeartbeatReport, monitor: String) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("monitor", monitor)
        o.add("at", Int64(report.at))
        o.add("signal", report.signal)
        o.add("reason", report.reason.map(JSONValue.string) ?? .null)
        o.add("delivered", report.delivered)
        o.add("error", report.error.map(JSONValue.string) ?? .null)
        return o.value
    }

    public static func write(_ report: HeartbeatReport, monitor: String, to path: String, logger: Logger) {
        do {
            try AtomicFile.write(json(report, monitor: monitor).compactText + "\n", to: path, mode: 0o600)
        } catch {
            logger.warning("\(error)")
        }
    }

    public static func read(database: String) -> Contents? {
        guard let bytes = FileContents.read(path(database: database), limit: 1 << 16),
              let object = try? JSONParser.parse(bytes), case .object = object,
              let monitor = object["monitor"]?.stringValue, let at = object["at"]?.int64Value,
              let signal = object["signal"]?.stringValue, let delivered = object["delivered"]?.boolValue else { return nil }
        return Contents(monitor: monitor, report: HeartbeatReport(at: at, signal: signal, reason: object["reason"]?.stringValue,
                                                                   delivered: delivered, error: object["error"]?.stringValue))
    }
}
