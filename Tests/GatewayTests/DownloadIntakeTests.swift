import GatewayCore
import GlucoseProfile
import Testing
import TestSupport
@testable import Meters

/// When the intake wakes the download session, which otherwise sleeps until its next deadline.
@Suite("Download intake")
struct DownloadIntakeTests {
    static let base = GlucoseDateTime(naiveSeconds: 1_714_550_400)  // 2024-05-01T08:00:00

    static func intake(batchSize: Int = 3, clock: ManualClock = ManualClock()) -> DownloadIntake {
        DownloadIntake(batchSize: batchSize, address: "AA:BB:CC:DD:EE:01", logger: .silent, now: { 0 }, clock: clock,
                       progress: { _ in })
    }

    static func measurement(_ seq: UInt16, contextFollows: Bool = false) -> [UInt8] {
        GlucoseMeasurement(sequenceNumber: seq, baseTime: base.adding(minutes: Int(seq)), timeOffset: 0,
                           concentration: .value(mantissa: 111, exponent: -5), type: 1, sampleLocation: 1,
                           contextFollows: contextFollows).encoded()
    }

    static func context(_ seq: UInt16) -> [UInt8] {
        var c = GlucoseMeasurementContext(sequenceNumber: seq)
        c.meal = 1
        return c.encoded()
    }

    @Test func theFirstCommittableRecordWakesTheSessionOnceUntilItIsTaken() {
        let intake = Self.intake(batchSize: 10)
        #expect(intake.measurement(Self.measurement(1)) == .recordsWaiting)
        #expect(intake.measurement(Self.measurement(2)) == [])
        #expect(intake.touch(clearHold: false) == [])
        #expect(intake.take(final: false, limit: 10).count == 2)
        #expect(intake.measurement(Self.measurement(3)) == .recordsWaiting)
    }

    @Test func aFullBatchWakesTheSessionOncePerBatch() {
        let intake = Self.intake(batchSize: 2)
        #expect(intake.measurement(Self.measurement(1)) == .recordsWaiting)
        #expect(intake.measurement(Self.measurement(2)) == .batchFull)
        #expect(intake.measurement(Self.measurement(3)) == [])
        #expect(intake.take(final: false, limit: 2).count == 2)
        // One record left, below a batch: the next one fills it again.
        #expect(intake.measurement(Self.measurement(4)) == .batchFull)
    }

    @Test func recordsAreTakenInArrivalOrderWholeOrInPartAndTheRestStays() {
        let intake = Self.intake(batchSize: 10)
        for seq: UInt16 in 1...5 { _ = intake.measurement(Self.measurement(seq)) }
        // Part: the first three, the other two kept in order.
        #expect(intake.take(final: true, limit: 3).map(\.decoded.measurement.sequenceNumber) == [1, 2, 3])
        #expect(intake.snapshot.pending.map(\.decoded.measurement.sequenceNumber) == [4, 5])
        // All that is left: handed over whole, nothing stays behind.
        #expect(intake.take(final: true, limit: 10).map(\.decoded.measurement.sequenceNumber) == [4, 5])
        #expect(intake.snapshot.pending.isEmpty)
        // Records after that start a new list; one repeated notification is still one record.
        _ = intake.measurement(Self.measurement(6))
        _ = intake.measurement(Self.measurement(6))
        _ = intake.measurement(Self.measurement(7))
        #expect(intake.take(final: true, limit: 10).map(\.decoded.measurement.sequenceNumber) == [6, 7])
    }

    @Test func aRecordAwaitingItsContextIsNotCommittableUntilTheNextEvent() {
        let intake = Self.intake(batchSize: 10)
        #expect(intake.measurement(Self.measurement(1, contextFollows: true)) == [])
        #expect(intake.timing.oldestCommittable == nil)
        #expect(intake.context(Self.context(1)) == .recordsWaiting)
        #expect(intake.timing.oldestCommittable != nil)
        let taken = intake.take(final: false, limit: 10)
        #expect(taken.count == 1)
        #expect(taken.first?.context?.meal == 1)
    }

    /// Through two `AcquireNotify` sockets a context can come behind later measurements: its record
    /// waits for it, and so does everything after it, until it comes.
    @Test func aContextBehindLaterMeasurementsStillFindsItsRecordUncommitted() {
        let intake = Self.intake(batchSize: 10)
        for seq: UInt16 in 1...3 { _ = intake.measurement(Self.measurement(seq, contextFollows: true)) }
        #expect(intake.take(final: false, limit: 10).isEmpty)
        _ = intake.context(Self.context(1))
        _ = intake.context(Self.context(2))
        let first = intake.take(final: false, limit: 10)
        #expect(first.map(\.decoded.measurement.sequenceNumber) == [1, 2])
        #expect(first.allSatisfy { $0.context?.meal == 1 })
        // A context before its own measurement waits for it.
        _ = intake.context(Self.context(4))
        _ = intake.measurement(Self.measurement(4, contextFollows: true))
        #expect(intake.take(final: false, limit: 10).isEmpty)
        _ = intake.context(Self.context(3))
        let second = intake.take(final: false, limit: 10)
        #expect(second.map(\.decoded.measurement.sequenceNumber) == [3, 4])
        #expect(second.allSatisfy { $0.context?.meal == 1 })
    }

    @Test func aContextThatNeverComesHoldsItsRecordForALimitedNumberOfLaterOnes() {
        let intake = Self.intake(batchSize: 1000)
        _ = intake.measurement(Self.measurement(1, contextFollows: true))
        for seq in 2...UInt16(DownloadIntake.contextLag) { _ = intake.measurement(Self.measurement(seq)) }
        #expect(intake.take(final: false, limit: 1000).isEmpty)
        // One more later measurement: the record has waited long enough and goes without a context.
        _ = intake.measurement(Self.measurement(UInt16(DownloadIntake.contextLag) + 1))
        let taken = intake.take(final: false, limit: 1000)
        #expect(taken.count == DownloadIntake.contextLag + 1)
        #expect(taken.first?.context == nil)
    }

    @Test func theReportsEndReleasesEveryRecordStillWaitingForItsContext() {
        let intake = Self.intake(batchSize: 10)
        _ = intake.measurement(Self.measurement(1, contextFollows: true))
        _ = intake.measurement(Self.measurement(2, contextFollows: true))
        #expect(intake.snapshot.holdsRecords)
        _ = intake.touch(clearHold: true)
        #expect(!intake.snapshot.holdsRecords)
        #expect(intake.take(final: false, limit: 10).count == 2)
    }

    @Test func whileLateRecordsAreAwaitedEveryValueWakesTheSession() {
        let intake = Self.intake(batchSize: 10)
        _ = intake.measurement(Self.measurement(1))
        #expect(intake.measurement(Self.measurement(2)) == [])
        intake.setWakeOnEveryValue(true)
        #expect(intake.measurement(Self.measurement(3)) == .value)
        #expect(intake.context(Self.context(9)) == .value)
        #expect(intake.touch(clearHold: false) == .value)
        intake.setWakeOnEveryValue(false)
        #expect(intake.measurement(Self.measurement(4)) == [])
    }

    @Test func timingFollowsTheClock() {
        let clock = ManualClock()
        let intake = Self.intake(clock: clock)
        let start = clock.now
        #expect(intake.timing.lastActivity == start)
        clock.advance(by: .seconds(2))
        _ = intake.measurement(Self.measurement(1))
        clock.advance(by: .seconds(1))
        _ = intake.measurement(Self.measurement(2))
        #expect(intake.timing.lastActivity == start + .seconds(3))
        #expect(intake.timing.oldestCommittable == start + .seconds(2))
    }

    /// A request's answer is activity at the time the session takes it in, unless the meter was heard
    /// from since the request went out: what the request caused came after its answer, so a session
    /// that looks at the answer late does not move the inactivity deadline past those values.
    @Test func aLateTakenAnswerDoesNotMoveTheLastActivityPastValuesThatCameAfterIt() {
        let clock = ManualClock()
        let start = clock.now
        let intake = Self.intake(batchSize: 10, clock: clock)
        // Nothing heard while the request was out: the answer is the activity, when it is taken in.
        let quiet = intake.activityMark
        clock.advance(by: .seconds(5))
        intake.answered(since: quiet)
        #expect(intake.timing.lastActivity == start + .seconds(5))
        // Records arrived after the request went out; the session takes the answer in 20 s later.
        let busy = intake.activityMark
        clock.advance(by: .seconds(1))
        _ = intake.measurement(Self.measurement(1))
        clock.advance(by: .seconds(20))
        intake.answered(since: busy)
        #expect(intake.timing.lastActivity == start + .seconds(6))
        // Every value counts as activity, even one taken in as a duplicate or as undecodable.
        let mark = intake.activityMark
        _ = intake.measurement(Self.measurement(1))
        #expect(intake.activityMark != mark)
        let again = intake.activityMark
        _ = intake.measurement([0x00])
        #expect(intake.activityMark != again)
    }
    // MARK: Undecodable values

    @Test func aTruncatedMeasurementIsKeptRawWithTheCodecsReasonAndIsNoRecord() throws {
        let intake = Self.intake(batchSize: 10)
        let cut = Array(Self.measurement(7).prefix(5))
        _ = intake.measurement(Self.measurement(6))
        _ = intake.measurement(cut)
        // The same notification again (a re-sent value) is one undecodable value.
        _ = intake.measurement(cut)
        let s = intake.snapshot
        #expect(s.received == 1)
        #expect(s.pending.map(\.decoded.measurement.sequenceNumber) == [6])
        #expect(s.malformed == 2)
        #expect(s.undecodableCount == 1)
        let kept = intake.takeUndecodable()
        #expect(kept.count == 1)
        let v = try #require(kept.first)
        #expect(v.raw == cut)
        #expect(v.characteristic == .glucoseMeasurement)
        #expect(v.sequence == 7)
        #expect(v.meterAddress == "AA:BB:CC:DD:EE:01")
        // The codec's own words: the field, the byte offset, what was missing.
        #expect(v.reason == "Base Time: value too short at byte 3 (needs 7 bytes, 2 left)")
        // Taken once: the session keeps each in the store once per download.
        #expect(intake.takeUndecodable().isEmpty)
        #expect(intake.snapshot.undecodableCount == 1)
    }

    @Test func aGarbageContextIsKeptRawAndLeavesItsMeasurementAlone() throws {
        let intake = Self.intake(batchSize: 10)
        _ = intake.measurement(Self.measurement(3, contextFollows: true))
        #expect(intake.snapshot.holdsRecords)
        // Flags announce a carbohydrate (3 bytes) after the sequence number; the value ends there.
        let garbage: [UInt8] = [0x01, 0x03, 0x00]
        _ = intake.context(garbage)
        let s = intake.snapshot
        // The meter is past the record: it no longer waits for a context that will not come.
        #expect(!s.holdsRecords)
        #expect(s.pending.count == 1 && s.pending.first?.context == nil)
        #expect(s.orphanContexts.isEmpty)
        let v = try #require(intake.takeUndecodable().first)
        #expect(v.characteristic == .glucoseMeasurementContext)
        #expect(v.raw == garbage)
        #expect(v.sequence == 3)
        #expect(v.reason.contains("value too short at byte 3"))
        // Too short even for a sequence number: kept without one.
        _ = intake.context([0x00])
        #expect(intake.takeUndecodable().map(\.sequence) == [nil])
    }
}
