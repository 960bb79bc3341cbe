import GatewayCore

/// Which readings `readings(_:)` returns.
public struct ReadingFilter: Sendable, Equatable {
    /// Only this meter's readings; nil for all meters.
    public var meterAddress: String?
    /// Only readings at or after this instant; readings whose instant is unresolved are then left out.
    public var since: UnixMillis?
    /// Only readings before this instant.
    public var until: UnixMillis?
    /// At most this many, nil for all.
    public var limit: Int?
    public init(meterAddress: String? = nil, since: UnixMillis? = nil, until: UnixMillis? = nil, limit: Int? = nil) {
        self.meterAddress = meterAddress
        self.since = since
        self.until = until
        self.limit = limit
    }
}

/// Figures for `status` and `/metrics`.
public struct StoreMetrics: Sendable, Equatable {
    public var readings: Int
    /// Readings kept out of upload (an exclusion reason is set).
    public var excludedReadings: Int
    /// Every destination with outbox rows or a saved state.
    public var destinations: [DestinationName: OutboxCounts]
    public init(readings: Int, excludedReadings: Int, destinations: [DestinationName: OutboxCounts]) {
        self.readings = readings
        self.excludedReadings = excludedReadings
        self.destinations = destinations
    }
}

/// A quarantined outbox row with the server's answer that put it aside.
public struct QuarantinedItem: Sendable, Equatable {
    public var item: OutboxItem
    public var answer: String?
    public var quarantinedAt: UnixMillis?
    public init(item: OutboxItem, answer: String?, quarantinedAt: UnixMillis?) {
        self.item = item
        self.answer = answer
        self.quarantinedAt = quarantinedAt
    }
}

extension SQLiteStore {
    // MARK: Meters

    /// Paired meters, by address; with `includingUnpaired`, also those whose pairing was removed.
    public func meters(includingUnpaired: Bool = false) throws -> [MeterRecord] {
        let condition = includingUnpaired ? "" : "WHERE unpaired_at IS NULL"
        return try openConnection().query("SELECT \(MeterColumns.list) FROM meter \(condition) ORDER BY address", [], MeterColumns.decode)
    }

    /// Removes the pairing of a meter while keeping its row and readings (for their history and foreign
    /// keys). Returns false when no paired meter has this address. `saveMeter` pairs it again.
    @discardableResult
    public func unpair(_ address: String, at: UnixMillis) throws -> Bool {
        let db = try openConnection()
        try db.execute("UPDATE meter SET unpaired_at = ? WHERE address = ? AND unpaired_at IS NULL", [.integer(at), .text(address)])
        guard db.changes == 1 else { return false }
        committed(.meters)
        return true
    }

    /// Records a finished download: its time, and the meter's clock skew when the clock was readable.
    public func recordSync(_ address: String, at: UnixMillis, clockSkewSeconds: Int?) throws {
        try openConnection().execute("""
            UPDATE meter SET last_sync = ?1, last_seen = max(coalesce(last_seen, ?1), ?1),
                last_clock_skew_s = coalesce(?2, last_clock_skew_s)
            WHERE address = ?3
            """, [.integer(at), SQLiteValue(clockSkewSeconds), .text(address)])
        committed(.meters)
    }

    /// Records that the meter was seen (advertising or connected).
    public func recordSeen(_ address: String, at: UnixMillis) throws {
        try openConnection().execute(
            "UPDATE meter SET last_seen = max(coalesce(last_seen, ?1), ?1) WHERE address = ?2",
            [.integer(at), .text(address)]
        )
        committed(.meters)
    }

    // MARK: Readings

    /// Stored readings, ordered by instant (unresolved instants first), then by row id.
    public func readings(_ filter: ReadingFilter = ReadingFilter()) throws -> [StoredReading] {
        let (sql, values) = filter.query("SELECT id, \(ReadingColumns.list) FROM reading", time: "instant")
        return try openConnection().query(sql, values, ReadingColumns.decode)
    }

    public func reading(id: Int64) throws -> StoredReading? {
        try openConnection().queryFirst("SELECT id, \(ReadingColumns.list) FROM reading WHERE id = ?", [.integer(id)], ReadingColumns.decode)
    }

    /// How many readings are stored, for one meter or all.
    public func readingCount(meterAddress: String? = nil) throws -> Int {
        let db = try openConnection()
        if let meterAddress {
            return try db.queryFirst("SELECT count(*) FROM reading WHERE meter = ?", [.text(meterAddress)]) { $0.int(0) } ?? 0
        }
        return try db.queryFirst("SELECT count(*) FROM reading") { $0.int(0) } ?? 0
    }

    // MARK: Outbox inspection

    /// Every destination with outbox rows or a saved state, by name.
    public func destinations() throws -> [DestinationName] {
        try openConnection().query("""
            SELECT destination FROM destination_state
            UNION SELECT DISTINCT destination FROM outbox
            ORDER BY 1
            """) { DestinationName(rawValue: $0.text(0)) }
    }

    /// Outbox rows of a destination in queue order, optionally of one state.
    public func outboxItems(_ destination: DestinationName, state: OutboxState? = nil, limit: Int = 1000) throws -> [OutboxItem] {
        var sql = "SELECT \(OutboxColumns.list) FROM \(OutboxColumns.tables) WHERE destination = ?"
        var values: [SQLiteValue] = [.text(destination.rawValue)]
        if let state {
            sql += " AND state = ?"
            values.append(.text(state.rawValue))
        }
        sql += " ORDER BY id LIMIT ?"
        values.append(.integer(Int64(max(0, limit))))
        return try openConnection().query(sql, values, OutboxColumns.decode)
    }

    /// Quarantined rows of a destination with the answers that put them aside.
    public func quarantined(_ destination: DestinationName) throws -> [QuarantinedItem] {
        try openConnection().query("""
            SELECT \(OutboxColumns.list), last_answer, quarantined_at FROM \(OutboxColumns.tables)
            WHERE destination = ? AND state = 'quarantined' ORDER BY id
            """, [.text(destination.rawValue)]) { row in
            QuarantinedItem(item: try OutboxColumns.decode(row), answer: row.optionalText(8), quarantinedAt: row.optionalInt64(9))
        }
    }

    /// Readings stored, and outbox counts per destination.
    public func metrics() throws -> StoreMetrics {
        let totals = try readingTotals()
        var destinations: [DestinationName: OutboxCounts] = [:]
        for name in try self.destinations() {
            destinations[name] = try counts(name)
        }
        return StoreMetrics(readings: totals.stored, excludedReadings: totals.excluded, destinations: destinations)
    }

    // MARK: Events

    /// The most recent events, newest first.
    public func recentEvents(limit: Int = 50, meterAddress: String? = nil, kind: EventKind? = nil) throws -> [GatewayEvent] {
        var conditions: [String] = []
        var values: [SQLiteValue] = []
        if let meterAddress {
            conditions.append("meter = ?")
            values.append(.text(meterAddress))
        }
        if let kind {
            conditions.append("kind = ?")
            values.append(.text(kind.rawValue))
        }
        var sql = "SELECT at, kind, meter, code, message FROM event"
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        sql += " ORDER BY id DESC LIMIT ?"
        values.append(.integer(Int64(max(0, limit))))
        return try openConnection().query(sql, values) { row in
            GatewayEvent(at: row.int64(0), kind: EventKind(rawValue: row.text(1)), meterAddress: row.optionalText(2),
                         code: row.optionalInt(3), message: row.text(4))
        }
    }
}

extension ReadingFilter {
    /// `select` narrowed to this filter: the meter, `time` (the table's time column) from `since` and before
    /// `until`, ordered by `time` then row id, at most `limit` rows. Every value is bound, never spliced.
    func query(_ select: String, time: String) -> (sql: String, values: [SQLiteValue]) {
        var conditions: [String] = []
        var values: [SQLiteValue] = []
        if let meterAddress {
            conditions.append("meter = ?")
            values.append(.text(meterAddress))
        }
        if let since {
            conditions.append("\(time) >= ?")
            values.append(.integer(since))
        }
        if let until {
            conditions.append("\(time) < ?")
            values.append(.integer(until))
        }
        var sql = select
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        sql += " ORDER BY \(time), id"
        if let limit {
            sql += " LIMIT ?"
            values.append(.integer(Int64(max(0, limit))))
        }
        return (sql, values)
    }
}
