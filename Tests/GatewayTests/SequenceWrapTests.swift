import GatewayCore
import GlucoseProfile
import Testing
import TestSupport
@testable import Meters

/// A meter's 16-bit sequence counter going round from 65535 to 0, through the whole download with the
/// scripted meter (which sends its records in storage order, as real meters do).
@Suite("Sequence counter wrap", .timeLimit(.minutes(1)))
struct SequenceWrapTests {
    static let start = GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 8, minute: 0, second: 0)!

    /// Record `seq`, taken `index` × 5 minutes after `start`: times follow storage order, not numbers.
    static func record(_ seq: UInt16, _ index: Int) -> FakeRecord {
        FakeRecord(measurement: GlucoseMeasurement(
            sequenceNumber: seq, baseTime: start.adding(minutes: 5 * index), timeOffset: 0,
            concentration: .value(mantissa: Int16(90 + index), exponent: -5), unit: .kilogramPerLitre,
            type: 2, sampleLocation: 1, sensorStatus: nil
        ))
    }

    /// The sequences in storage order from `first`, `count` of them, wrapping.
    static func records(from first: UInt16, count: Int, index: Int = 0) -> [FakeRecord] {
        (0..<count).map { record(first &+ UInt16(truncatingIfNeeded: $0), index + $0) }
    }

    static func keys(_ store: MemoryReadingStore) -> [String] {
        store.readings.map { "\($0.sequence)@\($0.userFacingTime.isoString)" }
    }

    @Test func aRecordAfterTheWrapIsDownloadedAndNothingTwice() async throws {
        // 65532...65535, then 0...3, times in order.
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(from: 65532, count: 8)))
        let store = MeterDownloadTests.makeStore(meter)
        let first = try await MeterDownloadTests.download(meter, store)
        #expect(first.stored == 8)
        #expect(try await store.highestSequence(meter.address) == 3)

        meter.update { $0.records.append(Self.record(4, 8)) }
        let second = try await MeterDownloadTests.download(meter, store)
        #expect(second.stored == 1)
        // Only the numbers that can be new were asked for: not the ones from before the wrap again.
        #expect(second.duplicates == 0)
        #expect(!second.counterReset)
        #expect(MeterDownloadTests.writes(meter).suffix(2) == ["write 04 04 01 04 00 02 80", "write 01 04 01 04 00 02 80"])
        #expect(try await store.highestSequence(meter.address) == 4)

        let third = try await MeterDownloadTests.download(meter, store)
        #expect(third.stored == 0)
        #expect(third.outcome == .noRecords)
        #expect(store.readings.count == 9)
        #expect(Set(Self.keys(store)).count == 9)
        #expect(!store.events.contains { $0.kind == .counterReset })
        MeterDownloadTests.expectNoDeletes(meter)
    }

    @Test func recordsMadeAfterTheTopOfTheRangeAreDownloaded() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(from: 65532, count: 4)))
        let store = MeterDownloadTests.makeStore(meter)
        _ = try await MeterDownloadTests.download(meter, store)
        #expect(try await store.highestSequence(meter.address) == 65535)
        // The counter goes round: 0...3 come after 65535.
        meter.update { $0.records += Self.records(from: 0, count: 4, index: 4) }
        let report = try await MeterDownloadTests.download(meter, store)
        #expect(report.stored == 4)
        #expect(report.duplicates == 0)
        #expect(!report.counterReset)
        #expect(try await store.highestSequence(meter.address) == 3)
        #expect(store.readings.map(\.sequence) == [65532, 65533, 65534, 65535, 0, 1, 2, 3])
    }

    @Test func oneDownloadGoesOnPastTheWrap() async throws {
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(from: 65530, count: 2)))
        let store = MeterDownloadTests.makeStore(meter)
        _ = try await MeterDownloadTests.download(meter, store)
        #expect(try await store.highestSequence(meter.address) == 65531)
        // 65532...65535 and 0...2 made since: `>= 65532` brings the first four, the rest is past the wrap.
        meter.update { $0.records += Self.records(from: 65532, count: 7, index: 2) }
        let report = try await MeterDownloadTests.download(meter, store)
        #expect(report.stored == 7)
        #expect(report.duplicates == 0)
        #expect(report.outcome == .completed)
        #expect(try await store.highestSequence(meter.address) == 2)
        #expect(store.readings.count == 9)
        // Nothing new afterwards.
        let again = try await MeterDownloadTests.download(meter, store)
        #expect(again.stored == 0)
        #expect(store.readings.count == 9)
    }

    @Test func aCounterResetIsStillACounterReset() async throws {
        // Not a wrap: 100...109, then after a battery change 1...4 with later times.
        let meter = FakeMeter(script: FakeMeterScript(records: Self.records(from: 100, count: 10)))
        let store = MeterDownloadTests.makeStore(meter)
        _ = try await MeterDownloadTests.download(meter, store)
        meter.update { $0.records = Self.records(from: 1, count: 4, index: 20) }
        let report = try await MeterDownloadTests.download(meter, store)
        #expect(report.counterReset)
        #expect(report.stored == 4)
        #expect(try await store.highestSequence(meter.address) == 4)
        meter.update { $0.records.append(Self.record(5, 30)) }
        let next = try await MeterDownloadTests.download(meter, store)
        #expect(next.stored == 1)
        #expect(!next.counterReset)
        #expect(store.readings.count == 15)
    }

    @Test(arguments: [
        (nil, 5, 5), (-1, 0, 0), (-1, 40000, 40000), (65535, 0, 0), (65535, 3, 3), (3, 65535, 3), (3, 4, 4),
        (4, 3, 4), (100, 32867, 32867), (100, 32868, 100), (0, 65535, 0),
    ] as [(Int?, Int, Int)])
    func positionsAdvanceRoundTheCounter(_ position: Int?, _ sequence: Int, _ expected: Int) {
        #expect(SequencePosition.advanced(position, by: sequence) == expected)
    }
}
