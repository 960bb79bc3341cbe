import GatewayCore

extension SQLiteStore {
    /// A meter's most recent readings, newest first (by instant, unresolved instants last, then by row id):
    /// what a live view of the meter (Home Assistant over MQTT) shows.
    public func newestReadings(meterAddress: String, limit: Int) throws -> [StoredReading] {
        try openConnection().query(
            "SELECT id, \(ReadingColumns.list) FROM reading WHERE meter = ? ORDER BY instant IS NULL, instant DESC, id DESC LIMIT ?",
            [.text(meterAddress), .integer(Int64(max(0, limit)))], ReadingColumns.decode)
    }
}
