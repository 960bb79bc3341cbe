import GatewayCore
import Support
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// `[gateway] set_meter_clock`: off unless set, a boolean, and carried into the daemon's download options.
@Suite struct MeterClockConfigTests {
    static func load(_ text: String) throws -> GatewayConfig {
        let dir = try TempDirectory()
        defer { dir.remove() }
        return try ConfigLoader.load(path: try dir.write("gw.toml", text))
    }

    @Test func offByDefault() throws {
        let config = try Self.load("[gateway]\nclock_skew_threshold_s = 300\n")
        #expect(config.gateway.setMeterClock == false)
        #expect(DaemonSettings(config: config, destinations: []).download.setMeterClock == false)
        #expect(config.summaryLines().contains("set_meter_clock: false"))
    }

    @Test func enabledReachesTheDownloads() throws {
        let config = try Self.load("[gateway]\nset_meter_clock = true\n")
        #expect(config.gateway.setMeterClock)
        #expect(DaemonSettings(config: config, destinations: []).download.setMeterClock)
        #expect(config.summaryLines().contains("set_meter_clock: true"))
    }

    @Test func aNonBooleanIsAnErrorNamingTheLine() throws {
        do {
            _ = try Self.load("[gateway]\n\nset_meter_clock = \"yes\"\n")
            Issue.record("load must fail")
        } catch let error as GatewayFailure {
            #expect(error.status == .config)
            #expect(error.message.contains(":3:") && error.message.contains("set_meter_clock"))
        }
    }
}
