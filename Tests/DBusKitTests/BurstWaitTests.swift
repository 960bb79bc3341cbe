import Testing
import Synchronization
import TestSupport
@testable import DBusKit

/// The pause rule on a manual clock: instants are made up, nothing sleeps.
@Suite struct BurstWaitTests {
    static let start = ContinuousClock.now
    static func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }
    static let burst = PassCount(burst: 12, others: 0, bursting: [1])

    @Test func aPassOfBurstSignalsAloneIsFollowedByOneWindow() {
        let wait = BurstWait(start: Self.start)
        #expect(wait.pause(after: Self.burst, callsPending: false, now: Self.at(0), wanted: { true }) == BurstWait.window)
        #expect(BurstWait.window == .milliseconds(2))
    }

    @Test func anythingElseInThePassEndsTheWakeUp() {
        let wait = BurstWait(start: Self.start)
        var mixed = Self.burst
        mixed.others = 1
        #expect(wait.pause(after: mixed, callsPending: false, now: Self.at(0), wanted: { true }) == nil)
        // A pause that read nothing for the burst subscribers: the burst is over.
        #expect(wait.pause(after: PassCount(), callsPending: false, now: Self.at(0), wanted: { true }) == nil)
        #expect(wait.pause(after: PassCount(burst: 0, others: 3), callsPending: false, now: Self.at(0), wanted: { true }) == nil)
    }

    @Test func anAwaitedReplyOrASubscriberThatDeclinesEndsTheWakeUp() {
        let wait = BurstWait(start: Self.start)
        let asked = Mutex(0)
        #expect(wait.pause(after: Self.burst, callsPending: true, now: Self.at(0), wanted: {
            asked.withLock { $0 += 1 }
            return true
        }) == nil)
        // Not asked when something else already decided.
        #expect(asked.withLock { $0 } == 0)
        #expect(wait.pause(after: Self.burst, callsPending: false, now: Self.at(0), wanted: { false }) == nil)
    }

    @Test func oneWakeUpPausesAtMostItsBudget() {
        let wait = BurstWait(start: Self.start)
        #expect(BurstWait.budget == .milliseconds(8))
        // Passes that take no time: pauses at 0, 2, 4 and 6 ms, none at 8.
        var now = Self.start
        var paused: Duration = .zero
        var pauses = 0
        while let pause = wait.pause(after: Self.burst, callsPending: false, now: now, wanted: { true }) {
            paused += pause
            pauses += 1
            now += pause
        }
        #expect(pauses == 4)
        #expect(paused == BurstWait.budget)
        // A pause starts only while a whole window of the budget is left.
        #expect(wait.pause(after: Self.burst, callsPending: false, now: Self.at(6), wanted: { true }) != nil)
        #expect(wait.pause(after: Self.burst, callsPending: false, now: Self.at(6) + .microseconds(1), wanted: { true }) == nil)
        #expect(wait.pause(after: Self.burst, callsPending: false, now: Self.at(30), wanted: { true }) == nil)
    }
}
