import GatewayCore
import GlucoseProfile
import Testing
@testable import SQLiteStore

/// The typed reading becomes text only in the `reading` row, and that text reads back to the same value.
@Suite struct ReadingRowTests {
    @Test func typedFieldsAreStoredAsTheirTextAndReadBack() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        // A meter whose clock says month 13: the base time is kept as sent, with no instant.
        var broken = sampleReading(sequence: 1, mgdl: nil, instant: nil, exclusion: .timeUnresolved)
        let monthThirteen = try #require(GlucoseDateTime(isoString: "2024-13-05T14:30:00", requiringValidDate: false))
        broken.baseTime = monthThirteen
        broken.userFacingTime = monthThirteen
        broken.special = .positiveInfinity
        // A mmol/L meter in a zone two hours ahead of UTC.
        var molar = sampleReading(sequence: 2, instant: 1_709_641_800_000)
        molar.unit = .molePerLitre
        molar.utcOffsetMinutes = 120
        #expect(molar.meterInstant.map { NewReading.utcOffsetMinutes(userFacingTime: molar.userFacingTime, meterInstant: $0) } == 120)
        #expect(try await store.insert([broken, molar]) == 2)
        await store.close()

        let raw = try SQLiteConnection(path: dir.database)
        let rows = try raw.query("SELECT base_time, user_facing_time, special, unit FROM reading ORDER BY sequence") {
            [$0.text(0), $0.text(1), $0.optionalText(2) ?? "NULL", $0.text(3)]
        }
        raw.close()
        #expect(rows == [
            ["2024-13-05T14:30:00", "2024-13-05T14:30:00", "+inf", "kg/L"],
            ["2024-03-05T14:30:00", "2024-03-05T14:30:00", "NULL", "mol/L"],
        ])

        let reopened = try SQLiteStore(path: dir.database)
        let stored = try await reopened.readings().map(\.reading)
        await reopened.close()
        #expect(Set(stored.map(\.sequence)) == [1, 2])
        #expect(stored.first { $0.sequence == 1 } == broken)
        #expect(stored.first { $0.sequence == 2 } == molar)
        #expect(stored.first { $0.sequence == 1 }?.baseTime.isValid == false)
    }

    @Test func baseAndUserFacingTimesAreStoredEachAsItsOwnText() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        // A time offset across a leap day and one across the year's end: the two columns differ.
        var leap = sampleReading(sequence: 1, time: "2024-02-28T23:50:00")
        leap.timeOffsetMinutes = 1_450
        leap.userFacingTime = leap.baseTime.adding(minutes: 1_450)
        var newYear = sampleReading(sequence: 2, time: "2026-01-01T00:10:00")
        newYear.timeOffsetMinutes = -20
        newYear.userFacingTime = newYear.baseTime.adding(minutes: -20)
        #expect(try await store.insert([leap, newYear, sampleReading(sequence: 3)]) == 3)
        await store.close()

        let raw = try SQLiteConnection(path: dir.database)
        let rows = try raw.query("SELECT base_time, time_offset_min, user_facing_time FROM reading ORDER BY sequence") {
            [$0.text(0), String($0.int(1)), $0.text(2)]
        }
        raw.close()
        #expect(rows == [
            ["2024-02-28T23:50:00", "1450", "2024-03-01T00:00:00"],
            ["2026-01-01T00:10:00", "-20", "2025-12-31T23:50:00"],
            ["2024-03-05T14:30:00", "0", "2024-03-05T14:30:00"],
        ])
    }

    @Test func aRowWhoseTextIsNotAReadingIsRefused() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        #expect(try await store.insert([sampleReading(sequence: 1), sampleReading(sequence: 2), sampleReading(sequence: 3)]) == 3)
        await store.close()
        let raw = try SQLiteConnection(path: dir.database)
        try raw.executeScript("""
            UPDATE reading SET unit = 'mg/dL' WHERE sequence = 1;
            UPDATE reading SET special = 'HI' WHERE sequence = 2;
            UPDATE reading SET user_facing_time = 'yesterday' WHERE sequence = 3;
            """)
        raw.close()
        let reopened = try SQLiteStore(path: dir.database)
        for sequence in 1...3 {
            let id = Int64(sequence)
            await #expect(throws: SQLiteStoreError.self) { _ = try await reopened.reading(id: id) }
        }
        await reopened.close()
    }
}
