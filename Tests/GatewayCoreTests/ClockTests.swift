import GatewayCore
import Support
import Testing
import TestSupport

/// The one monotonic clock protocol and its manual and scaled clocks.
@Suite("Clocks")
struct ClockTests {
    /// Generic code written against `Clock` runs on the manual clock (it is the standard protocol, not a look-alike).
    static func sleepTwice<C: Clock>(_ clock: C, _ step: C.Duration) async throws -> C.Instant {
        try await clock.sleep(for: step)
        try await clock.sleep(for: step)
        return clock.now
    }

    @Test("a manual clock wakes a sleeper only when an advance reaches its deadline")
    func manualClockAdvances() async throws {
        let clock = ManualClock()
        let start = clock.now
        let sleeper = Task { try await Self.sleepTwice(clock, .seconds(30)) }
        while clock.sleeping == 0 { await Task.yield() }
        clock.advance(by: .seconds(29))
        #expect(clock.sleeping == 1)
        clock.advance(by: .seconds(1))
        // The second sleep of 30 s starts at +30 s.
        while clock.sleeping == 0 { await Task.yield() }
        clock.advance(by: .seconds(30))
        let woke = try await sleeper.value
        #expect(woke - start == .seconds(60))
        #expect(clock.sleeping == 0)
    }

    @Test("a sleep on an existential clock, cancelled, throws at once")
    func cancelledSleep() async throws {
        let clock: any SessionClock = ManualClock()
        let sleeper = Task { try await clock.sleep(until: clock.now + .seconds(3600)) }
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
    }

    @Test("a scaled clock runs its rate times faster than the real one")
    func scaledClock() async throws {
        let real = ContinuousClock()
        let clock = ScaledClock(rate: 1000)
        let r0 = real.now
        let s0 = clock.now
        // 10 simulated seconds take about 10 real milliseconds.
        try await clock.sleep(for: .seconds(10))
        let s1 = clock.now
        let r1 = real.now
        #expect(s1 - s0 >= .seconds(10))
        // [s0, s1] was read within [r0, r1]: the scaled span is at most the real one times the rate.
        #expect(s1 - s0 <= (r1 - r0) * 1000)
        #expect(ScaledClock(rate: 0.5).rate == 1)
        #expect(ScaledClock(rate: .infinity).rate == 1)
    }
}
