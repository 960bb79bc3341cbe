import GatewayCore
import Testing
@testable import SQLiteStore

@Suite struct ReadingStoreTests {
    @Test func storesEveryFieldAndReadsItBack() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        var context = ReadingContext()
        context.meal = 1
        context.carbohydrateID = 2
        context.carbohydrateKg = 0.045
        context.medicationUnit = "kg"
        context.hba1cPercent = 6.1
        var reading = sampleReading(sequence: 7, context: context)
        reading.timeOffsetMinutes = -15
        reading.userFacingTime = testWallTime("2024-03-05T14:15:00")
        reading.utcOffsetMinutes = -15
        reading.sensorStatus = 0x0040
        var empty = sampleReading(sequence: 8, mgdl: nil, instant: nil, exclusion: .timeUnresolved)
        empty.rawMeasurement = []
        empty.context = ReadingContext()
        empty.rawContext = []
        #expect(try await store.insert([reading, empty]) == 2)
        let stored = try await store.readings()
        #expect(stored.map(\.reading) == [empty, reading])
        await store.close()
    }

    @Test func sameSequenceAndTimeIsStoredOnce() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout)])
        let first = sampleReading(sequence: 1)
        #expect(try await store.insert([first, sampleReading(sequence: 2)]) == 2)
        // The meter re-sends its whole history, once more inside the same batch.
        #expect(try await store.insert([first, sampleReading(sequence: 2), first, sampleReading(sequence: 3)]) == 1)
        #expect(try await store.readingCount() == 3)
        #expect(try await store.counts(.nightscout).pending == 3)
        await store.close()
    }

    @Test func counterResetKeepsBothReadings() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout)])
        #expect(try await store.insert([sampleReading(sequence: 1, time: "2024-03-05T08:00:00")]) == 1)
        // After a battery change the counter starts again: same sequence, a different time.
        #expect(try await store.insert([sampleReading(sequence: 1, time: "2024-04-01T09:00:00")]) == 1)
        #expect(try await store.readingCount(meterAddress: meterA) == 2)
        #expect(try await store.counts(.nightscout).pending == 2)
        await store.close()
    }

    @Test func highestSequenceRisesWithInsertsAndNeverFallsOnSave() async throws {
        let store = try SQLiteStore(path: ":memory:")
        #expect(try await store.highestSequence(meterA) == nil)
        var info = MeterInfo(address: meterA, timeZone: "Europe/Berlin")
        info.name = "Contour"
        try await store.saveMeter(info)
        try await store.insert([sampleReading(sequence: 5), sampleReading(sequence: 9), sampleReading(sequence: 3)])
        #expect(try await store.highestSequence(meterA) == 9)
        // A caller saving a copy read before the download does not lower it.
        info.lastSync = 1000
        try await store.saveMeter(info)
        #expect(try await store.highestSequence(meterA) == 9)
        #expect(try await store.meter(meterA)?.lastSync == 1000)
        try await store.resetHighestSequence(meterA, to: 0)
        #expect(try await store.highestSequence(meterA) == 0)
        await store.close()
    }

    @Test func thePositionGoesRoundTheCounterAndAStaleCopyDoesNotMoveItBack() async throws {
        let store = try SQLiteStore(path: ":memory:")
        var info = MeterInfo(address: meterA, timeZone: "Europe/Berlin")
        try await store.saveMeter(info)
        // 65532...65535 then 0...3, in storage order, across two batches.
        try await store.insert([65532, 65533, 65534, 65535, 0].map { sampleReading(sequence: $0, time: "2024-03-05T08:\(10 + $0 % 50):00") })
        #expect(try await store.highestSequence(meterA) == 0)
        try await store.insert([1, 2, 3].map { sampleReading(sequence: $0, time: "2024-03-05T09:0\($0):00") })
        #expect(try await store.highestSequence(meterA) == 3)
        #expect(try await store.largestStoredSequence(meterA) == 65535)
        // A copy saved with the number from before the wrap is behind the position, not ahead of it.
        info.highestSequence = 65535
        try await store.saveMeter(info)
        #expect(try await store.highestSequence(meterA) == 3)
        // A number more than half the range ahead is behind: the position stays.
        try await store.insert([sampleReading(sequence: 40000, time: "2024-03-05T10:00:00")])
        #expect(try await store.highestSequence(meterA) == 3)
        // "From sequence 0" (-1) is behind every number.
        try await store.resetHighestSequence(meterA, to: -1)
        try await store.insert([sampleReading(sequence: 50000, time: "2024-03-05T11:00:00")])
        #expect(try await store.highestSequence(meterA) == 50000)
        await store.close()
    }

    @Test func excludedReadingsAreStoredWithoutOutboxRows() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)])
        try await store.insert([sampleReading(sequence: 1), sampleReading(sequence: 2, exclusion: .controlSolution)])
        #expect(try await store.readingCount() == 2)
        #expect(try await store.counts(.nightscout).pending == 1)
        #expect(try await store.counts(.fhir).pending == 1)
        let metrics = try await store.metrics()
        #expect(metrics.readings == 2)
        #expect(metrics.excludedReadings == 1)
        #expect(metrics.destinations[.fhir]?.pending == 1)
        await store.close()
    }

    @Test func outboxBodyIsFrozenAtInsert() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: .nightscout)])
        var info = MeterInfo(address: meterA, timeZone: "Europe/Berlin")
        info.name = "first name"
        try await store.saveMeter(info)
        try await store.insert([sampleReading(sequence: 1)])
        let before = try await store.outboxItems(.nightscout)
        // A later rename (or clock or zone change) does not touch the queued body.
        info.name = "second name"
        info.timeZone = "America/New_York"
        try await store.saveMeter(info)
        let claimed = try await store.claimPending(.nightscout, limit: 10)
        #expect(claimed.count == 1)
        #expect(claimed.first?.body == before.first?.body)
        let body = String(decoding: claimed.first?.body ?? [], as: UTF8.self)
        #expect(body.contains("first name"))
        #expect(claimed.first?.key == "nightscout-\(meterA)-1-2024-03-05T14:30:00")
        await store.close()
    }

    @Test func readingOfAnUnknownMeterIsKept() async throws {
        let store = try SQLiteStore(path: ":memory:")
        #expect(try await store.insert([sampleReading(meter: meterB, sequence: 1)]) == 1)
        let meters = try await store.meters()
        #expect(meters.map(\.info.address) == [meterB])
        #expect(meters.first?.info.timeZone == "UTC")
        await store.close()
    }
}
