import GatewayCore
import GlucoseProfile
import SQLiteStore
import Testing
import TestSupport
@testable import Meters

/// Numbers from a meter or from the store's file at their extremes never trap the download.
@Suite("Meter-side arithmetic at the extremes", .timeLimit(.minutes(1)))
struct MeterArithmeticTests {
    @Test(arguments: [Int64.min, Int64.min + 1, -1, 0, Int64.max])
    func aStoredReceivedTimeAtAnyValueIsCompared(_ receivedAt: Int64) {
        // A reading re-evaluated from the store (a damaged file) carries whatever `received_at` it has.
        let d = ClinicalRulesTests.measurement()
        let r = ReadingInterpreter(meterAddress: "AA:BB:CC:DD:EE:01", zone: MeterTimeZone(identifier: "UTC"))
            .reading(d, context: nil, rawContext: nil, receivedAt: receivedAt)
        let instant = ClinicalRulesTests.base.naiveSeconds * 1000
        #expect(r.meterInstant == instant)
        #expect((r.exclusion == .timeInFuture) == (receivedAt < instant - 600_000))
    }

    @Test func aheadIsDecidedWithoutOverflow() {
        #expect(ReadingInterpreter.isAhead(.max, of: .min, bySeconds: 600))
        #expect(!ReadingInterpreter.isAhead(.min, of: .max, bySeconds: 600))
        #expect(!ReadingInterpreter.isAhead(1_000, of: 0, bySeconds: .max))
        #expect(ReadingInterpreter.isAhead(1_000, of: 0, bySeconds: .min))
        #expect(ReadingInterpreter.isAhead(600_001, of: 0, bySeconds: 600))
        #expect(!ReadingInterpreter.isAhead(600_000, of: 0, bySeconds: 600))
    }

    @Test(arguments: [Int.max, Int.min, Int.max / 1000 + 1])
    func aSkewNoClockCanHaveLeavesTheTimeUnresolved(_ seconds: Int) {
        let skew = ClockSkew(meterClock: ClinicalRulesTests.base, seconds: seconds)
        let r = ClinicalRulesTests.interpret(ClinicalRulesTests.measurement(), skew: skew)
        #expect(r.instant == nil)
        #expect(r.exclusion == .timeUnresolved)
    }

    @Test func aNewestFirstMeterWithADamagedStoredPositionDownloadsEverything() async throws {
        let f = try await MeterHandlingTests.taiDoc(MeterHandlingTests.memory(3))
        try await f.store.resetHighestSequence(MeterHandlingTests.address, to: Int.max)
        let report = try await f.download()
        #expect(report.stored == 3)
        #expect(report.outcome == .completed)
    }
}
