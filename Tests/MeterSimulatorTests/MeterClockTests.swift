import Foundation
import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Support
import Synchronization
import Testing
import TestSupport
import BlueZ
#if canImport(Glibc)
import Glibc
#endif

@Suite struct MeterClockTests {
    /// 2024-03-05T14:30:00Z
    let utc: UnixMillis = 1_709_649_000_000

    @Test func showsTrueLocalTimeOfItsZonePlusSkew() {
        let state = MeterClockState(clock: MeterClock(kind: .currentTime, skewSeconds: -300, utcOffsetMinutes: 60))
        #expect(state.time(utcMillis: utc, simulatedSeconds: 0).isoString == "2024-03-05T15:25:00")
        #expect(state.skew(simulatedSeconds: 0) == -300)
    }

    @Test func driftAccumulatesInSimulatedTime() {
        let state = MeterClockState(clock: MeterClock(kind: .vendor, skewSeconds: 10, driftSecondsPerDay: 4))
        #expect(state.skew(simulatedSeconds: 43_200) == 12)
        // The wall clock alone does not add drift: an hour later with no simulated time gone, same skew.
        #expect(state.time(utcMillis: utc + 3_600_000, simulatedSeconds: 0).isoString == "2024-03-05T15:30:10")
    }

    @Test func settingMovesTheClockAndResetsDrift() {
        var state = MeterClockState(clock: MeterClock(kind: .currentTime, skewSeconds: 5000, driftSecondsPerDay: 86_400))
        let t = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 14, minute: 30, second: 30)!
        state.set(to: t, utcMillis: utc, simulatedSeconds: 100)
        #expect(state.skew(simulatedSeconds: 100) == 30)
        #expect(state.time(utcMillis: utc + 1000, simulatedSeconds: 100).isoString == "2024-03-05T14:30:31")
        #expect(state.skew(simulatedSeconds: 100 + 86_400) == 30 + 86_400)
    }

    @Test func currentTimeValueCarriesDayOfWeek() {
        // 2024-03-05 was a Tuesday (2); 1970-01-04 a Sunday (7).
        let t = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 14, minute: 30, second: 0)!
        #expect(MeterClockState.currentTimeValue(t) == [0xE8, 0x07, 3, 5, 14, 30, 0, 2, 0, 0])
        #expect(MeterClockState.dayOfWeek(GlucoseDateTime(year: 1970, month: 1, day: 4, hour: 23, minute: 0, second: 0)!) == 7)
        #expect(MeterClockState.dayOfWeek(GlucoseDateTime(year: 1969, month: 12, day: 29, hour: 0, minute: 0, second: 0)!) == 1)
    }

    @Test func vendorCommands() {
        let t = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 14, minute: 30, second: 0)!
        #expect(ISENSClockProtocol.getTimeCommand() == [0xC0, 0x03, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0])
        #expect(ISENSClockProtocol.setTimeCommand(t) == [0xC0, 0x03, 0x01, 0x00, 0xE8, 0x07, 3, 5, 14, 30, 0])
        #expect(ISENSClockProtocol.command(ISENSClockProtocol.getTimeCommand()) == .getTime)
        #expect(ISENSClockProtocol.command(ISENSClockProtocol.setTimeCommand(t)) == .setTime(t))
        #expect(ISENSClockProtocol.command([0xC0, 0x03, 0x01, 0x00, 0xE8, 0x07, 13, 5, 14, 30, 0]) == nil)
        #expect(ISENSClockProtocol.command([0xC0, 0x02, 0xE1, 0x01, 5, 0, 1, 0, 0, 0, 0]) == nil)
        #expect(ISENSClockProtocol.answer(t) == [0x05, 0, 0, 0, 0xE8, 0x07, 3, 5, 14, 30, 0])
    }

    @Test func meterFileClock() throws {
        let m = try MeterFile.parse("""
        {"address": "C0:26:DA:01:02:03", "name": "m", "pin": "123456",
         "clock": {"kind": "gls-date-time", "writable": false, "skewSeconds": -90, "utcOffsetMinutes": 60}}
        """)
        #expect(m.clock == MeterClock(kind: .glsDateTime, writable: false, skewSeconds: -90, utcOffsetMinutes: 60))
        let plain = try MeterFile.parse(#"{"address": "C0:26:DA:01:02:03", "name": "m", "pin": "123456"}"#)
        #expect(plain.clock == .none)
        #expect(throws: MeterFileError.self) {
            try MeterFile.parse(#"{"address": "C0:26:DA:01:02:03", "name": "m", "pin": "123456", "clock": {"kind": "sundial"}}"#)
        }
        #expect(throws: MeterFileError.self) {
            try MeterFile.parse(#"{"address": "C0:26:DA:01:02:03", "name": "m", "pin": "123456", "clock": {"kind": "cts", "skew": 3}}"#)
        }
    }

    @Test func clockFlags() throws {
        #expect(try MeterFile.clock(kind: nil, skew: nil, readOnly: false, utcOffset: nil) == .none)
        #expect(try MeterFile.clock(kind: "cts", skew: "-600", readOnly: true, utcOffset: "120")
                == MeterClock(kind: .currentTime, writable: false, skewSeconds: -600, utcOffsetMinutes: 120))
        #expect(throws: MeterFileError.self) { try MeterFile.clock(kind: nil, skew: "5", readOnly: false, utcOffset: nil) }
        #expect(throws: MeterFileError.self) { try MeterFile.clock(kind: "cts", skew: "soon", readOnly: false, utcOffset: nil) }
    }
}

/// A wall clock the test sets.
final class FixedWallClock: Sendable {
    let millis: Mutex<UnixMillis>
    init(_ m: UnixMillis) { millis = Mutex(m) }
    var now: UnixMillis { millis.withLock { $0 } }
    func advance(seconds: Int64) { millis.withLock { $0 += seconds * 1000 } }
}

@Suite struct MeterPeripheralClockTests {
    static let utc: UnixMillis = 1_709_649_000_000   // 2024-03-05T14:30:00Z

    static func peripheral(_ clock: MeterClock, wall: FixedWallClock, manual: ManualClock = ManualClock(),
                           scale: Double = 1) -> MeterPeripheral {
        MeterPeripheral(meter: MeterDescription(address: "C0:26:DA:00:00:0A", name: "m", passkey: 123456, clock: clock),
                        clock: SimulationClock(scale: scale, base: manual), wallClock: { wall.now })
    }

    @Test func layoutOffersTheClockOfItsKind() {
        func layout(_ c: MeterClock) -> GATTLayout {
            GATTLayout(meter: MeterDescription(address: "C0:26:DA:00:00:0A", name: "m", passkey: 1, clock: c))
        }
        let plain = layout(.none)
        #expect(plain.services.map(\.uuid) == [.glucoseService, .deviceInformationService])
        #expect(plain.characteristic(.currentTime) == nil && plain.characteristic(.dateTime) == nil)
        let cts = layout(MeterClock(kind: .currentTime))
        #expect(cts.services.map(\.uuid) == [.glucoseService, .deviceInformationService, .currentTimeService])
        #expect(cts.characteristic(.currentTime)?.flags == ["read", "write", "notify"])
        // Meters without a clock service keep their handles.
        #expect(cts.services[0] == plain.services[0] && cts.services[1] == plain.services[1])
        #expect(layout(MeterClock(kind: .currentTime, writable: false)).characteristic(.currentTime)?.flags == ["read", "notify"])
        let gls = layout(MeterClock(kind: .glsDateTime))
        #expect(gls.services.count == 2 && gls.services[0].characteristics.last?.uuid == .dateTime)
        #expect(gls.characteristic(.dateTime)?.flags == ["read", "write"])
        let vendor = layout(MeterClock(kind: .vendor))
        #expect(vendor.services.last?.uuid == .isensVendorService)
        #expect(vendor.characteristic(.isensVendorClock)?.flags == ["write", "notify"])
        let v15 = layout(MeterClock(kind: .vendorV15))
        #expect(v15.services.last?.uuid.uuidString == "c4dea010-5a9d-11e9-8647-d663bd873d93")
        #expect(v15.characteristic(.isensVendorClockV15)?.flags == ["write", "notify"])
        #expect(v15.characteristic(.isensVendorClock) == nil)
    }

    @Test func currentTimeReadAndWrite() async throws {
        let wall = FixedWallClock(Self.utc)
        let p = Self.peripheral(MeterClock(kind: .currentTime, skewSeconds: -600, utcOffsetMinutes: 60), wall: wall)
        #expect(await p.read(.currentTime) == [0xE8, 0x07, 3, 5, 15, 20, 0, 2, 0, 0])
        #expect(await p.read(.dateTime) == nil)
        let set = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 15, minute: 30, second: 5)!
        #expect(try await p.writeClock(.currentTime, MeterClockState.currentTimeValue(set, adjustReason: 1)) == set)
        #expect(await p.clockReading.skewSeconds == 5)
        wall.advance(seconds: 60)
        #expect(await p.clockReading.time.isoString == "2024-03-05T15:31:05")
        // A Date Time alone (7 bytes) or a month 13 is not a Current Time.
        await #expect(throws: GlucoseServer.ATTError(0xFF)) { try await p.writeClock(.currentTime, set.encoded()) }
        await #expect(throws: GlucoseServer.ATTError(0xFF)) {
            try await p.writeClock(.currentTime, [0xE8, 0x07, 13, 5, 15, 20, 0, 2, 0, 0])
        }
        #expect(await p.clockReading.skewSeconds == 5)
    }

    @Test func readOnlyClockRefusesWrites() async throws {
        let wall = FixedWallClock(Self.utc)
        let p = Self.peripheral(MeterClock(kind: .glsDateTime, writable: false, skewSeconds: 90), wall: wall)
        #expect(await p.read(.dateTime) == [0xE8, 0x07, 3, 5, 14, 31, 30])
        let set = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 14, minute: 30, second: 0)!
        await #expect(throws: GlucoseServer.ATTError(0x80)) { try await p.writeClock(.dateTime, set.encoded()) }
        #expect(await p.clockReading.skewSeconds == 90)
    }

    @Test func driftFollowsTheTimeScale() async throws {
        let manual = ManualClock()
        let wall = FixedWallClock(Self.utc)
        let p = Self.peripheral(MeterClock(kind: .currentTime, driftSecondsPerDay: 8640), wall: wall, manual: manual, scale: 100)
        manual.advance(by: .seconds(864))   // a simulated day at scale 100
        #expect(await p.clockReading.skewSeconds == 8640)
    }

    @Test(.timeLimit(.minutes(1))) func vendorClockAnswersAndSwitchesOffWhenNotificationsStop() async throws {
        let wall = FixedWallClock(Self.utc)
        let p = Self.peripheral(MeterClock(kind: .vendor, skewSeconds: 3600), wall: wall)
        await p.linkUp()
        #expect(await p.read(.isensVendorClock) == nil)
        await p.setSubscribed(.isensVendorClock, true)
        // Asking for the time sets nothing.
        #expect(try await p.writeClock(.isensVendorClock, ISENSClockProtocol.getTimeCommand()) == nil)
        var events = p.events.makeAsyncIterator()
        #expect(await events.next() == .value(.isensVendorClock, [0x05, 0, 0, 0, 0xE8, 0x07, 3, 5, 15, 30, 0]))
        let set = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 14, minute: 30, second: 0)!
        #expect(try await p.writeClock(.isensVendorClock, ISENSClockProtocol.setTimeCommand(set)) == set)
        #expect(await events.next() == .value(.isensVendorClock, [0x05, 0, 0, 0, 0xE8, 0x07, 3, 5, 14, 30, 0]))
        #expect(await p.clockReading.skewSeconds == 0)
        await #expect(throws: GlucoseServer.ATTError(0xFF)) { try await p.writeClock(.isensVendorClock, [0xC0, 0x03]) }
        await p.setSubscribed(.isensVendorClock, false)
        #expect(await events.next() == .dropLink)
        await p.stop()
    }
}
