import GatewayCore

extension SQLiteStore {
    // MARK: Undecodable values

    /// Keeps each value in `undecodable_value` unless the same bytes from the same meter on the same
    /// characteristic are already there (a re-download delivers them again), all in one transaction. A
    /// meter without a row gets a minimal one (time zone `UTC`), as for readings, so nothing is refused.
    /// Returns how many were new.
    @discardableResult
    public func keepUndecodable(_ values: [UndecodableValue]) throws -> Int {
        guard !values.isEmpty else { return 0 }
        let db = try openConnection()
        let kept = try db.transaction {
            var kept = 0
            for value in values {
                try db.execute("INSERT INTO meter (address, time_zone) VALUES (?, 'UTC') ON CONFLICT (address) DO NOTHING",
                               [.text(value.meterAddress)])
                try db.execute("""
                    INSERT INTO undecodable_value (meter, characteristic, sequence, raw, reason, received_at)
                    VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (meter, characteristic, raw) DO NOTHING
                    """, [.text(value.meterAddress), .text(value.characteristic.rawValue), SQLiteValue(value.sequence),
                          .blob(value.raw), .text(value.reason), .integer(value.receivedAt)])
                kept += db.changes
            }
            return kept
        }
        if kept > 0 { committed(.readings) }
        return kept
    }

    /// Kept undecodable values, oldest received first: of one meter (`filter.meterAddress`), received at
    /// or after `filter.since` and before `filter.until` (their only time is when they arrived), at most
    /// `filter.limit`.
    public func undecodableValues(_ filter: ReadingFilter = ReadingFilter()) throws -> [StoredUndecodableValue] {
        let (sql, values) = filter.query(
            "SELECT id, meter, characteristic, raw, reason, received_at FROM undecodable_value", time: "received_at")
        return try openConnection().query(sql, values) { row in
            // The sequence is derived from the bytes again rather than read back, so the two never disagree.
            StoredUndecodableValue(id: row.int64(0), value: UndecodableValue(
                meterAddress: row.text(1), characteristic: UndecodableValue.Characteristic(rawValue: row.text(2)),
                raw: row.blob(3), reason: row.text(4), receivedAt: row.int64(5)))
        }
    }
}
