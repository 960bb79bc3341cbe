import BlueZ
import Foundation
import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Support
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Our BlueZ client (the `BlueZ` target) against both front ends of the simulator: the stand-in on a
/// private bus, and the real-BlueZ front end under bluezoo (an outside BlueZ emulator) with two adapters.
@Suite(.serialized) struct BlueZClientAgainstSimulatorTests {
    static let address = "C0:26:DA:01:02:03"

    static func meter(bonding: Bool, count: Int = 8) -> MeterDescription {
        MeterDescription(address: address, name: "meter+010203", passkey: 123456, requiresBonding: bonding,
                         records: MeterSeries.records(count: count, firstSequence: 4, start: nil, intervalMinutes: 90,
                                                      timeOffset: 60, unit: .kilogramPerLitre, withContext: true))
    }

    /// Reads link events until the RACP response ends the procedure; returns measurement sequence numbers,
    /// context sequence numbers and the RACP indications.
    static func collect(_ link: BlueZMeterLink) async throws -> ([UInt16], [UInt16], [[UInt8]]) {
        var gm: [UInt16] = []
        var ctx: [UInt16] = []
        var racp: [[UInt8]] = []
        for await event in link.events {
            switch event {
            case .value(let uuid, let bytes) where uuid == .glucoseMeasurement:
                gm.append(try GlucoseMeasurement(bytes: bytes).sequenceNumber)
            case .value(let uuid, let bytes) where uuid == .glucoseMeasurementContext:
                ctx.append(try GlucoseMeasurementContext(bytes: bytes).sequenceNumber)
            case .value(let uuid, let bytes) where uuid == .recordAccessControlPoint:
                racp.append(bytes)
                if bytes.first == 0x06 || bytes.first == 0x05 { return (gm, ctx, racp) }
            case .value:
                break
            case .disconnected(let reason):
                Issue.record("link dropped: \(reason)")
                return (gm, ctx, racp)
            }
        }
        return (gm, ctx, racp)
    }

    @Test(.timeLimit(.minutes(1))) func pairsAndDownloadsFromTheStandIn() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        var options = StandInOptions(busAddress: bus.address)
        options.clock = SimulationClock(scale: 10)
        let standIn = BlueZStandIn(meters: [Self.meter(bonding: true)], options: options, logger: .silent)
        try await standIn.start()
        let client = try await BlueZClient.connect(bus: bus.address)
        do {
            _ = try await client.waitForAdapter(timeout: .seconds(5))
            try await client.startDiscovery()
            _ = try await client.waitForDevice(address: Self.address, timeout: .seconds(10))
            try await client.stopDiscovery()
            await #expect(throws: BlueZError.self) { try await client.pair(address: Self.address, pin: 654321) }
            try await client.pair(address: Self.address, pin: 123456)
            #expect(await client.device(address: Self.address)?.paired == true)
            let link = try await client.connectMeter(address: Self.address, timeout: .seconds(20))
            #expect(try await link.read(.glucoseFeature).count == 2)
            try await link.subscribe(.glucoseMeasurement)
            try await link.subscribe(.glucoseMeasurementContext)
            try await link.subscribe(.recordAccessControlPoint)
            try await link.write(.recordAccessControlPoint, RACPRequest.reportAll.encoded())
            let (gm, ctx, racp) = try await Self.collect(link)
            #expect(gm == Array(4...11))
            #expect(ctx == Array(4...11))
            #expect(racp == [[0x06, 0x00, 0x01, 0x01]])
            await link.disconnect()
        } catch {
            Issue.record("\(error)")
        }
        await client.close()
        await standIn.stop()
    }

    /// bluezoo on `bus` with two adapters, hci0 (00:00:00:01:00:00, the central's) and hci1
    /// (00:00:00:02:00:00, the meter's); `stop()` ends it.
    static func startBluezoo(_ zoo: String, bus: String, scanInterval: Int? = nil) throws -> RunningBluezoo {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: zoo)
        var arguments = ["--auto-enable"]
        if let scanInterval { arguments += ["--scan-interval", String(scanInterval)] }
        process.arguments = arguments + ["-a", "00:00:00:01:00:00", "-a", "00:00:00:02:00:00"]
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SYSTEM_BUS_ADDRESS"] = bus
        process.environment = env
        process.standardError = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return RunningBluezoo(process: process)
    }

    /// `.venv/bin/bluezoo` of the package (created by scripts/test.sh), or `GLUCOSE_GATEWAY_BLUEZOO`.
    static func bluezooPath() -> String? {
        if let p = ProcessInfo.processInfo.environment["GLUCOSE_GATEWAY_BLUEZOO"] { return p }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let path = root.appendingPathComponent(".venv/bin/bluezoo").path
        return FileManager.default.isExecutableFile(atPath: path) ? path : nil
    }

    /// bluezoo with two adapters, the real-BlueZ front end on `hci1` playing a meter of `count` records, and
    /// our client on `hci0` (logging to `logger`): runs `body` with the client, the meter as discovered and
    /// a link to it, then stops everything.
    static func withBluezooMeter(count: Int, logger: Logger = .silent,
                                 _ body: (BlueZClient, DiscoveredDevice, BlueZMeterLink) async throws -> Void) async throws {
        let zoo = try #require(Self.bluezooPath(), "bluezoo is not installed: run scripts/test.sh (it fills .venv)")
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        let bluezoo = try BlueZClientAgainstSimulatorTests.startBluezoo(zoo, bus: bus.address, scanInterval: 1)
        defer { bluezoo.stop() }
        let client = try await BlueZClient.connect(bus: bus.address, logger: logger)
        let frontEnd = BlueZPeripheralFrontEnd(
            meter: Self.meter(bonding: false, count: count),
            options: .init(busAddress: bus.address, adapterName: "hci1"), logger: .silent)
        do {
            _ = try await client.waitForAdapter(named: "hci1", timeout: .seconds(15))
            try await frontEnd.start()
            try await client.startDiscovery(adapterName: "hci0")
            // The meter appears under the address of the adapter it runs on.
            let device = try await client.waitForDevice(address: "00:00:00:02:00:00", timeout: .seconds(15))
            try await client.stopDiscovery(adapterName: "hci0")
            let link = try await client.connectMeter(address: "00:00:00:02:00:00", timeout: .seconds(20))
            try await body(client, device, link)
            await link.disconnect()
        } catch {
            Issue.record("\(error)")
        }
        await frontEnd.stop()
        await client.close()
    }

    @Test(.timeLimit(.minutes(1))) func downloadsFromTheRealBlueZFrontEndUnderBluezoo() async throws {
        try await Self.withBluezooMeter(count: 6) { _, device, link in
            #expect(device.uuids.contains(GATTUUID.glucoseService.uuidString))
            #expect(try await link.read(.glucoseFeature) == [0x20, 0x04])
            try await link.subscribe(.glucoseMeasurement)
            try await link.subscribe(.recordAccessControlPoint)
            try await link.write(.recordAccessControlPoint, RACPRequest.reportAll.encoded())
            var gm: [UInt16] = []
            var racp: [[UInt8]] = []
            var lastRecordAt: ContinuousClock.Instant?
            var responseAt: ContinuousClock.Instant?
            for await event in link.events {
                if case .value(.glucoseMeasurement, let bytes) = event {
                    gm.append(try GlucoseMeasurement(bytes: bytes).sequenceNumber)
                    lastRecordAt = .now
                } else if case .value(.recordAccessControlPoint, let bytes) = event {
                    racp.append(bytes)
                    responseAt = .now
                    break
                } else if case .disconnected(let reason) = event {
                    Issue.record("link dropped: \(reason)")
                    break
                }
            }
            #expect(gm == Array(4...9))
            #expect(racp == [[0x06, 0x00, 0x01, 0x01]])
            // The response is held back after the last record (bluetoothd batches notifications but not
            // indications): a lower bound only, which load cannot break.
            if let lastRecordAt, let responseAt {
                #expect(responseAt - lastRecordAt >= .milliseconds(40))
            }
        }
    }

    /// bluezoo offers `AcquireNotify` on the characteristics that notify, as bluetoothd does, and hands it to
    /// the peripheral's GATT application, which (the simulator's front end, as most applications) does not
    /// implement it: the gateway's acquisition is refused, and the download falls back to `StartNotify`.
    @Test(.timeLimit(.minutes(1))) func aRefusedAcquisitionUnderBluezooFallsBackToStartNotify() async throws {
        let log = MemoryLogSink()
        try await Self.withBluezooMeter(count: 40, logger: Logger(label: "bluez", sink: log)) { client, _, link in
            let measurementPath = try #require(link.characteristicPaths[GATTUUID.glucoseMeasurement.uuidString])
            #expect(await client.objects[measurementPath]?["org.bluez.GattCharacteristic1"]?["NotifyAcquired"] != nil,
                    "bluezoo no longer offers AcquireNotify: the fall-back goes untested here")
            let results = await link.subscribe([.glucoseMeasurement, .glucoseMeasurementContext, .recordAccessControlPoint])
            for result in results { try result.get() }
            try await link.write(.recordAccessControlPoint, RACPRequest.reportAll.encoded())
            let (gm, ctx, racp) = try await Self.collect(link)
            #expect(gm == Array(4...43))
            #expect(Set(ctx) == Set(4...43))
            #expect(racp == [[0x06, 0x00, 0x01, 0x01]])
            #expect(await client.objects[measurementPath]?["org.bluez.GattCharacteristic1"]?["NotifyAcquired"]?.bool != true)
            #expect(log.entries.contains { $0.contains("AcquireNotify of 0x2a18 on 00:00:00:02:00:00 failed") && $0.hasSuffix("using StartNotify") })
        }
    }

    static func alias(_ client: BlueZClient, _ adapter: String) async throws -> String? {
        try await client.connection.call(destination: "org.bluez", path: "/org/bluez/" + adapter, interface: "org.freedesktop.DBus.Properties",
                                         member: "Get", arguments: [.string("org.bluez.Adapter1"), .string("Alias")],
                                         timeout: .seconds(5)).first?.string
    }

    /// On real BlueZ the meter's PIN is imposed by a KeyboardOnly agent that answers `RequestPasskey`
    /// with it (bluetoothd calls the meter side's default agent during SMP passkey entry).
    @Test(.timeLimit(.minutes(1))) func realBlueZFrontEndTypesTheMetersPin() async throws {
        let zoo = try #require(Self.bluezooPath(), "bluezoo is not installed: run scripts/test.sh (it fills .venv)")
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        let bluezoo = try BlueZClientAgainstSimulatorTests.startBluezoo(zoo, bus: bus.address)
        defer { bluezoo.stop() }
        let client = try await BlueZClient.connect(bus: bus.address)
        let frontEnd = BlueZPeripheralFrontEnd(
            meter: Self.meter(bonding: true, count: 2),
            options: .init(busAddress: bus.address, adapterName: "hci1", passkey: .fixed(246_813)), logger: .silent)
        do {
            _ = try await client.waitForAdapter(named: "hci1", timeout: .seconds(15))
            #expect(try await BlueZPeripheralFrontEnd.adapterAddress(busAddress: bus.address, adapterName: "hci1") == "00:00:00:02:00:00")
            try await frontEnd.start()
            let name = try #require(await frontEnd.uniqueName)
            let reply = try await client.connection.call(destination: name, path: "/org/glucosegateway/agent",
                                                         interface: "org.bluez.Agent1", member: "RequestPasskey",
                                                         arguments: [.objectPath("/org/bluez/hci1/dev_00_00_00_01_00_00")],
                                                         timeout: .seconds(5))
            #expect(reply.first?.uint32 == 246_813)
            // The adapter answers to the meter's name (its GAP Device Name) while it plays the meter.
            #expect(try await Self.alias(client, "hci1") == "meter+010203")
        } catch {
            Issue.record("\(error)")
        }
        let before = try? await Self.alias(client, "hci0")
        await frontEnd.stop()
        #expect(try await Self.alias(client, "hci1") != "meter+010203")
        #expect(try await Self.alias(client, "hci0") == before)
        await client.close()
    }
}

/// A bluezoo process started by `BlueZClientAgainstSimulatorTests.startBluezoo`.
struct RunningBluezoo {
    let process: Process
    func stop() {
        // SIGKILL: a child of the test runner may inherit a blocked SIGTERM.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
