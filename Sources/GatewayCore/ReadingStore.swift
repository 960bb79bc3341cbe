import GlucoseProfile
import Synchronization

/// Kinds of entries in the event log: what an installer reads to learn what happened without a screen.
public struct EventKind: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let connected = EventKind(rawValue: "connected")
    public static let disconnected = EventKind(rawValue: "disconnected")
    public static let downloadFinished = EventKind(rawValue: "download-finished")
    public static let error = EventKind(rawValue: "error")
    public static let clockSkew = EventKind(rawValue: "clock-skew")
    public static let counterReset = EventKind(rawValue: "counter-reset")
    /// A reading held as `time-in-future` whose time a later clock-skew correction explained.
    public static let readingReleased = EventKind(rawValue: "reading-released")
    public static let network = EventKind(rawValue: "network")
    public static let paired = EventKind(rawValue: "paired")
    public static let unpaired = EventKind(rawValue: "unpaired")
    /// The meter lost its bond with the gateway: it must be paired again (state `re-pair needed`).
    public static let bondLost = EventKind(rawValue: "bond-lost")
    /// A record with the number and user-facing time of a stored one but other bytes (`RecordConflict`).
    public static let conflictingRecord = EventKind(rawValue: "conflicting-record")
    public var description: String { rawValue }
}

public struct GatewayEvent: Sendable, Equatable {
    public var at: UnixMillis
    public var kind: EventKind
    public var meterAddress: String?
    /// A numeric code where one applies (1001/1002 network codes, ATT error, HTTP status).
    public var code: Int?
    /// Free text without secrets or health values.
    public var message: String
    public init(at: UnixMillis, kind: EventKind, meterAddress: String? = nil, code: Int? = nil, message: String) {
        self.at = at
        self.kind = kind
        self.meterAddress = meterAddress
        self.code = code
        self.message = message
    }
}

/// The gateway's store of meters, readings and events, as the download, pairing and the daemon see it.
/// SQLiteStore implements it, over the same database as the upload queue (`OutboxStore`); tests may use a fake.
public protocol ReadingStore: Sendable {
    func meter(_ address: String) async throws -> MeterInfo?
    /// Meters paired with this gateway, by address (unpaired ones are left alone).
    func pairedMeters() async throws -> [MeterInfo]
    /// Inserts or replaces the meter's row (identity, time zone, sync bookkeeping, bond state).
    func saveMeter(_ meter: MeterInfo) async throws
    /// Sets (`at` non-nil) or clears the meter's `re-pair needed` state (`MeterInfo.bondLostAt`) and
    /// nothing else. Returns false when no paired meter has this address.
    @discardableResult
    func setBondLost(_ address: String, at: UnixMillis?, message: String?) async throws -> Bool
    /// Inserts, in one transaction, each reading not already stored (a reading is unique per meter by
    /// sequence and user-facing time), together with one outbox row per enabled destination whose
    /// builder accepts it. Returns how many were new. Advances the meter's counter position (`highestSequence`).
    @discardableResult
    func insert(_ readings: [NewReading]) async throws -> Int
    /// As `insert`, and a reading whose key is stored with other measurement bytes is a conflict, not a
    /// duplicate: its bytes are kept apart (never uploaded) and the stored reading, unless a destination
    /// has acknowledged it, gets `ExclusionReason.conflictingRecord` and loses its unsent outbox rows, in
    /// the same transaction. Bytes already kept as a conflict count as a duplicate.
    func insertReadings(_ readings: [NewReading]) async throws -> InsertOutcome
    /// Keeps each value not already kept for its meter (the same bytes on the same characteristic are
    /// kept once, however often a re-download delivers them), in one transaction; never uploaded and
    /// never counted as a reading. Returns how many were new.
    @discardableResult
    func keepUndecodable(_ values: [UndecodableValue]) async throws -> Int
    /// Re-evaluates the meter's readings held for their time, `time-in-future` or `time-unresolved` (a meter
    /// time before 2010): `reevaluate` returns each as the clinical rules would store it now, or nil to leave
    /// it. Each one whose time is now plausible gets its new instant and exclusion and its outbox rows, all in one transaction;
    /// readings with any other exclusion are left alone. Returns the released readings as now stored.
    @discardableResult
    func releaseHeldReadings(_ meterAddress: String, reevaluate: @Sendable (NewReading) -> NewReading?) async throws -> [StoredReading]
    /// The meter's stored readings whose user-facing time (as the meter sent it) is one of `times`: how a
    /// download recognises a record again on a meter whose sequence numbers shift (newest first).
    func readings(_ address: String, atUserFacingTimes times: [GlucoseDateTime]) async throws -> [StoredReading]
    /// The meter's counter position: the sequence of the newest record downloaded, which wraps from 65535
    /// to 0 (`SequencePosition`); -1 for "ask from sequence 0"; nil when none. Inserts advance it.
    func highestSequence(_ address: String) async throws -> Int?
    /// The largest sequence number among the meter's stored readings (not the position: after the counter
    /// wrapped, the readings from before the wrap have larger numbers), nil when none.
    func largestStoredSequence(_ address: String) async throws -> Int?
    /// Sets the meter's highest sequence, also downwards, after its counter restarted (a battery change):
    /// `saveMeter` and `insert` only ever raise it.
    func resetHighestSequence(_ address: String, to sequence: Int?) async throws
    /// Readings stored, all meters, and how many of them are kept out of upload.
    func readingTotals() async throws -> (stored: Int, excluded: Int)
    func log(_ event: GatewayEvent) async throws
    /// As `log`, where losing the event to a power cut is harmless: it need not be synced before this
    /// returns, only by the store's next durable commit or its close (a crash of the process keeps it).
    func logWithoutSync(_ event: GatewayEvent) async throws
    /// As `saveMeter` followed by `log(event)`, in one commit where the store can.
    func saveMeter(_ meter: MeterInfo, logging event: GatewayEvent) async throws
    /// True when another process committed to the store since the last call (a manual `sync`, `pair`).
    /// Writes through this store never count.
    func changedByOtherProcesses() async throws -> Bool
    /// What this store commits from now on, one change per commit that changed something, in commit
    /// order; the upload queue's changes too where the same store holds it. Other processes' commits are
    /// not in it (ask `changedByOtherProcesses`). Each call is a new stream; it ends when the store closes.
    /// Keep reading it or drop it: it buffers what is not read.
    func changes() -> AsyncStream<StoreChange>
    /// The meter's clock measurements, oldest first (`ClockSync`).
    func clockHistory(_ address: String) async throws -> [ClockSync]
    /// Remembers clock measurements of the meter, in one transaction.
    func rememberClock(_ address: String, _ syncs: [ClockSync]) async throws
    /// Remembers where readings were placed in time; a reading's first placement is kept, never replaced.
    func rememberPlacements(_ address: String, _ placements: [ReadingClock]) async throws
    /// The meter's remembered placements.
    func placements(_ address: String) async throws -> [ReadingClock]
}

/// What `ReadingStore.insertReadings` did.
public struct InsertOutcome: Sendable, Equatable {
    /// Readings new to the store.
    public var inserted: Int
    /// Readings whose key was stored with other measurement bytes (not counted in `inserted`).
    public var conflicts: [RecordConflict]
    public init(inserted: Int, conflicts: [RecordConflict] = []) {
        self.inserted = inserted
        self.conflicts = conflicts
    }
}

/// A record that came with the sequence number and user-facing time of a stored reading but other
/// measurement bytes: which of the two is right cannot be told, so neither is uploaded where that is
/// still possible. Carries no health values.
public struct RecordConflict: Sendable, Equatable {
    public var meterAddress: String
    public var sequence: Int
    public var userFacingTime: GlucoseDateTime
    /// The stored reading's row id.
    public var storedID: Int64
    /// Destinations that had already acknowledged the stored reading (sorted): it is kept as it was,
    /// nothing can be taken back. Empty: the stored reading is now withheld from upload.
    public var acknowledgedBy: [String]
    public init(meterAddress: String, sequence: Int, userFacingTime: GlucoseDateTime, storedID: Int64, acknowledgedBy: [String]) {
        self.meterAddress = meterAddress
        self.sequence = sequence
        self.userFacingTime = userFacingTime
        self.storedID = storedID
        self.acknowledgedBy = acknowledgedBy
    }
}

/// What a committed write changed, as `ReadingStore.changes()` reports it.
public enum StoreChange: Sendable, Equatable {
    /// Meter rows: pairing, identity, sync bookkeeping, the highest sequence.
    case meters
    /// New readings, with the uploads queued for them in the same transaction; also undecodable values
    /// kept (`ReadingStore.keepUndecodable`), which queue nothing.
    case readings
    /// The upload queue or a destination's state: rows claimed, acknowledged, released, quarantined or
    /// queued again; a state saved.
    case uploads
    /// An entry in the event log.
    case events
}

/// The streams a store hands out from `changes()`: each change emitted reaches every stream still open.
public final class StoreChangeFeed: Sendable {
    private struct State {
        var next = 0
        var streams: [Int: AsyncStream<StoreChange>.Continuation] = [:]
        var finished = false
    }
    private let state = Mutex(State())

    public init() {}

    /// A new stream of the changes emitted from now on.
    public func stream() -> AsyncStream<StoreChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: StoreChange.self, bufferingPolicy: .unbounded)
        let id = state.withLock { s in
            defer { s.next += 1 }
            return s.next
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.streams.removeValue(forKey: id) }
        }
        let open = state.withLock { s in
            if !s.finished { s.streams[id] = continuation }
            return !s.finished
        }
        if !open { continuation.finish() }
        return stream
    }

    public func emit(_ change: StoreChange) {
        let streams = state.withLock { $0.streams }
        for (id, continuation) in streams {
            if case .terminated = continuation.yield(change) {
                state.withLock { _ = $0.streams.removeValue(forKey: id) }
            }
        }
    }

    /// Ends every stream; later ones end at once (the store closed).
    public func finish() {
        let streams = state.withLock { s in
            s.finished = true
            defer { s.streams = [:] }
            return s.streams
        }
        for continuation in streams.values { continuation.finish() }
    }
}
