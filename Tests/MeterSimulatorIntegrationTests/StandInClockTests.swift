import Foundation
import GatewayCore
import GlucoseProfile
import Support
@testable import MeterSimulator
import Synchronization
import Testing
import TestSupport
import BlueZ
#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized) struct StandInClockTests {
    static let address = "C0:26:DA:01:02:0C"

    @Test(.timeLimit(.minutes(1))) func centralReadsAndSetsTheClockThroughTheStandIn() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        let meter = MeterDescription(address: Self.address, name: "meter+01020c", passkey: 123456, requiresBonding: false,
                                     clock: MeterClock(kind: .currentTime, skewSeconds: -7200))
        let standIn = BlueZStandIn(meters: [meter], options: StandInOptions(busAddress: bus.address), logger: .silent)
        try await standIn.start()
        let client = try await BlueZClient.connect(bus: bus.address)
        do {
            _ = try await client.waitForAdapter(timeout: .seconds(5))
            try await client.startDiscovery()
            _ = try await client.waitForDevice(address: Self.address, timeout: .seconds(10))
            try await client.stopDiscovery()
            let link = try await client.connectMeter(address: Self.address, timeout: .seconds(20))
            let before = try await link.read(.currentTime)
            #expect(before.count == 10)
            let shown = try GlucoseDateTime(bytes: before)
            let trueNow = GlucoseDateTime(naiveSeconds: Int64(SystemClock.now() / 1000))
            #expect(abs(trueNow.naiveSeconds - shown.naiveSeconds - 7200) <= 2)
            try await link.write(.currentTime, MeterClockState.currentTimeValue(trueNow))
            let after = try GlucoseDateTime(bytes: try await link.read(.currentTime))
            #expect(abs(after.naiveSeconds - trueNow.naiveSeconds) <= 2)
            let skew = try #require(await standIn.meterPeripheral(Self.address).clockReading.skewSeconds)
            #expect(abs(skew) <= 2)
            await #expect(throws: MeterLinkError.self) { try await link.write(.currentTime, [1, 2, 3]) }
            await link.disconnect()
        } catch {
            Issue.record("\(error)")
        }
        await client.close()
        await standIn.stop()
    }
}

extension StandInClockTests {
    /// The real-BlueZ front end under bluezoo (an outside BlueZ emulator): the vendor clock's command and
    /// answer travel through bluetoothd's GATT server API as a central sees them.
    @Test(.timeLimit(.minutes(1))) func vendorClockThroughTheRealBlueZFrontEndUnderBluezoo() async throws {
        let zoo = try #require(BlueZClientAgainstSimulatorTests.bluezooPath(), "bluezoo is not installed: run scripts/test.sh (it fills .venv)")
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        let bluezoo = try BlueZClientAgainstSimulatorTests.startBluezoo(zoo, bus: bus.address, scanInterval: 1)
        defer { bluezoo.stop() }
        let client = try await BlueZClient.connect(bus: bus.address)
        let meter = MeterDescription(address: Self.address, name: "meter+01020c", passkey: 123456, requiresBonding: false,
                                     clock: MeterClock(kind: .vendor, skewSeconds: 5400))
        let log = MemoryLogSink()
        let frontEnd = BlueZPeripheralFrontEnd(meter: meter, options: .init(busAddress: bus.address, adapterName: "hci1"),
                                               logger: Logger(label: "simulate-meter", minimumLevel: .info, sink: log))
        func clockLines() -> [String] { log.entries.filter { $0.contains("clock set to") } }
        do {
            _ = try await client.waitForAdapter(named: "hci1", timeout: .seconds(15))
            try await frontEnd.start()
            try await client.startDiscovery(adapterName: "hci0")
            _ = try await client.waitForDevice(address: "00:00:00:02:00:00", timeout: .seconds(15))
            try await client.stopDiscovery(adapterName: "hci0")
            let link = try await client.connectMeter(address: "00:00:00:02:00:00", timeout: .seconds(20))
            var events = link.events.makeAsyncIterator()
            func answer() async -> GlucoseDateTime? {
                while let e = await events.next() {
                    if case .value(.isensVendorClock, let bytes) = e, bytes.count == 11, bytes[0] == 0x05 {
                        return try? GlucoseDateTime(bytes: bytes[4...])
                    }
                    if case .disconnected = e { return nil }
                }
                return nil
            }
            try await link.subscribe(.isensVendorClock)
            try await link.write(.isensVendorClock, ISENSClockProtocol.getTimeCommand())
            let shown = try #require(await answer())
            let trueNow = GlucoseDateTime(naiveSeconds: Int64(SystemClock.now() / 1000))
            #expect(abs(shown.naiveSeconds - trueNow.naiveSeconds - 5400) <= 2)
            // Asking for the time is no clock write: the meter side logs only a set.
            #expect(clockLines().isEmpty)
            try await link.write(.isensVendorClock, ISENSClockProtocol.setTimeCommand(trueNow))
            let after = try #require(await answer())
            #expect(abs(after.naiveSeconds - trueNow.naiveSeconds) <= 2)
            #expect(abs(await frontEnd.peripheral.clockReading.skewSeconds) <= 2)
            let lines = clockLines()
            #expect(lines.count == 1)
            #expect(lines.first?.hasPrefix("notice simulate-meter: clock set to \(trueNow) through \(GATTUUID.isensVendorClock); the clock is now off by ") == true,
                    "\(lines)")
            await link.disconnect()
        } catch {
            Issue.record("\(error)")
        }
        await frontEnd.stop()
        await client.close()
    }
}
