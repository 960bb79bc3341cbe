import GatewayCore

/// The upload queue and destination state: the store as the `OutboxStore` the dispatcher uses.
extension SQLiteStore {
    static let claimSQL = "SELECT \(OutboxColumns.list) FROM \(OutboxColumns.tables) WHERE destination = ? AND state = 'pending' ORDER BY outbox.id LIMIT ?"
    static let markInFlightSQL = "UPDATE outbox SET state = 'in_flight', claimed_at = ? WHERE destination = ? AND state = 'pending' AND id <= ?"
    static let acknowledgeSQL = """
        UPDATE outbox SET state = 'acknowledged', acknowledged_at = ?
        WHERE id IN (SELECT value FROM json_each(?)) AND state <> 'acknowledged'
        """
    static let releaseSQL = """
        UPDATE outbox SET state = 'pending', attempts = attempts + 1
        WHERE id IN (SELECT value FROM json_each(?)) AND state = 'in_flight'
        """

    /// Row ids as a JSON array (`[3,4,9]`), the set `json_each` reads in one statement.
    static func idList(_ ids: [Int64]) -> String {
        var text = "["
        text.reserveCapacity(ids.count * 8 + 2)
        for (index, id) in ids.enumerated() {
            if index > 0 { text += "," }
            text += String(id)
        }
        return text + "]"
    }

    /// Marks the claimed rows in flight in a commit without an fsync of its own: `synchronous = NORMAL`
    /// for that one commit, so its WAL frames are written (a crash of the process keeps them) but not
    /// synced. Losing the marker to a power cut is harmless: the rows are pending again, as
    /// `requeueInFlight` makes them after a crash anyway (only the attempt it counts is missing), and the
    /// server deduplicates a re-sent reading. The next FULL commit (the acknowledgement) syncs the WAL,
    /// these frames with it. A checkpoint under NORMAL still syncs the WAL before and the database after.
    public func claimPending(_ destination: DestinationName, limit: Int) throws -> [OutboxItem] {
        guard limit > 0 else { return [] }
        let db = try openConnection()
        let claimedAt = now()
        let claimed = try withoutOwnSync(db) {
            try db.transaction {
                let items = try db.query(Self.claimSQL, [.text(destination.rawValue), .integer(Int64(limit))]) { row in
                    try OutboxColumns.decodeClaimed(row, destination: destination)
                }
                guard let last = items.last else { return [OutboxItem]() }
                // The query took the destination's first pending rows by id, under this transaction's
                // write lock: its pending rows up to the last id taken are exactly those, marked at once.
                try db.execute(Self.markInFlightSQL, [.integer(claimedAt), .text(destination.rawValue), .integer(last.id)])
                guard db.changes == items.count else {
                    throw SQLiteError(code: .error, message: "claimed \(items.count) outbox rows but marked \(db.changes) in flight", sql: Self.markInFlightSQL)
                }
                return items
            }
        }
        if !claimed.isEmpty { committed(.uploads) }
        return claimed
    }

    /// Marks rows acknowledged (from any state but acknowledged, whose first time is kept). Unless
    /// `synced`, the commit runs with `synchronous = NORMAL`, as a claim's (see ``OutboxStore``).
    public func acknowledge(_ ids: [Int64], at: UnixMillis, synced: Bool) throws {
        guard !ids.isEmpty else { return }
        let db = try openConnection()
        let mark = {
            try db.transaction {
                try db.execute(Self.acknowledgeSQL, [.integer(at), .text(Self.idList(ids))])
            }
        }
        if synced {
            try mark()
        } else {
            try withoutOwnSync(db, mark)
        }
        committed(.uploads)
    }

    /// In-flight rows back to pending, one attempt more each.
    public func release(_ ids: [Int64]) throws {
        guard !ids.isEmpty else { return }
        let db = try openConnection()
        try db.transaction {
            try db.execute(Self.releaseSQL, [.text(Self.idList(ids))])
        }
        committed(.uploads)
    }

    static let quarantineSQL = """
        UPDATE outbox SET state = 'quarantined', attempts = attempts + 1, quarantined_at = ?, last_answer = ?
        WHERE id = ? AND state <> 'acknowledged'
        """

    /// Sets a row aside with the server's answer, counting the attempt. Acknowledged rows stay acknowledged.
    public func quarantine(_ id: Int64, answer: String) throws {
        try openConnection().execute(Self.quarantineSQL, [.integer(now()), .text(answer), .integer(id)])
        committed(.uploads)
    }

    public func redrive(_ destination: DestinationName) throws -> Int {
        let db = try openConnection()
        let redriven = try db.transaction {
            try db.execute("UPDATE outbox SET state = 'pending' WHERE destination = ? AND state = 'quarantined'", [.text(destination.rawValue)])
            return db.changes
        }
        committed(.uploads)
        return redriven
    }

    static let requeueSQL = "UPDATE outbox SET state = 'pending', attempts = attempts + 1 WHERE state = 'in_flight'"

    /// In-flight rows back to pending, counting an attempt each (their request may have reached the server).
    public func requeueInFlight() throws -> Int {
        let db = try openConnection()
        let requeued = try db.transaction {
            try db.execute(Self.requeueSQL)
            return db.changes
        }
        if requeued > 0 { committed(.uploads) }
        return requeued
    }

    public func counts(_ destination: DestinationName) throws -> OutboxCounts {
        let db = try openConnection()
        // One pass over the destination's rows: a GROUP BY would sort them in a temporary tree first.
        guard let (counts, all) = try db.queryFirst(Self.countsSQL, [.text(destination.rawValue)], { row in
            (OutboxCounts(pending: row.int(0), inFlight: row.int(1), acknowledged: row.int(2), quarantined: row.int(3),
                          oldestUnsent: row.optionalInt64(4)), row.int(5))
        }) else { return OutboxCounts() }
        guard counts.pending + counts.inFlight + counts.acknowledged + counts.quarantined == all else {
            throw SQLiteStoreError.invalidColumn(table: "outbox", column: "state")
        }
        return counts
    }

    /// The destination's pending, in-flight and quarantined rows and the oldest unsent, read through the
    /// `outbox_pending` and `outbox_held` indexes: as cheap with years of acknowledged history as without.
    /// `acknowledged` is not counted (0).
    public func unsentCounts(_ destination: DestinationName) throws -> OutboxCounts {
        try openConnection().queryFirst(Self.unsentCountsSQL, [.text(destination.rawValue)]) { row in
            OutboxCounts(pending: row.int(0), inFlight: row.int(1), quarantined: row.int(2), oldestUnsent: row.optionalInt64(3))
        } ?? OutboxCounts()
    }

    static let unsentCountsSQL = """
        SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'in_flight'),
               count(*) FILTER (WHERE state = 'quarantined'),
               min(created_at) FILTER (WHERE state = 'pending' OR state = 'in_flight')
        FROM (SELECT state, created_at FROM outbox WHERE destination = ?1 AND state = 'pending'
              UNION ALL
              SELECT state, created_at FROM outbox WHERE destination = ?1 AND (state = 'in_flight' OR state = 'quarantined'))
        """

    static let countsSQL = """
        SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'in_flight'),
               count(*) FILTER (WHERE state = 'acknowledged'), count(*) FILTER (WHERE state = 'quarantined'),
               min(created_at) FILTER (WHERE state = 'pending' OR state = 'in_flight'), count(*)
        FROM outbox WHERE destination = ?
        """

    public func saveDestinationState(_ state: DestinationState) throws {
        try openConnection().execute("""
            INSERT INTO destination_state (destination, state, last_error_code, last_error_message, last_error_at, last_success_at)
            VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (destination) DO UPDATE SET
                state = excluded.state, last_error_code = excluded.last_error_code,
                last_error_message = excluded.last_error_message, last_error_at = excluded.last_error_at,
                last_success_at = excluded.last_success_at
            """, [
                .text(state.destination.rawValue), .text(state.state.rawValue), SQLiteValue(state.lastErrorCode),
                SQLiteValue(state.lastErrorMessage), SQLiteValue(state.lastErrorAt), SQLiteValue(state.lastSuccessAt),
            ])
        committed(.uploads)
    }

    public func destinationState(_ destination: DestinationName) throws -> DestinationState? {
        try openConnection().queryFirst("""
            SELECT state, last_error_code, last_error_message, last_error_at, last_success_at
            FROM destination_state WHERE destination = ?
            """, [.text(destination.rawValue)]) { row in
            var state = DestinationState(destination: destination, state: UploadState(rawValue: row.text(0)))
            state.lastErrorCode = row.optionalInt(1)
            state.lastErrorMessage = row.optionalText(2)
            state.lastErrorAt = row.optionalInt64(3)
            state.lastSuccessAt = row.optionalInt64(4)
            return state
        }
    }
}
