import GatewayCore
import GlucoseProfile
import SQLiteStore
import Testing
import TestSupport
@testable import Gateway

/// What a broken or hostile meter sends to the per-meter handling: counts that do not match the records,
/// numbers outside the count, duplicates, reports cut short, answers where records belong. Nothing crashes,
/// nothing is lost, nothing is stored twice.
@Suite("Hostile meter input", .timeLimit(.minutes(1)))
struct HostileMeterTests {
    typealias H = MeterHandlingTests

    // MARK: - A meter that numbers newest first

    @Test func aReportThatEndsBeforeItsCountLeavesTheMissingRecordsForTheNextSync() async throws {
        let mem = H.memory(8)
        let f = try await H.taiDoc(mem)
        // The meter counts 8 and ends its report with success after the newest 5.
        f.meter.update { $0.successAfterRecords = 5 }
        let short = try await f.download()
        #expect(short.stored == 5)
        #expect(try await f.stored().count == 5)
        f.meter.update { $0.successAfterRecords = nil }
        let again = try await f.download()
        #expect(again.stored == 3)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<8))
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func anIncrementalReportMissingARecordInTheMiddleIsNotTakenAsComplete() async throws {
        var mem = H.memory(4)
        let f = try await H.taiDoc(mem)
        _ = try await f.download()
        // Three new records; the meter's `<=` report skips the middle one of them (number 1).
        mem += [(H.time(3, 1), 201), (H.time(3, 2), 202), (H.time(3, 3), 203)]
        let all = H.newestFirst(mem)
        f.meter.update { $0.records = all.filter { $0.sequence != 1 } ; $0.countAnswer = 7 }
        let gap = try await f.download()
        #expect(gap.stored == 2)
        f.meter.update { $0.records = all; $0.countAnswer = nil }
        let again = try await f.download()
        #expect(again.stored == 1)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<7))
    }

    @Test func recordsNumberedBeyondTheCountEachKeepAPositionOfTheirOwn() async throws {
        let mem = H.memory(6)
        let f = try await H.taiDoc(mem)
        // The meter says 3 but reports 6 records, numbers 0...5.
        f.meter.update { $0.countAnswer = 3 }
        let first = try await f.download()
        #expect(first.stored == 6)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<6))
        #expect(try await f.store.highestSequence(H.address) == 5)
        f.meter.update { $0.countAnswer = nil }
        let second = try await f.download()
        #expect(second.stored == 0)
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func aRecordAddedBetweenCountAndReportIsStoredOnceAtItsPosition() async throws {
        var mem = H.memory(5)
        let f = try await H.taiDoc(mem)
        _ = try await f.download()
        // The meter counts 5, then a measurement shifts every number up by one before the report.
        mem += [(H.time(3, 1), 201)]
        let after = H.newestFirst(mem)
        f.meter.update { $0.memoryAfterCount = after }
        let second = try await f.download()
        #expect(second.stored == 1)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.positions() == Array(0..<6))
        #expect(try await f.store.highestSequence(H.address) == 5)
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(third.received == 1)   // incremental again: only the newest stored record
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func aCountOfZeroLeavesWhatIsStored() async throws {
        let mem = H.memory(3)
        let f = try await H.taiDoc(mem)
        _ = try await f.download()
        f.meter.update { $0.countAnswer = 0 }
        let report = try await f.download()
        #expect(report.outcome == .noRecords)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.store.highestSequence(H.address) == 2)
    }

    @Test func aCountOfOneThenOfMoreIsIncremental() async throws {
        var mem = H.memory(1)
        let f = try await H.taiDoc(mem)
        #expect(try await f.download().stored == 1)
        #expect(try await f.positions() == [0])
        mem += [(H.time(3, 1), 201)]
        let next = H.newestFirst(mem)
        f.meter.update { $0.records = next }
        let second = try await f.download()
        #expect(second.stored == 1 && second.received == 2)
        #expect(H.same(try await f.stored(), H.expected(mem)))
    }

    @Test func aCountOf65535WithThreeRecordsStoresThemOnceAndDoesNotTrap() async throws {
        let mem = H.memory(3)
        let f = try await H.taiDoc(mem)
        f.meter.update { $0.countAnswer = 65535 }
        let first = try await f.download()
        #expect(first.stored == 3)
        let second = try await f.download()
        #expect(second.stored == 0)
        f.meter.update { $0.countAnswer = nil }
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(H.same(try await f.stored(), H.expected(mem)))
        #expect(try await f.store.highestSequence(H.address) == 2)
    }

    @Test func aRecordNumbered65535AmongFewIsStoredAndDoesNotTrap() async throws {
        var records = H.newestFirst(H.memory(2))
        var m = GlucoseMeasurement(sequenceNumber: 65535, baseTime: H.time(1, 0, year: 2026, month: 10), timeOffset: 0,
                                   concentration: .value(mantissa: 77, exponent: -5), unit: .kilogramPerLitre,
                                   type: 1, sampleLocation: 1)
        m.sequenceNumber = 65535
        records.append(FakeRecord(measurement: m))
        let sent = records
        let f = try await H.taiDoc([])
        f.meter.update { $0.records = sent }
        let first = try await f.download()
        #expect(first.stored == 3)
        let second = try await f.download()
        #expect(second.stored == 0)
        #expect(try await f.stored().count == 3)
    }

    @Test func aCountTheMeterCannotGiveFailsWithOneLineAndStoresNothing() async throws {
        let f = try await H.taiDoc(H.memory(3))
        f.meter.update { $0.countUnsupported = true }
        await #expect(throws: DownloadError.self) { _ = try await f.download() }
        do { _ = try await f.download() } catch {
            #expect(!"\(error)".contains("\n"))
            #expect("\(error)".contains("did not count"))
        }
        #expect(try await f.stored().isEmpty)
    }

    @Test func aReportAnsweredWithNoRecordsAfterACountStoresNothingAndFailsNothing() async throws {
        let f = try await H.taiDoc(H.memory(3))
        f.meter.update { $0.countAnswer = 3; $0.records = [] }
        let report = try await f.download()
        #expect(report.outcome == .noRecords)
        #expect(try await f.stored().isEmpty)
        #expect(try await f.store.highestSequence(H.address) == nil)
    }

    @Test func recordsWithIdenticalBytesButTheirNumbersAreEachStoredOnce() async throws {
        // Two measurements in the same minute with the same result: only the number tells them apart.
        let mem: H.Memory = [(H.time(1, 8), 120), (H.time(1, 8), 120), (H.time(1, 9), 130)]
        let f = try await H.taiDoc(mem)
        #expect(try await f.download().stored == 3)
        #expect(try await f.download().stored == 0)
        let more = mem + [(H.time(1, 10), 140)]
        f.meter.update { $0.records = H.newestFirst(more) }
        #expect(try await f.download().stored == 1)
        #expect(H.same(try await f.stored(), H.expected(more)))
    }

    @Test func duplicateNumbersInOneReportLoseNoReading() async throws {
        // Two different records the meter both numbers 1.
        var records = H.newestFirst(H.memory(3))
        var m = GlucoseMeasurement(sequenceNumber: 1, baseTime: H.time(5, 5), timeOffset: 0,
                                   concentration: .value(mantissa: 155, exponent: -5), unit: .kilogramPerLitre,
                                   type: 1, sampleLocation: 1)
        m.sequenceNumber = 1
        records.insert(FakeRecord(measurement: m), at: 2)
        let sent = records
        let f = try await H.taiDoc([])
        f.meter.update { $0.records = sent; $0.countAnswer = 3 }
        _ = try await f.download()
        let stored = try await f.stored()
        #expect(stored.count == 4)
        #expect(stored.contains { $0.0 == H.time(5, 5).isoString && $0.1 == 155 })
        _ = try await f.download()
        #expect(try await f.stored().count == 4)
    }
}
