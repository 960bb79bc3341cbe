import Testing
@testable import DBusKit

/// The deadline rules behind a connection's single timer, on made-up instants (nanoseconds).
@Suite struct TimeoutScheduleTests {
    @Test func theTimerIsArmedAtTheEarliestDeadlineAndDisarmedWhenNoneIsLeft() {
        var schedule = TimeoutSchedule<Int>()
        #expect(schedule.earliest == nil)
        schedule.set(1, intervalNanoseconds: 25_000, now: 1_000)
        schedule.set(2, intervalNanoseconds: 5_000, now: 2_000)
        schedule.set(3, intervalNanoseconds: 60_000, now: 3_000)
        #expect(schedule.earliest == 7_000)
        schedule.remove(2)
        #expect(schedule.earliest == 26_000)
        schedule.remove(1)
        schedule.remove(3)
        #expect(schedule.earliest == nil)
        #expect(schedule.isEmpty)
    }

    @Test func onlyDueTimeoutsExpireAndEachMovesToItsNextInterval() {
        var schedule = TimeoutSchedule<Int>()
        schedule.set(1, intervalNanoseconds: 100, now: 0)
        schedule.set(2, intervalNanoseconds: 1_000, now: 0)
        #expect(schedule.expired(at: 99).isEmpty)
        #expect(schedule.expired(at: 100) == [1])
        // Repeats from when it fired, so a late wake-up does not fire it twice.
        #expect(schedule.earliest == 200)
        #expect(schedule.expired(at: 450) == [1])
        #expect(schedule.earliest == 550)
        #expect(Set(schedule.expired(at: 1_000)) == [1, 2])
        #expect(schedule.contains(2))
        #expect(!schedule.contains(3))
    }

    @Test func restartingATimeoutMovesItsDeadline() {
        var schedule = TimeoutSchedule<Int>()
        schedule.set(1, intervalNanoseconds: 100, now: 0)
        schedule.set(1, intervalNanoseconds: 100, now: 500)
        #expect(schedule.earliest == 600)
        #expect(schedule.expired(at: 100).isEmpty)
    }

    @Test func extremeIntervalsNeitherOverflowNorFireAtOnce() {
        var schedule = TimeoutSchedule<Int>()
        schedule.set(1, intervalNanoseconds: .max, now: 10)
        #expect(schedule.earliest == .max)
        schedule.set(2, intervalNanoseconds: 0, now: 10)
        #expect(schedule.earliest == 11)
        #expect(schedule.expired(at: .max - 1) == [2])
    }
}
