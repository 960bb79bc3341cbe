import GatewayCore
import Testing
import TestSupport
@testable import Gateway

/// When the daemon tries which meter next, on a manual clock.
@Suite("Meter schedule")
struct MeterScheduleTests {
    static let meter = "AA:BB:CC:DD:EE:01"
    static func schedule() -> MeterSchedule {
        MeterSchedule(quietAfterDownload: .seconds(20), retryDelay: .seconds(2), pairedRefresh: .seconds(5))
    }

    @Test("a meter never downloaded may start at once; after a complete download it waits the quiet period, to the instant")
    func quietPeriod() {
        let clock = ManualClock()
        var s = Self.schedule()
        #expect(s.waitsUntil(Self.meter, at: clock.now) == nil)
        let end = s.sessionEnded(Self.meter, complete: true, at: clock.now)
        #expect(end == clock.now + .seconds(20))
        clock.advance(by: .seconds(19))
        #expect(s.waitsUntil(Self.meter, at: clock.now) == end)
        #expect(s.waitsUntil("AA:BB:CC:DD:EE:02", at: clock.now) == nil)
        clock.advance(by: .seconds(1))
        #expect(s.waitsUntil(Self.meter, at: clock.now) == nil)
    }

    @Test("after a failed or interrupted session the meter waits the retry delay only")
    func retryDelay() {
        let clock = ManualClock()
        var s = Self.schedule()
        s.sessionEnded(Self.meter, complete: false, at: clock.now)
        clock.advance(by: .milliseconds(1999))
        #expect(s.waitsUntil(Self.meter, at: clock.now) != nil)
        clock.advance(by: .milliseconds(1))
        #expect(s.waitsUntil(Self.meter, at: clock.now) == nil)
    }

    @Test("the paired list is read again after pairedRefresh, and for an unknown advertiser at most once per pairedRefresh")
    func pairedList() {
        let clock = ManualClock()
        var s = Self.schedule()
        #expect(s.pairedListIsStale(at: clock.now))
        s.pairedListRead(at: clock.now)
        clock.advance(by: .milliseconds(4999))
        #expect(!s.pairedListIsStale(at: clock.now))
        clock.advance(by: .milliseconds(1))
        #expect(s.pairedListIsStale(at: clock.now))

        let stranger = "AA:BB:CC:DD:EE:09"
        let first = s.shouldLookUp(unknown: stranger, at: clock.now)
        let again = s.shouldLookUp(unknown: stranger, at: clock.now)
        let other = s.shouldLookUp(unknown: "AA:BB:CC:DD:EE:0A", at: clock.now)
        clock.advance(by: .seconds(5))
        let later = s.shouldLookUp(unknown: stranger, at: clock.now)
        #expect(first && !again && other && later)
    }

    @Test("a reload changes the periods to come, not the ones running")
    func reload() {
        let clock = ManualClock()
        var s = Self.schedule()
        let end = s.sessionEnded(Self.meter, complete: true, at: clock.now)
        var settings = DaemonSettings()
        settings.quietAfterDownload = .seconds(60)
        s.update(settings)
        #expect(s.waitsUntil(Self.meter, at: clock.now) == end)
        let next = s.sessionEnded(Self.meter, complete: true, at: clock.now)
        #expect(next == clock.now + .seconds(60))
    }
}
