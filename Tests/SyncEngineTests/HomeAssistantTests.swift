import Foundation
import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport
import Transport

/// What Home Assistant is shown: the newest result as it is (HI and LO included, never an older number),
/// the gateway's own device, and the clearing of retained topics the gateway no longer publishes.
@Suite("Home Assistant discovery and states")
struct HomeAssistantTests {
    let settings = MQTTSettings(broker: MQTTBrokerSettings(host: "127.0.0.1", port: 1883), topicPrefix: "gg-test")
    let id = "006019010e92"

    func states(_ newestFirst: [NewReading]) -> [String: String] {
        let meter = MeterPresentation(meter: testMeter, newestFirst: newestFirst)
        return Dictionary(HomeAssistantDiscovery.states(meter: meter, settings: settings).map { ($0.topic, String(decoding: $0.payload, as: UTF8.self)) },
                          uniquingKeysWith: { a, _ in a })
    }

    func attributes(_ states: [String: String]) -> [String: Any] {
        (states["gg-test/\(id)/glucose_attributes"].flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } as? [String: Any]) ?? [:]
    }

    static func special(_ n: Int, _ kind: String) -> NewReading {
        var r = syntheticReading(n)
        r.mgdl = nil
        r.special = kind == "HI" ? .positiveInfinity : .negativeInfinity
        r.exclusion = kind == "HI" ? .high : .low
        return r
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var kind: String
        var testDescription: String { "a \(kind) after 121 mg/dL" }
    }

    @Test(arguments: [Case(kind: "HI"), Case(kind: "LO")])
    func aHIOrLOReplacesTheLastNumber(_ c: Case) {
        let normal = syntheticReading(21, mgdl: 100)  // 121 mg/dL at 08:45
        let s = states([Self.special(23, c.kind), normal])
        #expect(s["gg-test/\(id)/glucose_result"] == c.kind)
        #expect(s["gg-test/\(id)/glucose_mgdl"] == "None")
        #expect(s["gg-test/\(id)/glucose_mmol"] == "None")
        #expect(s["gg-test/\(id)/glucose_time"] == "2026-01-01T09:55:00.000+01:00")
        #expect(attributes(s)["result"] as? String == c.kind)
        #expect(!s.values.contains("121"))
    }

    @Test func aNormalReadingShowsItsNumberAndControlSolutionStaysOut() {
        var control = syntheticReading(24)
        control.exclusion = .controlSolution
        let s = states([control, syntheticReading(21, mgdl: 100), Self.special(20, "HI")])
        #expect(s["gg-test/\(id)/glucose_result"] == "normal")
        #expect(s["gg-test/\(id)/glucose_mgdl"] == "121")
        #expect(s["gg-test/\(id)/glucose_time"] == "2026-01-01T09:45:00.000+01:00")
        #expect(attributes(s)["reading_id"] as? String == MQTTBodyBuilder().element(for: syntheticReading(21, mgdl: 100), meter: testMeter)
            .flatMap { try? JSONParser.parse($0.body) }?["identifier"]?.stringValue)
    }

    @Test func aSensorFaultShowsNoNumber() {
        var fault = syntheticReading(22)
        fault.exclusion = .sensorFault
        let s = states([fault, syntheticReading(21)])
        #expect(s["gg-test/\(id)/glucose_result"] == "no number")
        #expect(s["gg-test/\(id)/glucose_mgdl"] == "None")
    }

    @Test func theResultSensorIsAnEnumWithEveryState() throws {
        let meter = MeterPresentation(meter: testMeter, newestFirst: [])
        let field = try #require(HomeAssistantDiscovery.fields.first { $0.key == "glucose_result" })
        let config = HomeAssistantDiscovery.config(field, meter: meter, settings: settings)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(config.payload)) as? [String: Any])
        #expect(json["device_class"] as? String == "enum")
        #expect(json["options"] as? [String] == ["normal", "HI", "LO", "no number"])
        #expect(json["state_topic"] as? String == "gg-test/\(id)/glucose_result")
    }

    @Test func anEqualNewReadingChangesTheGlucoseSensorsAttributes() throws {
        let first = syntheticReading(37, mgdl: 150)   // 187 mg/dL
        let second = syntheticReading(87, mgdl: 150)  // 187 mg/dL again (87 % 50 == 37)
        let before = states([first])
        let after = states([second, first])
        #expect(before["gg-test/\(id)/glucose_mgdl"] == "187" && after["gg-test/\(id)/glucose_mgdl"] == "187")
        #expect(before["gg-test/\(id)/glucose_attributes"] != after["gg-test/\(id)/glucose_attributes"])
        let field = try #require(HomeAssistantDiscovery.fields.first { $0.key == "glucose_mgdl" })
        let config = HomeAssistantDiscovery.config(field, meter: MeterPresentation(meter: testMeter, newestFirst: []), settings: settings)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(config.payload)) as? [String: Any])
        #expect(json["json_attributes_topic"] as? String == "gg-test/\(id)/glucose_attributes")
    }

    @Test func theGatewayWideSensorsBelongToOneGatewayDevice() throws {
        var other = testMeter
        other.address = "00:60:19:01:0E:93"
        let meters = [MeterPresentation(meter: testMeter, newestFirst: []), MeterPresentation(meter: other, newestFirst: [])]
        let configs = HomeAssistantDiscovery.configs(meters: meters, settings: settings)
        let pending = configs.filter { $0.topic.hasSuffix("/pending/config") }
        #expect(pending.map(\.topic) == ["homeassistant/sensor/gg-test/pending/config"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(pending[0].payload)) as? [String: Any])
        let device = try #require(json["device"] as? [String: Any])
        #expect(device["identifiers"] as? [String] == ["glucose_gateway_gg-test"])
        #expect(device["name"] as? String == "Glucose gateway")
        #expect(json["unique_id"] as? String == "glucose_gateway_gg-test_pending")
        for config in configs where config.topic.contains("/\(id)/") {
            let meterJSON = try #require(try JSONSerialization.jsonObject(with: Data(config.payload)) as? [String: Any])
            #expect((meterJSON["device"] as? [String: Any])?["via_device"] as? String == "glucose_gateway_gg-test")
        }
        #expect(configs.filter { $0.topic.hasSuffix("/network_state/config") }.count == 1)
    }
}
