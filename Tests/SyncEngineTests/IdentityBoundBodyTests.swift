import GatewayCore
import GlucoseProfile
import Testing
import TestSupport
@testable import SyncEngine
import Transport

/// A meter row holding a huge identity string (stored before strings were bounded) sends at most 64
/// characters of it: in Nightscout's `device`, FHIR's Device and the MQTT discovery config.
@Suite("Identity strings sent are bounded")
struct IdentityBoundBodyTests {
    static let huge = String(repeating: "M", count: 10_240)

    static var meter: MeterInfo {
        var m = testMeter
        m.model = huge
        m.serial = huge
        m.manufacturer = huge + "\u{1}"
        m.name = huge
        return m
    }

    @Test func nightscoutEntryDevice() throws {
        let entry = try #require(NightscoutBodyBuilder().element(for: syntheticReading(1), meter: Self.meter))
        #expect(entry.body.count < 400)
        let m64 = String(repeating: "M", count: 64)
        #expect(String(decoding: entry.body, as: UTF8.self).contains("\"glucose-gateway://\(m64)-\(m64)\""))
    }

    @Test func fhirDevice() throws {
        let bundle = try #require(FHIRBodyBuilder(subject: "Patient/p-1").element(for: syntheticReading(1), meter: Self.meter))
        let text = String(decoding: bundle.body, as: UTF8.self)
        #expect(!text.contains(String(repeating: "M", count: 65)))
        #expect(text.contains(String(repeating: "M", count: 64)))
    }

    @Test func mqttDiscoveryConfig() {
        let presentation = MeterPresentation(meter: Self.meter, newestFirst: [])
        #expect(presentation.model?.count == 64)
        #expect(presentation.manufacturer == String(repeating: "M", count: 64))
        #expect(presentation.name.count == 64)
        let settings = MQTTSettings(broker: MQTTBrokerSettings(host: "127.0.0.1", port: 1883))
        for field in HomeAssistantDiscovery.fields where !field.gatewayWide {
            let message = HomeAssistantDiscovery.config(field, meter: presentation, settings: settings)
            #expect(!String(decoding: message.payload, as: UTF8.self).contains(String(repeating: "M", count: 65)))
        }
    }
}
