import GatewayCore
import GlucoseProfile
import SQLiteStore
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// Readings held for their time (`time-in-future`) by a download that could not read the meter's clock are
/// placed by the clock history when a later download measures it, like every other record, not by that
/// download's one skew. Europe/Berlin in November (UTC+1).
@Suite("Held readings placed by the clock history", .timeLimit(.minutes(1)))
struct HeldReadingPlacementTests {
    typealias P = ClockPlacementTests
    typealias S = ClockHistoryDownloadTests.Scenario
    static let hour = 3600

    /// A download at UTC `now` in which the meter's clock cannot be read.
    static func syncWithoutClock(_ s: S, at now: UnixMillis) async throws {
        s.meter.update {
            $0.characteristics.remove(.currentTime)
            $0.clockValue = nil
        }
        var options = DownloadOptions()
        options.clinical = ClinicalSettings()
        _ = try await MeterDownload(store: s.store, options: options, logger: .silent, now: { now })
            .run(link: s.meter.connect(), meter: MeterInfo(address: s.meter.address, timeZone: "Europe/Berlin"))
        s.meter.update { $0.characteristics.insert(.currentTime) }
    }

    @Test("a reading held while the clock was a day fast, released after a battery reset: at its exact time, not held for ever")
    func releasedAtTheHistorysTime() async throws {
        let s = try await S()
        let dayFast = Self.hour + 86_400
        s.take(at: P.utc(2024, 11, 3, 8), f: dayFast)
        try await s.sync(at: P.utc(2024, 11, 4, 12), f: dayFast)
        s.take(at: P.utc(2024, 11, 5, 8), f: dayFast)
        try await Self.syncWithoutClock(s, at: P.utc(2024, 11, 5, 9))
        #expect(try await s.readings()[1]?.exclusion == .timeInFuture)
        // The battery is changed: the clock restarts at 2000-01-01.
        let resetF = Int((P.utc(2000, 1, 1, 0) - P.utc(2024, 11, 7, 10)) / 1000)
        s.take(at: P.utc(2024, 11, 8, 8), f: resetF)
        try await s.sync(at: P.utc(2024, 11, 11, 12), f: resetF)
        // On the reset clock it would lie decades ahead: only the clock before the reset places it.
        try await s.expectAllExact()
        let placement = try await s.store.placements(ClockHistoryDownloadTests.address).first { $0.sequence == 1 }
        #expect(placement?.offsetSeconds == dayFast)
    }

    @Test("a reading held before the user moved the clock: time-uncertain with both times, not uploaded at the one skew's time")
    func keptOutWhenTheHistoryCannotPlaceIt() async throws {
        let s = try await S()
        let fourFast = Self.hour + 3 * Self.hour
        s.take(at: P.utc(2024, 11, 3, 8), f: fourFast)
        try await s.sync(at: P.utc(2024, 11, 4, 12), f: fourFast)
        // Taken at 08:00 UTC, shown 12:00: read in the zone 11:00 UTC, ahead of the download at 08:30.
        s.take(at: P.utc(2024, 11, 5, 8), f: fourFast)
        try await Self.syncWithoutClock(s, at: P.utc(2024, 11, 5, 8, 30))
        #expect(try await s.readings()[1]?.exclusion == .timeInFuture)
        // The user sets the clock 20 minutes back. Its one skew (2 h 40 min) would put the reading at 08:20.
        try await s.sync(at: P.utc(2024, 11, 10, 12), f: fourFast - 20 * 60)
        let held = try #require(try await s.readings()[1])
        #expect(held.exclusion == .timeUncertain && held.instant == nil)
        let placement = try await s.store.placements(ClockHistoryDownloadTests.address).first { $0.sequence == 1 }
        #expect(placement?.candidates == [P.utc(2024, 11, 5, 8), P.utc(2024, 11, 5, 8, 20)])
        #expect(try await s.uploads() == ["{\"seq\":0,\"date\":\(P.utc(2024, 11, 3, 8))}"])
    }
}
