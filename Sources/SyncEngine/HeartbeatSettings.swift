import GatewayCore
import Support

/// The heartbeat keys of `[gateway]`: the monitor pinged while the gateway is healthy, and how.
public struct HeartbeatSettings: Sendable, Equatable {
    /// The section the keys are written in.
    public static let section = "gateway"
    public static let keys = ["heartbeat_url", "heartbeat_api", "heartbeat_interval_s", "heartbeat_max_pending_s", "heartbeat_on_fail"]

    /// `heartbeat_url`; nil: no heartbeat. A capability (anyone holding it can report for this gateway), so
    /// it is kept like a secret and shown as scheme://host only.
    public var heartbeatURL: Secret?
    public var heartbeatAPI: HeartbeatAPI = .healthchecks
    public var heartbeatIntervalSeconds: Int = HeartbeatPolicy.defaultIntervalSeconds
    public var heartbeatMaxPendingSeconds: Int = HeartbeatPolicy.defaultMaxPendingSeconds
    public var heartbeatOnFail: HeartbeatFailMode = .report

    public init() {}

    /// The URL is never echoed in a message: its path is the monitor's token.
    public init(section s: inout ConfigSection) {
        let name = s.name
        if let v = s.string("heartbeat_url") {
            switch ConfigURL.normalizedHTTPURL(v.value, queryOrFragment: Self.queryOrFragment) {
            case .success(let url): heartbeatURL = Secret(url.text)
            case .failure(let reason): s.problem(v.line, "\(name).heartbeat_url: \(reason.message)")
            }
        }
        if let api = s.choice("heartbeat_api", HeartbeatAPI.init(rawValue:), expected: "\"healthchecks\" or \"uptime-kuma\"") {
            heartbeatAPI = api
        }
        if let v = s.integer("heartbeat_interval_s", in: HeartbeatPolicy.intervalRange) { heartbeatIntervalSeconds = v.value }
        if let v = s.integer("heartbeat_max_pending_s", in: HeartbeatPolicy.maxPendingRange) { heartbeatMaxPendingSeconds = v.value }
        if let mode = s.choice("heartbeat_on_fail", HeartbeatFailMode.init(rawValue:), expected: "\"report\" or \"silent\"") {
            heartbeatOnFail = mode
        }
    }

    /// A monitor's URL takes no query: Uptime Kuma's push URL is given without the one it shows.
    static let queryOrFragment = ConfigURL.URLProblem(message: "must not carry a query or fragment (for Uptime Kuma give the push URL up to its token, with heartbeat_api = \"uptime-kuma\"; the gateway adds status and msg)")

    /// The heartbeat's monitor and policy, nil when `heartbeat_url` is not set.
    public var heartbeat: (target: HeartbeatTarget, policy: HeartbeatPolicy)? {
        guard let url = heartbeatURL else { return nil }
        return (HeartbeatTarget(url: url.value, api: heartbeatAPI),
                HeartbeatPolicy(interval: .seconds(heartbeatIntervalSeconds), maxPending: .seconds(heartbeatMaxPendingSeconds),
                                onFail: heartbeatOnFail))
    }

    public var summaryLines: [String] {
        ["heartbeat_url: \(heartbeat.map { $0.target.shown + " (path hidden)" } ?? "(not set)")",
         "heartbeat_api: \(heartbeatAPI.rawValue)", "heartbeat_interval_s: \(heartbeatIntervalSeconds)",
         "heartbeat_max_pending_s: \(heartbeatMaxPendingSeconds)", "heartbeat_on_fail: \(heartbeatOnFail.rawValue)"]
    }
}
