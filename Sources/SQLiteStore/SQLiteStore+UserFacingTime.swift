import GatewayCore
import GlucoseProfile

extension SQLiteStore {
    /// The meter's readings stored at any of `times` (user-facing time as the meter sent it), by id. The
    /// unique key (meter, sequence, user-facing time) leads with the meter, so this reads that meter's
    /// part of it only.
    public func readings(_ address: String, atUserFacingTimes times: [GlucoseDateTime]) throws -> [StoredReading] {
        let distinct = Array(Set(times.map(\.isoString))).sorted()
        guard !distinct.isEmpty else { return [] }
        let db = try openConnection()
        var out: [StoredReading] = []
        // SQLite's default limit on bound parameters is far above this chunk size.
        var start = 0
        while start < distinct.count {
            let chunk = distinct[start..<min(start + 200, distinct.count)]
            let marks = Array(repeating: "?", count: chunk.count).joined(separator: ", ")
            out += try db.query(
                "SELECT id, \(ReadingColumns.list) FROM reading WHERE meter = ? AND user_facing_time IN (\(marks)) ORDER BY id",
                [.text(address)] + chunk.map { SQLiteValue.text($0) }, ReadingColumns.decode
            )
            start += chunk.count
        }
        return out.sorted { $0.id < $1.id }
    }
}
