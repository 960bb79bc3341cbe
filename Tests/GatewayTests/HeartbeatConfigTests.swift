import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport

@testable import Gateway

/// The `[gateway]` heartbeat keys: defaults, values, one-line errors, and the URL never echoed.
@Suite struct HeartbeatConfigTests {
    static func evaluate(_ text: String) -> (config: GatewayConfig, problems: [ConfigProblem]) {
        ConfigLoader.evaluate(bytes: Array(text.utf8), path: "/nonexistent-dir/gw.toml")
    }

    @Test func noURLMeansNoHeartbeat() {
        let (config, problems) = Self.evaluate("[gateway]\nheartbeat_interval_s = 60\n")
        #expect(problems.isEmpty)
        #expect(config.gateway.heartbeat == nil)
        #expect(config.summaryLines().contains("heartbeat_url: (not set)"))
    }

    @Test func keysAreRead() throws {
        let (config, problems) = Self.evaluate("""
        [gateway]
        heartbeat_url = "https://HC.example.org/ping/5b7e-Tok3nXyz-99/"
        heartbeat_interval_s = 60
        heartbeat_max_pending_s = 7200
        heartbeat_on_fail = "silent"
        """)
        #expect(problems.isEmpty)
        let heartbeat = try #require(config.gateway.heartbeat)
        #expect(heartbeat.target == HeartbeatTarget(url: "https://hc.example.org/ping/5b7e-Tok3nXyz-99", api: .healthchecks))
        #expect(heartbeat.policy == HeartbeatPolicy(interval: .seconds(60), maxPending: .seconds(7200), onFail: .silent))
        let summary = config.summaryLines()
        #expect(summary.contains("heartbeat_url: https://hc.example.org (path hidden)"))
        #expect(!summary.joined(separator: "\n").contains("Tok3nXyz"))
        #expect(!"\(config)".contains("Tok3nXyz"))
    }

    @Test func defaults() throws {
        let (config, problems) = Self.evaluate("[gateway]\nheartbeat_url = \"http://127.0.0.1:8000/p/abc\"\nheartbeat_api = \"uptime-kuma\"\n")
        #expect(problems.isEmpty)
        let heartbeat = try #require(config.gateway.heartbeat)
        #expect(heartbeat.target.api == .uptimeKuma)
        #expect(heartbeat.policy == HeartbeatPolicy(interval: .seconds(300), maxPending: .seconds(3600), onFail: .report))
    }

    @Test(arguments: [
        ("heartbeat_url = \"ftp://hc.example/ping/secret-tok\"", "gateway.heartbeat_url: expected an http:// or https:// URL"),
        ("heartbeat_url = \"https://kuma.example/api/push/secret-tok?status=up&msg=OK&ping=\"",
         "gateway.heartbeat_url: must not carry a query or fragment (for Uptime Kuma give the push URL up to its token, with heartbeat_api = \"uptime-kuma\"; the gateway adds status and msg)"),
        ("heartbeat_interval_s = 0", "gateway.heartbeat_interval_s: out of range 1..86400"),
        ("heartbeat_max_pending_s = 10", "gateway.heartbeat_max_pending_s: out of range 60..604800"),
        ("heartbeat_on_fail = \"loud\"", "gateway.heartbeat_on_fail: expected \"report\" or \"silent\""),
        ("heartbeat_api = \"kuma\"", "gateway.heartbeat_api: expected \"healthchecks\" or \"uptime-kuma\""),
    ])
    func badValuesGiveOneLine(line: String, message: String) {
        let problems = Self.evaluate("[gateway]\n\(line)\n").problems
        #expect(problems.map(\.message) == [message])
        #expect(problems.first?.line == 2)
        #expect(!problems.map(\.message).joined().contains("secret-tok"))
    }

    /// The summary names the monitor by the origin every other server is named by (the scheme's own port
    /// left out), never by its path.
    @Test func summaryShowsTheMonitorsOrigin() {
        let (config, problems) = Self.evaluate("[gateway]\nheartbeat_url = \"https://HC.example.org:443/ping/secret-tok\"\n")
        #expect(problems.isEmpty)
        #expect(config.summaryLines().contains("heartbeat_url: https://hc.example.org (path hidden)"))
    }

    /// A monitor URL is checked in the order every other server URL is: the scheme and the characters
    /// first, then the query that Uptime Kuma's push URL carries.
    @Test(arguments: [
        ("ftp://hc.example/ping/secret-tok?x=1", "gateway.heartbeat_url: expected an http:// or https:// URL"),
        ("https://hc.example/ping/secret-tok ?x=1", "gateway.heartbeat_url: URL contains spaces or control characters"),
    ])
    func schemeAndCharactersAreToldBeforeTheQuery(url: String, message: String) {
        let problems = Self.evaluate("[gateway]\nheartbeat_url = \"\(url)\"\n").problems
        #expect(problems.map(\.message) == [message])
    }
}
