import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Testing

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
