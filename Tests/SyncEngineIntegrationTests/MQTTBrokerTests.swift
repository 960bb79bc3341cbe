import Foundation
import GatewayCore
import Support
import SyncEngine
import Synchronization
import Testing
import TestSupport
import Transport

/// A real `mosquitto` from Debian on 127.0.0.1 and a free port, with its own config in a temporary
/// directory; stopped (or killed) by its pid. `scripts/install-deps.sh --test` installs it.
final class MosquittoBroker: @unchecked Sendable {
    // @unchecked: `process` changes only in start/stop, which a test calls from one task.
    let port: Int
    let directory: String
    var process: Process?
    let passwords: [String: String]

    init(passwords: [String: String] = [:]) throws {
        directory = NSTemporaryDirectory() + "gg-mqtt-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        port = Int(try LoopbackSocket.freePort())
        self.passwords = passwords
        var config = "listener \(port) 127.0.0.1\npersistence false\nlog_dest file \(directory)/mosquitto.log\nlog_type all\n"
        if passwords.isEmpty {
            config += "allow_anonymous true\n"
        } else {
            let file = directory + "/passwords"
            for (user, password) in passwords {
                let tool = Process()
                tool.executableURL = URL(fileURLWithPath: "/usr/bin/mosquitto_passwd")
                tool.arguments = (FileManager.default.fileExists(atPath: file) ? [] : ["-c"]) + ["-b", file, user, password]
                try tool.run()
                tool.waitUntilExit()
                guard tool.terminationStatus == 0 else { throw TestFailure("mosquitto_passwd failed") }
            }
            config += "allow_anonymous false\npassword_file \(file)\n"
        }
        try config.write(toFile: directory + "/mosquitto.conf", atomically: true, encoding: .utf8)
        try start()
    }

    deinit { stop() }

    func start() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/sbin/mosquitto")
        p.arguments = ["-c", directory + "/mosquitto.conf"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try p.run()
        process = p
        // Ready when the port accepts a connection (bounded).
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if Self.accepts(port) { return }
            usleep(20_000)
        }
        throw TestFailure("mosquitto did not listen on \(port)")
    }

    static func accepts(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    func stop() {
        guard let p = process else { return }
        process = nil
        if p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
    }

    var broker: MQTTBrokerSettings { MQTTBrokerSettings(host: "127.0.0.1", port: port, keepAliveSeconds: 5) }
}

/// `mosquitto_sub` as a child process: subscribed before it is returned (its SUBACK seen), it collects
/// `topic<TAB>retained<TAB>payload` lines until `count` messages or `seconds` passed.
final class Subscriber: @unchecked Sendable {
    // @unchecked: the pipe is read only by `messages()`.
    let process = Process()
    let out = Pipe()

    struct Message: Equatable {
        var topic: String
        var retained: Bool
        var payload: String
    }

    init(port: Int, topics: [String], count: Int, seconds: Int, retainedOnly: Bool = false) throws {
        // Line-buffered, so the SUBACK line comes before the process ends.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/stdbuf")
        // Not `-W`: it relies on SIGALRM, which the test process's threads block (and children inherit
        // the mask); the subscriber is killed by its pid at the deadline instead.
        var args = ["-oL", "/usr/bin/mosquitto_sub", "-h", "127.0.0.1", "-p", String(port), "-q", "1", "-C", String(count), "-F", "%t\t%r\t%p", "-d"]
        if retainedOnly { args.append("--retained-only") }
        for t in topics { args += ["-t", t] }
        process.arguments = args
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        var seen = Data()
        let deadline = Date().addingTimeInterval(10)
        while !String(decoding: seen, as: UTF8.self).contains("SUBACK"), Date() < deadline {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            seen.append(chunk)
        }
        early = seen
        let pid = process.processIdentifier
        let running = process
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(seconds)) {
            if running.isRunning { kill(pid, SIGKILL) }
        }
    }

    private var early: Data

    /// Waits for the subscriber to end (count reached or its timeout) and returns what it received.
    func messages() -> [Message] {
        let rest = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: early + rest, as: UTF8.self)
        return text.split(separator: "\n").compactMap { line -> Message? in
            let parts = line.split(separator: "\t", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, parts[1] == "0" || parts[1] == "1" else { return nil }
            return Message(topic: String(parts[0]), retained: parts[1] == "1", payload: String(parts[2]))
        }
    }
}

final class CollectingSink: LogSink {
    let lines = Mutex<[String]>([])
    func write(level: LogLevel, label: String, message: String) { lines.withLock { $0.append("\(label): \(message)") } }
    var all: String { lines.withLock { $0.joined(separator: "\n") } }
}

func mqttSettings(_ broker: MosquittoBroker, prefix: String = "gg-test", username: String? = nil, password: String? = nil) -> MQTTSettings {
    var b = broker.broker
    b.username = username
    b.password = password.map(Secret.init)
    return MQTTSettings(broker: b, topicPrefix: prefix)
}

/// Readings for the MQTT destination: uploadable ones, and an excluded one (control solution) and a HI
/// that must never be published.
func mqttStore(uploadable: Range<Int>, alsoExcluded: Bool = true) async -> FakeOutboxStore {
    let store = FakeOutboxStore()
    for n in uploadable {
        await store.enqueue(syntheticReading(n), meter: testMeter, builders: [MQTTBodyBuilder()], createdAt: Int64(n))
    }
    if alsoExcluded {
        var control = syntheticReading(900)
        control.exclusion = .controlSolution
        await store.enqueue(control, meter: testMeter, builders: [MQTTBodyBuilder()])
        var high = syntheticReading(901)
        high.mgdl = nil
        high.special = .positiveInfinity
        high.exclusion = .high
        await store.enqueue(high, meter: testMeter, builders: [MQTTBodyBuilder()])
    }
    return store
}

@Suite("MQTT against mosquitto", .serialized, .timeLimit(.minutes(2)))
struct MQTTBrokerTests {
    @Test func readingEventsArriveWithQoS1AndAreAcknowledgedOnlyThen() async throws {
        let broker = try MosquittoBroker()
        let settings = mqttSettings(broker)
        let store = await mqttStore(uploadable: 0..<5)
        #expect(await store.rows.count == 5)  // the excluded and HI readings have no MQTT row
        let sub = try Subscriber(port: broker.port, topics: ["gg-test/#"], count: 5, seconds: 20)
        let uploader = Uploader(settings: UploadSettings(mqtt: settings), store: store, logger: .silent, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 20))
        await uploader.shutdown()
        #expect(outcome.uploaded == 5)
        #expect(outcome.pending == 0)
        let got = sub.messages()
        #expect(got.count == 5)
        #expect(got.allSatisfy { $0.topic == "gg-test/006019010e92/reading" && !$0.retained })
        let bodies = got.compactMap { try? JSONSerialization.jsonObject(with: Data($0.payload.utf8)) as? [String: Any] }
        #expect(Set(bodies.compactMap { $0["sequence"] as? Int }) == Set(0..<5))
        let first = try #require(bodies.first { $0["sequence"] as? Int == 0 })
        #expect(first["mg_dl"] as? Int == 100)
        #expect(first["mmol_l"] as? Double == 5.6)
        #expect(first["time"] as? String == "2026-01-01T08:00:00.000+01:00")
        #expect(first["timestamp"] as? Int == 1_767_250_800_000)
        #expect(first["meter"] as? String == "006019010e92")
    }

    @Test func readingsStoredDuringABrokerOutageArriveAfterIt() async throws {
        let broker = try MosquittoBroker()
        let settings = mqttSettings(broker)
        let store = await mqttStore(uploadable: 0..<3, alsoExcluded: false)
        var recovery = RecoverySettings()
        recovery.retryCount = 1
        recovery.networkTimeoutMs = 500
        let uploader = Uploader(settings: UploadSettings(recovery: recovery, mqtt: settings), store: store, logger: .silent,
                                timing: fastTiming())
        #expect(await uploader.drain(deadline: deadline(seconds: 20)).uploaded == 3)

        broker.stop()
        for n in 3..<10 {
            var r = syntheticReading(n)
            if n == 6 { r.exclusion = .sensorFault }  // excluded: never published
            await store.enqueue(r, meter: testMeter, builders: [MQTTBodyBuilder()], createdAt: Int64(n))
        }
        let during = await uploader.drain(deadline: deadline(seconds: 3))
        #expect(during.uploaded == 0)
        #expect(during.pending == 6)
        #expect(during.deferred)
        let state = try await store.destinationState(.mqtt)
        #expect(state?.lastErrorCode == NetworkErrorCode.timeout)
        #expect(state?.lastErrorMessage?.contains("127.0.0.1:\(broker.port)") == true)

        try broker.start()
        let sub = try Subscriber(port: broker.port, topics: ["gg-test/+/reading"], count: 6, seconds: 20)
        let after = await uploader.drain(deadline: deadline(seconds: 20))
        await uploader.shutdown()
        #expect(after.uploaded == 6)
        #expect(after.pending == 0)
        let sequences = sub.messages().compactMap { m -> Int? in
            (try? JSONSerialization.jsonObject(with: Data(m.payload.utf8)) as? [String: Any])?["sequence"] as? Int
        }
        #expect(Set(sequences) == [3, 4, 5, 7, 8, 9])
    }

    @Test func discoveryConfigsAndStatesAreRetained() async throws {
        let broker = try MosquittoBroker()
        let settings = mqttSettings(broker)
        let client = MQTTClient(settings: settings.broker, availabilityTopic: settings.availabilityTopic, logger: .silent)
        #expect(client.start())
        #expect(await client.waitForConnection(timeoutMs: 5000) == .connected)
        let publisher = HomeAssistantPublisher(settings: settings, client: client)
        var low = syntheticReading(7, mgdl: 123)  // 130 mg/dL (the synthetic meter adds n % 50)
        low.sensorStatus = 1  // battery low at the newest reading
        var excluded = syntheticReading(8)
        excluded.exclusion = .controlSolution
        excluded.sensorStatus = 1
        let meter = MeterPresentation(meter: testMeter, newestFirst: [excluded, low, syntheticReading(6)])
        await publisher.update(meters: [meter], gateway: GatewayPresentation(pending: 2, networkStateCode: 1001))
        // The retained set arrives after a reconnection too: the broker restarted without persistence
        // has none left, and the client publishes it again.
        _ = await client.publish(MQTTMessage(topic: "gg-test/sync", text: "x", retain: false), timeoutMs: 5000)
        broker.stop()
        try broker.start()
        #expect(await client.waitForConnection(timeoutMs: 10_000) == .connected)
        _ = await client.publish(MQTTMessage(topic: "gg-test/sync", text: "x", retain: false), timeoutMs: 5000)

        let sub = try Subscriber(port: broker.port, topics: ["homeassistant/#", "gg-test/#"], count: 18, seconds: 10, retainedOnly: true)
        let got = sub.messages()
        await client.stop()
        let byTopic = Dictionary(got.map { ($0.topic, $0.payload) }, uniquingKeysWith: { a, _ in a })
        let id = "006019010e92"
        #expect(byTopic["gg-test/status"] == "online")
        #expect(byTopic["gg-test/\(id)/glucose_mgdl"] == "130")
        #expect(byTopic["gg-test/\(id)/glucose_mmol"] == "7.2")
        #expect(byTopic["gg-test/\(id)/glucose_time"] == "2026-01-01T08:35:00.000+01:00")
        #expect(byTopic["gg-test/\(id)/battery_low"] == "ON")
        #expect(byTopic["gg-test/\(id)/repair_needed"] == "OFF")
        #expect(byTopic["gg-test/gateway/pending"] == "2")
        #expect(byTopic["gg-test/gateway/network_state"] == "1001")
        let config = try #require(byTopic["homeassistant/sensor/\(id)/glucose_mgdl/config"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(config.utf8)) as? [String: Any])
        #expect(json["device_class"] as? String == "blood_glucose_concentration")
        #expect(json["unit_of_measurement"] as? String == "mg/dL")
        #expect(json["state_topic"] as? String == "gg-test/\(id)/glucose_mgdl")
        #expect(json["availability_topic"] as? String == "gg-test/status")
        #expect(json["unique_id"] as? String == "glucose_gateway_\(id)_glucose_mgdl")
        let device = try #require(json["device"] as? [String: Any])
        #expect(device["identifiers"] as? [String] == ["glucose_gateway_\(id)"])
        #expect(device["serial_number"] as? String == "1234ABCD")
        for key in ["glucose_mmol", "glucose_time", "glucose_result"] {
            #expect(byTopic["homeassistant/sensor/\(id)/\(key)/config"] != nil, "config for \(key)")
        }
        for key in ["pending", "network_state"] {
            #expect(byTopic["homeassistant/sensor/gg-test/\(key)/config"] != nil, "gateway config for \(key)")
        }
        let battery = try #require(byTopic["homeassistant/binary_sensor/\(id)/battery_low/config"])
        #expect(battery.contains(#""device_class":"battery""#))
        let repair = try #require(byTopic["homeassistant/binary_sensor/\(id)/repair_needed/config"])
        let repairJSON = try #require(try JSONSerialization.jsonObject(with: Data(repair.utf8)) as? [String: Any])
        #expect(repairJSON["device_class"] as? String == "problem")
        #expect(repairJSON["state_topic"] as? String == "gg-test/\(id)/repair_needed")
        #expect(repairJSON["payload_on"] as? String == "ON" && repairJSON["payload_off"] as? String == "OFF")
        #expect((repairJSON["device"] as? [String: Any])?["identifiers"] as? [String] == ["glucose_gateway_\(id)"])
    }

    @Test func aMeterThatLostItsBondShowsNeedsPairingAgainUntilPaired() {
        let settings = MQTTSettings(broker: MQTTBrokerSettings(host: "127.0.0.1", port: 1883), topicPrefix: "gg-test")
        var lost = testMeter
        lost.bondLostAt = 1_767_250_800_000
        lost.bondLostMessage = "authentication failed"
        let id = "006019010e92"
        func state(_ meter: MeterInfo) -> String? {
            let states = HomeAssistantDiscovery.states(meter: MeterPresentation(meter: meter, newestFirst: []), settings: settings)
            return states.first { $0.topic == "gg-test/\(id)/repair_needed" }.map { String(decoding: $0.payload, as: UTF8.self) }
        }
        #expect(state(lost) == "ON")
        #expect(state(testMeter) == "OFF")
    }

    @Test func aCleanStopPublishesOffline() async throws {
        let broker = try MosquittoBroker()
        let settings = mqttSettings(broker)
        let client = MQTTClient(settings: settings.broker, availabilityTopic: settings.availabilityTopic, logger: .silent)
        client.start()
        #expect(await client.waitForConnection(timeoutMs: 5000) == .connected)
        await client.stop()
        let got = try Subscriber(port: broker.port, topics: ["gg-test/status"], count: 1, seconds: 5, retainedOnly: true).messages()
        #expect(got == [Subscriber.Message(topic: "gg-test/status", retained: true, payload: "offline")])
    }

    @Test func aCredentialCheckEndsWithTheFirstFailedAttempt() async throws {
        // A broker without TLS for a client that speaks TLS: every attempt fails in the handshake.
        let broker = try MosquittoBroker()
        var settings = mqttSettings(broker)
        settings.broker.tls = true
        let client = MQTTClient(settings: settings.broker, availabilityTopic: nil, logger: Logger(label: "test", sink: CollectingSink()))
        let verdict = await MQTTDestination(settings: settings, client: client).checkCredentials(timeoutMs: 20_000)
        let attempts = client.failureCount
        await client.stop()
        guard case .unreachable(let why) = verdict else {
            Issue.record("expected unreachable, got \(verdict)")
            return
        }
        #expect(why.contains("TLS"))
        // One failed attempt (a second only if the machine stalled for the client's 0.5 s reconnect wait),
        // not one every 0.5, 1, 2, 4, 8 s until the timeout.
        #expect(attempts >= 1 && attempts <= 2)
    }

    @Test func wrongPasswordPausesTheDestinationAndNeverShowsThePassword() async throws {
        let password = "very-secret-broker-pw"
        let broker = try MosquittoBroker(passwords: ["gw": password])
        let sink = CollectingSink()
        let logger = Logger(label: "test", minimumLevel: .debug, sink: sink)
        let store = await mqttStore(uploadable: 0..<2, alsoExcluded: false)
        let wrong = mqttSettings(broker, username: "gw", password: "not-the-" + password)
        let uploader = Uploader(settings: UploadSettings(mqtt: wrong), store: store, logger: logger, timing: fastTiming())
        let outcome = await uploader.drain(deadline: deadline(seconds: 10))
        await uploader.shutdown()
        #expect(outcome.uploaded == 0)
        guard case .paused? = outcome.reports.first?.end else {
            Issue.record("expected paused, got \(String(describing: outcome.reports.first?.end))")
            return
        }
        let state = try await store.destinationState(.mqtt)
        #expect(state?.state == .paused)
        let shown = sink.all + (state?.lastErrorMessage ?? "")
        #expect(!shown.contains(password))
        #expect(shown.contains("refused"))

        let right = mqttSettings(broker, username: "gw", password: password)
        let again = Uploader(settings: UploadSettings(mqtt: right), store: store, logger: logger, timing: fastTiming())
        let second = await again.drain(deadline: deadline(seconds: 10))
        await again.shutdown()
        #expect(second.uploaded == 2)
        #expect(!sink.all.contains(password))
    }
}
