import GatewayCore
import GlucoseProfile
import SQLiteStore
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// `meters set-clock` between two downloads: the write joins the clock history with no record number, and
/// the next download places the records around it by its time and their order (`ClockPlacer.place(_:base:
/// unsequenced:upper:)`). Europe/Berlin in September (UTC+2), a meter 10 minutes fast set right.
@Suite("A clock set outside a download", .timeLimit(.minutes(1)))
struct ClockSetOutsideDownloadTests {
    typealias P = ClockPlacementTests
    typealias S = ClockHistoryDownloadTests.Scenario
    static let fast = 2 * 3600 + 10 * 60
    static let right = 2 * 3600

    /// `meters set-clock` at UTC `now` on a meter whose clock runs at F `f`.
    static func setClock(_ s: S, at now: UnixMillis, f: Int) async throws {
        s.meter.update { $0.clockValue = FakeMeterScript.currentTime(P.shown(now, f)) }
        let session = MeterClockSession(radio: FakeMeterRadio(meters: [s.meter]), store: s.store, logger: .silent, now: { now })
        let outcome = await session.run(MeterInfo(address: s.meter.address, timeZone: "Europe/Berlin"))
        guard case .set(let written, _, _) = outcome else {
            Issue.record("set-clock: \(outcome)")
            return
        }
        #expect(written.new == P.shown(now, Self.right))
    }

    @Test("the readings before the write keep their right times, those after it are right too, also the ones minutes from it")
    func placedAroundTheWrite() async throws {
        let s = try await S()
        for day in 1...3 { s.take(at: P.utc(2024, 9, day, 7), f: Self.fast) }
        try await s.sync(at: P.utc(2024, 9, 3, 12), f: Self.fast)
        s.take(at: P.utc(2024, 9, 4, 7), f: Self.fast)
        // Three minutes before the write: shown 12:07 local, which the set-back clock shows again at 12:07.
        s.take(at: P.utc(2024, 9, 5, 9, 57), f: Self.fast)
        try await Self.setClock(s, at: P.utc(2024, 9, 5, 10), f: Self.fast)
        // Five minutes after it, shown 12:05: before the record above in the meter's times, after it in its
        // numbers, so on the new clock.
        s.take(at: P.utc(2024, 9, 5, 10, 5), f: Self.right)
        for day in 6...8 { s.take(at: P.utc(2024, 9, day, 7), f: Self.right) }
        try await s.sync(at: P.utc(2024, 9, 9, 12), f: Self.right)
        try await s.expectAllExact()
        let history = try await s.store.clockHistory(ClockHistoryDownloadTests.address)
        #expect(history.map(\.setByGateway) == [false, false, true, false])
        #expect(history.map(\.offsetSeconds) == [Self.fast, Self.fast, Self.right, Self.right])
        #expect(history.map(\.highestSequence) == [2, nil, nil, 8])
        let placements = Dictionary(uniqueKeysWithValues: try await s.store.placements(ClockHistoryDownloadTests.address).map { ($0.sequence, $0) })
        #expect(placements[4]?.offsetSeconds == Self.fast)
        #expect(placements[5]?.reason == "set by the gateway")
        #expect(placements[5]?.offsetSeconds == Self.right)
    }

    @Test("a reading minutes after the write that nothing places is time-uncertain with both times, never uploaded")
    func notPlacedIsKeptOut() async throws {
        let s = try await S()
        s.take(at: P.utc(2024, 9, 1, 7), f: Self.fast)
        try await s.sync(at: P.utc(2024, 9, 3, 12), f: Self.fast)
        s.take(at: P.utc(2024, 9, 4, 7), f: Self.fast)
        try await Self.setClock(s, at: P.utc(2024, 9, 5, 10), f: Self.fast)
        // Shown 12:05: 10:05 UTC on the new clock, or 09:55 on the old one, before the write; both fit.
        s.take(at: P.utc(2024, 9, 5, 10, 5), f: Self.right)
        s.take(at: P.utc(2024, 9, 6, 7), f: Self.right)
        try await s.sync(at: P.utc(2024, 9, 9, 12), f: Self.right)
        let stored = try await s.readings()
        #expect(stored.count == 4)
        for sequence in [0, 1, 3] { #expect(stored[sequence]?.instant == s.truth[sequence] && stored[sequence]?.exclusion == nil) }
        #expect(stored[2]?.exclusion == .timeUncertain && stored[2]?.instant == nil)
        let placement = try await s.store.placements(ClockHistoryDownloadTests.address).first { $0.sequence == 2 }
        #expect(placement?.candidates == [P.utc(2024, 9, 5, 9, 55), P.utc(2024, 9, 5, 10, 5)])
        let uploads = try await s.uploads()
        #expect(uploads.count == 3)
        #expect(uploads.allSatisfy { body in s.truth.contains { body == "{\"seq\":\($0.key),\"date\":\($0.value)}" } })
    }

    @Test("a clock set on a meter never synced: readings on both sides placed by the write's time")
    func setBeforeAnySync() async throws {
        let s = try await S()
        s.take(at: P.utc(2024, 9, 4, 7), f: Self.fast)
        try await Self.setClock(s, at: P.utc(2024, 9, 5, 10), f: Self.fast)
        s.take(at: P.utc(2024, 9, 6, 7), f: Self.right)
        try await s.sync(at: P.utc(2024, 9, 9, 12), f: Self.right)
        try await s.expectAllExact()
    }
    @Test("the clock also changed before the set-clock: a reading the times leave on one clock placed, the others time-uncertain")
    func changedBeforeTheWriteToo() throws {
        let placer = ClockPlacer(zone: try P.berlin())
        let base = ClockSync(at: P.utc(2024, 9, 1, 12), offsetSeconds: Self.right, highestSequence: 0)
        // The user set the clock an hour fast some time on the 2nd; set-clock on the 3rd set it right.
        let read = ClockSync(at: P.utc(2024, 9, 3, 10), offsetSeconds: Self.right + 3600, highestSequence: nil)
        let write = ClockSync(at: P.utc(2024, 9, 3, 10), offsetSeconds: Self.right, highestSequence: nil, setByGateway: true)
        let upper = ClockSync(at: P.utc(2024, 9, 6, 12), offsetSeconds: Self.right, highestSequence: nil)
        let records = [P.record(1, at: P.utc(2024, 9, 1, 18), f: Self.right),
                       P.record(2, at: P.utc(2024, 9, 2, 18), f: Self.right + 3600),
                       P.record(3, at: P.utc(2024, 9, 4, 8), f: Self.right)]
        let placed = placer.place(records, base: base, unsequenced: [read, write], upper: upper)
        #expect(placed[0] == .uncertain(candidates: [P.utc(2024, 9, 1, 17), P.utc(2024, 9, 1, 18)]))
        #expect(placed[1] == .uncertain(candidates: [P.utc(2024, 9, 2, 18), P.utc(2024, 9, 2, 19)]))
        #expect(placed[2] == .placed(instant: P.utc(2024, 9, 4, 8), offsetSeconds: Self.right, since: write.at, reason: .setByGateway))
    }
}
