import GatewayCore
import Support
import Transport
import SyncEngine
import Testing
import TestSupport

/// The gateway's `devicestatus` documents: when they go out (on a manual clock), what they say, and how
/// they reach Nightscout over API v1 and v3.
@Suite struct DeviceStatusTests {
    static let meter = DeviceStatusMeter(name: "Contour Next One", model: "Contour Next One", batteryLow: true,
                                         lastSeen: 1_764_950_000_000, lastSync: 1_764_950_060_000)
    static let healthy = DeviceStatusReport(problem: nil, pending: 0, meters: [meter])

    @Test func theScheduleSendsAtStartEveryIntervalAndSoonAfterADownload() {
        let clock = ManualClock()
        var schedule = DeviceStatusSchedule(policy: DeviceStatusPolicy(interval: .seconds(900)))
        // What `take` answered at each step (it is mutating, so it is called outside `#expect`).
        var sent: [Bool] = []
        // Nothing is due before the first news.
        sent.append(schedule.take(at: clock.now))  // not due
        schedule.news(at: clock.now)
        sent.append(schedule.take(at: clock.now))  // due
        sent.append(schedule.take(at: clock.now))  // not due
        // A download 10 s later: no sooner than the minimum spacing after the last document.
        clock.advance(by: .seconds(10))
        schedule.news(at: clock.now)
        #expect(schedule.due == clock.now + .seconds(50))
        clock.advance(by: .seconds(49))
        sent.append(schedule.take(at: clock.now))  // not due
        clock.advance(by: .seconds(1))
        sent.append(schedule.take(at: clock.now))  // due
        // Two downloads close together give one document.
        clock.advance(by: .seconds(100))
        schedule.news(at: clock.now)
        schedule.news(at: clock.now + .seconds(5))
        sent.append(schedule.take(at: clock.now))  // due
        clock.advance(by: .seconds(5))
        sent.append(schedule.take(at: clock.now))  // not due
        // Then one every interval while nothing happens.
        clock.advance(by: .seconds(894))
        sent.append(schedule.take(at: clock.now))  // not due
        clock.advance(by: .seconds(1))
        sent.append(schedule.take(at: clock.now))  // due
        #expect(sent == [false, true, false, false, true, true, false, false, true])
    }

    @Test func theDocumentCarriesHealthPendingAndEachMetersBatteryWithoutAddressOrSerial() throws {
        let report = DeviceStatusReport(problem: "upload to fhir paused (credentials refused)", pending: 3,
                                        oldestPendingAge: .seconds(125), meters: [Self.meter])
        let (identifier, body) = report.document(device: "kitchen-pi", at: 1_764_950_123_456)
        let json = try JSONParser.parse(body)
        #expect(json["identifier"]?.stringValue == identifier)
        #expect(json["device"]?.stringValue == "glucose-gateway://kitchen-pi")
        #expect(json["created_at"]?.stringValue == "2025-12-05T15:55:23Z")
        #expect(json["uploader"]?["name"]?.stringValue == "glucose-gateway on kitchen-pi")
        #expect(json["uploader"]?["battery"] == nil)
        let gateway = try #require(json["gateway"])
        #expect(gateway["health"]?.stringValue == "unhealthy")
        #expect(gateway["problem"]?.stringValue == "upload to fhir paused (credentials refused)")
        #expect(gateway["pending"]?.int64Value == 3)
        #expect(gateway["oldestPendingSeconds"]?.int64Value == 125)
        let meter = try #require(gateway["meters"]?.arrayValue?.first)
        #expect(meter["name"]?.stringValue == "Contour Next One")
        #expect(meter["battery"]?.stringValue == "low")
        #expect(meter["lastSeen"]?.stringValue == "2025-12-05T15:53:20Z")
        #expect(meter["state"]?.stringValue == "paired")
        // The same gateway at the same moment makes the same identifier; another moment or gateway another.
        #expect(report.document(device: "kitchen-pi", at: 1_764_950_123_456).identifier == identifier)
        #expect(report.document(device: "kitchen-pi", at: 1_764_950_123_457).identifier != identifier)
        #expect(report.document(device: "hall-pi", at: 1_764_950_123_456).identifier != identifier)
    }

    @Test func aMeterRowGivesNameBatteryAndStateButNoAddress() throws {
        var info = MeterInfo(address: "C0:26:DA:01:02:03", timeZone: "Europe/Berlin")
        info.name = "Meter A"
        info.serial = "SN-99812"
        info.bondLostAt = 5
        let meter = DeviceStatusMeter(meter: info, newestFirst: [])
        #expect(meter.batteryLow == nil)
        #expect(meter.repairNeeded)
        let body = String(decoding: DeviceStatusReport(problem: nil, pending: 0, meters: [meter]).document(device: "pi", at: 0).body,
                          as: UTF8.self)
        #expect(!body.contains("C0:26:DA"))
        #expect(!body.contains("SN-99812"))
        #expect(body.contains("\"state\":\"re-pair needed\""))
    }

    static func settings(api: NightscoutAPI) -> NightscoutSettings {
        var s = NightscoutSettings(url: "http://127.0.0.1:9/ns", apiSecret: Secret("correct-horse-battery"))
        if api == .v3 {
            // The scripted v3 server answers at the root.
            s.url = "http://127.0.0.1:9"
            s.token = Secret("gateway-0123456789abcdef")
            s.api = .v3
        }
        return s
    }

    @Test func overAPIv1OneDocumentGoesOutAtStartAndOnePerIntervalWithTheSecret() async {
        let clock = ManualClock()
        let http = RecordingHTTPClient()
        let reporter = DeviceStatusReporter(settings: Self.settings(api: .v1), http: http, device: "pi",
                                            policy: DeviceStatusPolicy(interval: .seconds(300)), networkTimeoutMs: 1000,
                                            clock: clock, now: { 1_000_000 }, logger: Logger(label: "t", sink: MemoryLogSink()))
        await reporter.update(Self.healthy)
        #expect(await waitUntil(30) { http.sent.count == 1 })
        #expect(http.sent.first?.url == "http://127.0.0.1:9/ns/api/v1/devicestatus")
        #expect(http.sent.first?.method == "POST")
        // New state without news does not send.
        await reporter.update(DeviceStatusReport(problem: nil, pending: 2, meters: []))
        #expect(await waitUntil(30) { clock.sleeping == 1 })
        #expect(http.sent.count == 1)
        clock.advance(by: .seconds(300))
        #expect(await waitUntil(30) { http.sent.count == 2 })
        #expect(http.sent.last?.body.contains("\"pending\":2") == true)
        await reporter.stop()
    }

    @Test func overAPIv3TheDocumentGoesToTheDevicestatusCollectionWithTheJWT() async {
        let server = ScriptedNightscout()
        let http = server.client()
        let clock = ManualClock()
        let reporter = DeviceStatusReporter(settings: Self.settings(api: .v3), http: http, device: "pi",
                                            policy: DeviceStatusPolicy(), networkTimeoutMs: 1000, clock: clock,
                                            now: { 1_000_000 }, logger: Logger(label: "t", sink: MemoryLogSink()))
        await reporter.update(Self.healthy)
        #expect(await waitUntil(30) { !http.paths("/api/v3/devicestatus").isEmpty })
        #expect(await waitUntil(30) { server.state.withLock { $0.stored.count } == 1 })
        await reporter.stop()
    }
}
