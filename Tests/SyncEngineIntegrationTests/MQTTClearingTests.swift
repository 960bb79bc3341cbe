import Foundation
import GatewayCore
import SyncEngine
import Testing
import TestSupport
import Transport

/// Retained topics the gateway no longer publishes (an unpaired meter, `discovery = false`, another topic
/// prefix) are cleared on a real mosquitto and not published again after a reconnection.
@Suite("MQTT retained topics cleared", .serialized, .timeLimit(.minutes(2)))
struct MQTTClearingTests {
    static let other: MeterInfo = {
        var m = testMeter
        m.address = "00:60:19:01:0E:93"
        return m
    }()

    func retained(_ broker: MosquittoBroker, expect count: Int) throws -> [String: String] {
        let got = try Subscriber(port: broker.port, topics: ["homeassistant/#", "gg-test/#", "gg-new/#"], count: count, seconds: 4,
                                 retainedOnly: true).messages()
        return Dictionary(got.map { ($0.topic, $0.payload) }, uniquingKeysWith: { a, _ in a })
    }

    func connectedPublisher(_ broker: MosquittoBroker, settings: MQTTSettings, record: String) async throws -> HomeAssistantPublisher {
        let client = MQTTClient(settings: settings.broker, availabilityTopic: settings.availabilityTopic, logger: .silent)
        #expect(client.start())
        #expect(await client.waitForConnection(timeoutMs: 5000) == .connected)
        return HomeAssistantPublisher(settings: settings, client: client, recordPath: record)
    }

    func sync(_ publisher: HomeAssistantPublisher) async {
        _ = await publisher.client.publish(MQTTMessage(topic: "gg-test/sync", text: "x", retain: false), timeoutMs: 5000)
    }

    @Test func anUnpairedMetersTopicsAreClearedAndNotRepublishedAfterAReconnection() async throws {
        let broker = try MosquittoBroker()
        let directory = try TempDirectory()
        let record = directory.path + "/topics.json"
        let settings = mqttSettings(broker)
        let publisher = try await connectedPublisher(broker, settings: settings, record: record)
        let gateway = GatewayPresentation(pending: 0, networkStateCode: 0)
        let both = [MeterPresentation(meter: testMeter, newestFirst: [syntheticReading(1)]),
                    MeterPresentation(meter: Self.other, newestFirst: [syntheticReading(2)])]
        await publisher.update(meters: both, gateway: gateway)
        await sync(publisher)
        let before = try retained(broker, expect: 100)
        #expect(before.keys.filter { $0.contains("006019010e93") }.count == 13)

        await publisher.update(meters: [both[0]], gateway: gateway)
        #expect(try retained(broker, expect: 100).keys.filter { $0.contains("006019010e93") }.isEmpty)
        let recorded = String(decoding: FileManager.default.contents(atPath: record) ?? Data(), as: UTF8.self)
        #expect(!recorded.contains("006019010e93") && recorded.contains("006019010e92"))
        #expect(FileManager.default.permissionsOf(record) == 0o600)

        // A broker restarted without persistence gets the retained set again, without the unpaired meter.
        broker.stop()
        try broker.start()
        #expect(await publisher.client.waitForConnection(timeoutMs: 10_000) == .connected)
        await sync(publisher)
        let after = try retained(broker, expect: 100)
        #expect(after["gg-test/006019010e92/glucose_mgdl"] == "101")
        #expect(after.keys.filter { $0.contains("006019010e93") }.isEmpty)
        await publisher.client.stop()
    }

    @Test func discoveryOffAndANewPrefixClearWhatAnEarlierRunPublished() async throws {
        let broker = try MosquittoBroker()
        let directory = try TempDirectory()
        let record = directory.path + "/topics.json"
        let meters = [MeterPresentation(meter: testMeter, newestFirst: [syntheticReading(1)])]
        let gateway = GatewayPresentation(pending: 0, networkStateCode: 0)
        let first = try await connectedPublisher(broker, settings: mqttSettings(broker), record: record)
        await first.update(meters: meters, gateway: gateway)
        await sync(first)
        await first.client.stop()
        #expect(try retained(broker, expect: 100).keys.contains { $0.hasPrefix("homeassistant/") })

        // The next run (a new process: the record comes from the file) with discovery off.
        var noDiscovery = mqttSettings(broker)
        noDiscovery.discovery = false
        let second = try await connectedPublisher(broker, settings: noDiscovery, record: record)
        await second.update(meters: meters, gateway: gateway)
        await sync(second)
        await second.client.stop()
        let afterOff = try retained(broker, expect: 100)
        #expect(!afterOff.keys.contains { $0.hasPrefix("homeassistant/") })
        #expect(afterOff["gg-test/006019010e92/glucose_mgdl"] == "101")

        // And with another prefix: nothing is left under the old one.
        let third = try await connectedPublisher(broker, settings: mqttSettings(broker, prefix: "gg-new"), record: record)
        await third.update(meters: meters, gateway: gateway)
        await sync(third)
        let afterPrefix = try retained(broker, expect: 100)
        await third.client.stop()
        #expect(!afterPrefix.keys.contains { $0.hasPrefix("gg-test/") })
        #expect(afterPrefix["gg-new/006019010e92/glucose_mgdl"] == "101")
        #expect(afterPrefix["homeassistant/sensor/006019010e92/glucose_mgdl/config"]?.contains("gg-new/") == true)
    }

    @Test func theGatewaySensorsAnEarlierVersionPutOnEachMeterAreCleared() async throws {
        let broker = try MosquittoBroker()
        let directory = try TempDirectory()
        let settings = mqttSettings(broker)
        let old = MQTTClient(settings: settings.broker, availabilityTopic: nil, logger: .silent)
        old.start()
        #expect(await old.waitForConnection(timeoutMs: 5000) == .connected)
        for key in ["pending", "network_state"] {
            _ = await old.publish(MQTTMessage(topic: "homeassistant/sensor/006019010e92/\(key)/config", text: "{}", retain: true), timeoutMs: 5000)
        }
        await old.stop()
        let publisher = try await connectedPublisher(broker, settings: settings, record: directory.path + "/topics.json")
        await publisher.update(meters: [MeterPresentation(meter: testMeter, newestFirst: [])], gateway: GatewayPresentation(pending: 0, networkStateCode: 0))
        await sync(publisher)
        let now = try retained(broker, expect: 100)
        await publisher.client.stop()
        #expect(now["homeassistant/sensor/006019010e92/pending/config"] == nil)
        #expect(now["homeassistant/sensor/gg-test/pending/config"] != nil)
    }
}

extension FileManager {
    func permissionsOf(_ path: String) -> Int? {
        (try? attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? nil
    }
}
