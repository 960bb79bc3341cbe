/// One schema change. Named, append-only: once shipped, a migration is never edited or reordered; a change
/// to the schema is a new migration at the end of `Schema.migrations`.
struct Migration: Sendable {
    var name: String
    var sql: String
}

/// Applies pending migrations. `PRAGMA user_version` holds how many have been applied; the
/// `schema_migration` table records each one's name and time, for the installer's benefit.
struct Migrator {
    var migrations: [Migration]

    /// Brings the database up to date, each migration in its own `BEGIN IMMEDIATE` transaction, so a
    /// crash or a failure leaves the database at the last complete version.
    func migrate(_ db: SQLiteConnection, now: Int64) throws {
        // An up-to-date database needs no write lock: a reader (`status`) opens it while the daemon writes.
        let found = try currentVersion(db)
        if found < 0 { throw SQLiteStoreError.schemaInvalid(found: found) }
        if found > migrations.count {
            throw SQLiteStoreError.schemaTooNew(found: found, supported: migrations.count)
        }
        guard found < migrations.count else { return }
        for (index, migration) in migrations.enumerated() where index >= found {
            try db.transaction {
                // Read again under the write lock: another process may have migrated meanwhile.
                let version = try currentVersion(db)
                if version < 0 { throw SQLiteStoreError.schemaInvalid(found: version) }
                if version > migrations.count {
                    throw SQLiteStoreError.schemaTooNew(found: version, supported: migrations.count)
                }
                guard version == index else { return }
                try db.executeScript(migration.sql)
                try db.execute(
                    "INSERT INTO schema_migration (version, name, applied_at) VALUES (?, ?, ?)",
                    [.integer(Int64(index + 1)), .text(migration.name), .integer(now)]
                )
                try db.executeScript("PRAGMA user_version = \(index + 1)")
            }
        }
    }

    func currentVersion(_ db: SQLiteConnection) throws -> Int {
        try db.queryFirst("PRAGMA user_version") { $0.int(0) } ?? 0
    }
}

/// The gateway's schema, as its migrations.
enum Schema {
    static let migrations: [Migration] = [
        Migration(name: "1-meters-readings-outbox-events", sql: """
            CREATE TABLE schema_migration (
                version INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                applied_at INTEGER NOT NULL
            ) STRICT;

            CREATE TABLE meter (
                address TEXT PRIMARY KEY NOT NULL,
                name TEXT,
                manufacturer TEXT,
                model TEXT,
                serial TEXT,
                firmware TEXT,
                features INTEGER,
                time_zone TEXT NOT NULL,
                paired_at INTEGER,
                unpaired_at INTEGER,
                highest_sequence INTEGER,
                last_sync INTEGER,
                last_seen INTEGER,
                last_clock_skew_s INTEGER
            ) STRICT;

            CREATE TABLE reading (
                id INTEGER PRIMARY KEY,
                meter TEXT NOT NULL REFERENCES meter(address),
                sequence INTEGER NOT NULL,
                base_time TEXT NOT NULL,
                time_offset_min INTEGER NOT NULL,
                user_facing_time TEXT NOT NULL,
                meter_instant INTEGER,
                instant INTEGER,
                mgdl REAL,
                mmoll REAL,
                special TEXT,
                unit TEXT NOT NULL,
                type INTEGER,
                sample_location INTEGER,
                sensor_status INTEGER,
                analyte TEXT NOT NULL,
                has_context INTEGER NOT NULL,
                carbohydrate_id INTEGER,
                carbohydrate_kg REAL,
                meal INTEGER,
                tester INTEGER,
                health INTEGER,
                exercise_duration_s INTEGER,
                exercise_intensity_pct INTEGER,
                medication_id INTEGER,
                medication_amount REAL,
                medication_unit TEXT,
                hba1c_pct REAL,
                raw_measurement BLOB NOT NULL,
                raw_context BLOB,
                received_at INTEGER NOT NULL,
                exclusion TEXT,
                UNIQUE (meter, sequence, user_facing_time)
            ) STRICT;
            CREATE INDEX reading_by_instant ON reading (instant);

            CREATE TABLE outbox (
                id INTEGER PRIMARY KEY,
                destination TEXT NOT NULL,
                reading_id INTEGER NOT NULL REFERENCES reading(id),
                idempotency_key TEXT NOT NULL,
                body BLOB NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'in_flight', 'acknowledged', 'quarantined')),
                attempts INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL,
                claimed_at INTEGER,
                acknowledged_at INTEGER,
                quarantined_at INTEGER,
                last_answer TEXT
            ) STRICT;
            -- The queue index holds pending rows only and leads with the id, so inserts always append at
            -- its right edge whatever the number of destinations, and claiming stays fast however much
            -- acknowledged history accumulates. Counts for status scan the table: they are rare.
            CREATE INDEX outbox_pending ON outbox (id, destination) WHERE state = 'pending';

            CREATE TABLE destination_state (
                destination TEXT PRIMARY KEY NOT NULL,
                state TEXT NOT NULL,
                last_error_code INTEGER,
                last_error_message TEXT,
                last_error_at INTEGER,
                last_success_at INTEGER
            ) STRICT;

            CREATE TABLE event (
                id INTEGER PRIMARY KEY,
                at INTEGER NOT NULL,
                kind TEXT NOT NULL,
                meter TEXT,
                code INTEGER,
                message TEXT NOT NULL
            ) STRICT;
            """),
        // A meter that lost its bond (reset, or paired with another device) is in state `re-pair needed`
        // until it is paired again; kept here so the state survives a restart of the daemon.
        Migration(name: "2-meter-bond-lost", sql: """
            ALTER TABLE meter ADD COLUMN bond_lost_at INTEGER;
            ALTER TABLE meter ADD COLUMN bond_lost_message TEXT;
            """),
        Migration(name: "3-meter-identity-raw", sql: """
            -- The Device Information strings as sent, where the stored text was cleaned (NUL, control
            -- characters): `field=hex` pairs separated by commas, NULL when nothing was cleaned.
            ALTER TABLE meter ADD COLUMN identity_raw TEXT;
            """),
        Migration(name: "4-conflicting-record", sql: """
            -- Records that came with the sequence number and user-facing time of a stored reading but
            -- other measurement bytes: kept as sent, never uploaded.
            CREATE TABLE conflicting_record (
                id INTEGER PRIMARY KEY,
                meter TEXT NOT NULL REFERENCES meter(address),
                sequence INTEGER NOT NULL,
                user_facing_time TEXT NOT NULL,
                raw_measurement BLOB NOT NULL,
                raw_context BLOB,
                received_at INTEGER NOT NULL
            ) STRICT;
            CREATE INDEX conflicting_record_by_key ON conflicting_record (meter, sequence, user_facing_time);
            """),
        Migration(name: "5-outbox-state-check", sql: """
            -- The same four states, as comparisons: a CHECK with `IN` and more than two values builds a
            -- temporary lookup table every time a row is written, once per insert or state change.
            -- The table is rebuilt (a CHECK cannot be altered); rows, ids and the queue index stay as they were.
            CREATE TABLE outbox_rebuilt (
                id INTEGER PRIMARY KEY,
                destination TEXT NOT NULL,
                reading_id INTEGER NOT NULL REFERENCES reading(id),
                idempotency_key TEXT NOT NULL,
                body BLOB NOT NULL,
                state TEXT NOT NULL CHECK (state = 'pending' OR state = 'in_flight' OR state = 'acknowledged' OR state = 'quarantined'),
                attempts INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL,
                claimed_at INTEGER,
                acknowledged_at INTEGER,
                quarantined_at INTEGER,
                last_answer TEXT
            ) STRICT;
            INSERT INTO outbox_rebuilt (id, destination, reading_id, idempotency_key, body, state, attempts, created_at,
                                        claimed_at, acknowledged_at, quarantined_at, last_answer)
                SELECT id, destination, reading_id, idempotency_key, body, state, attempts, created_at,
                       claimed_at, acknowledged_at, quarantined_at, last_answer FROM outbox ORDER BY id;
            DROP TABLE outbox;
            ALTER TABLE outbox_rebuilt RENAME TO outbox;
            CREATE INDEX outbox_pending ON outbox (id, destination) WHERE state = 'pending';
            """),
        Migration(name: "6-outbox-body", sql: """
            -- The frozen request body of each outbox row, in a table of its own: claiming and
            -- acknowledging rewrite the small queue rows only, never the bodies. Written with its row, in
            -- the same transaction, and never changed.
            CREATE TABLE outbox_body (
                outbox_id INTEGER PRIMARY KEY REFERENCES outbox(id),
                body BLOB NOT NULL
            ) STRICT;
            INSERT INTO outbox_body (outbox_id, body) SELECT id, body FROM outbox ORDER BY id;
            ALTER TABLE outbox DROP COLUMN body;
            """),
        Migration(name: "7-outbox-held-index", sql: """
            -- The rows in flight or quarantined, by id: with the pending rows' index, every row not yet
            -- acknowledged is reached through an index, so the counts a sync, an upload and the upload
            -- service take after every session, and the requeue of rows left in flight, read those rows
            -- only, however much acknowledged history accumulates. Both states are rare and short-lived;
            -- the id as the key keeps a claim's inserts at the index's right edge. The OR of comparisons,
            -- not IN: a query's `state = 'in_flight'` implies it.
            CREATE INDEX outbox_held ON outbox (id) WHERE state = 'in_flight' OR state = 'quarantined';
            """),
        Migration(name: "8-undecodable-value", sql: """
            -- Glucose Measurement and Measurement Context values the codec could not decode (cut short,
            -- reserved or impossible values): kept as sent with the decoder's reason, never uploaded and
            -- not readings. `sequence` is the number as sent when its two bytes are there. The same bytes
            -- from the same meter on the same characteristic are one row, however often a re-download
            -- delivers them.
            CREATE TABLE undecodable_value (
                id INTEGER PRIMARY KEY,
                meter TEXT NOT NULL REFERENCES meter(address),
                characteristic TEXT NOT NULL,
                sequence INTEGER,
                raw BLOB NOT NULL,
                reason TEXT NOT NULL,
                received_at INTEGER NOT NULL,
                UNIQUE (meter, characteristic, raw)
            ) STRICT;
            """),
        Migration(name: "9-meter-clock", sql: """
            -- Each measurement of a meter's clock against UTC: F = the clock read as a civil time minus UTC,
            -- in seconds, when, and the highest record sequence the meter had then; a write of the clock by
            -- the gateway is a row of its own. Readings stored before this migration keep their instants.
            CREATE TABLE meter_clock (
                id INTEGER PRIMARY KEY,
                meter TEXT NOT NULL REFERENCES meter(address),
                at INTEGER NOT NULL,
                offset_s INTEGER NOT NULL,
                highest_sequence INTEGER,
                set_by_gateway INTEGER NOT NULL CHECK (set_by_gateway = 0 OR set_by_gateway = 1)
            ) STRICT;
            CREATE INDEX meter_clock_by_meter ON meter_clock (meter, at);
            -- Where each reading was placed in time from that history when it was first stored: F, the sync
            -- it came from and why, or the candidate instants (comma-separated milliseconds) of a reading
            -- kept as time-uncertain. Keyed as the reading is; never changed.
            CREATE TABLE reading_clock (
                meter TEXT NOT NULL REFERENCES meter(address),
                sequence INTEGER NOT NULL,
                user_facing_time TEXT NOT NULL,
                offset_s INTEGER,
                since INTEGER,
                reason TEXT NOT NULL,
                candidates TEXT NOT NULL,
                PRIMARY KEY (meter, sequence, user_facing_time)
            ) STRICT;
            """),
    ]
}
