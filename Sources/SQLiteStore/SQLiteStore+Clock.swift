import GatewayCore
import GlucoseProfile

extension SQLiteStore {
    // MARK: The meter's clock history

    /// The meter's clock measurements, oldest first.
    public func clockHistory(_ address: String) async throws -> [ClockSync] {
        try openConnection().query(
            "SELECT at, offset_s, highest_sequence, set_by_gateway FROM meter_clock WHERE meter = ? ORDER BY at, id",
            [.text(address)]
        ) { row in
            ClockSync(at: row.int64(0), offsetSeconds: row.int(1), highestSequence: row.optionalInt(2), setByGateway: row.int64(3) != 0)
        }
    }

    /// Remembers the measurements in one transaction. A meter without a row gets a minimal one (time zone
    /// `UTC`), as for readings.
    public func rememberClock(_ address: String, _ syncs: [ClockSync]) async throws {
        guard !syncs.isEmpty else { return }
        let db = try openConnection()
        try db.transaction {
            try db.execute("INSERT INTO meter (address, time_zone) VALUES (?, 'UTC') ON CONFLICT (address) DO NOTHING", [.text(address)])
            for sync in syncs {
                try db.execute(
                    "INSERT INTO meter_clock (meter, at, offset_s, highest_sequence, set_by_gateway) VALUES (?, ?, ?, ?, ?)",
                    [.text(address), .integer(sync.at), .integer(Int64(sync.offsetSeconds)), SQLiteValue(sync.highestSequence),
                     .integer(sync.setByGateway ? 1 : 0)])
            }
        }
        committed(.meters)
    }

    /// Remembers placements; a reading's first placement stays (bodies and shown times never change).
    public func rememberPlacements(_ address: String, _ placements: [ReadingClock]) async throws {
        guard !placements.isEmpty else { return }
        let db = try openConnection()
        try db.transaction {
            try db.execute("INSERT INTO meter (address, time_zone) VALUES (?, 'UTC') ON CONFLICT (address) DO NOTHING", [.text(address)])
            for p in placements {
                try db.execute("""
                    INSERT INTO reading_clock (meter, sequence, user_facing_time, offset_s, since, reason, candidates)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (meter, sequence, user_facing_time) DO NOTHING
                    """, [.text(address), .integer(Int64(p.sequence)), .text(p.userFacingTime.isoString),
                          SQLiteValue(p.offsetSeconds), SQLiteValue(p.since), .text(p.reason),
                          .text(p.candidates.map(String.init).joined(separator: ","))])
            }
        }
    }

    /// The meter's remembered placements, by sequence. A row whose time or candidates do not read back
    /// (a file edited by hand) is left out rather than shown wrong.
    public func placements(_ address: String) async throws -> [ReadingClock] {
        try openConnection().query(
            "SELECT sequence, user_facing_time, offset_s, since, reason, candidates FROM reading_clock WHERE meter = ? ORDER BY sequence",
            [.text(address)]
        ) { row -> ReadingClock? in
            guard let time = GlucoseDateTime(isoString: row.text(1), requiringValidDate: false) else { return nil }
            let text = row.text(5)
            let candidates = text.isEmpty ? [] : text.split(separator: ",").compactMap { Int64($0) }
            return ReadingClock(sequence: row.int(0), userFacingTime: time, offsetSeconds: row.optionalInt(2),
                                since: row.optionalInt64(3), reason: row.text(4), candidates: candidates)
        }.compactMap { $0 }
    }
}
