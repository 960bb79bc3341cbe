import GlucoseProfile
import GatewayCore
import Synchronization

/// An in-memory `ReadingStore` with the same rules as the SQLite one: a reading is unique per meter by
/// (sequence, user-facing time); inserts raise the meter's highest sequence; `saveMeter` never lowers it.
public final class MemoryReadingStore: ReadingStore, Sendable {
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    private struct State {
        var meters: [String: MeterInfo] = [:]
        var readings: [NewReading] = []
        /// Records kept apart as conflicting with a stored reading.
        var conflicts: [NewReading] = []
        /// Undecodable values kept, once per meter, characteristic and bytes.
        var undecodable: [UndecodableValue] = []
        var keys: Set<String> = []
        var events: [GatewayEvent] = []
        var insertBatches: [Int] = []
        var failInsertsAfter: Int?
    }
    private let state = Mutex(State())
    private let feed = StoreChangeFeed()

    public init(meters: [MeterInfo] = []) {
        state.withLock { s in
            for m in meters { s.meters[m.address] = m }
        }
    }

    public var readings: [NewReading] { state.withLock { $0.readings } }
    public var events: [GatewayEvent] { state.withLock { $0.events } }
    public var conflicts: [NewReading] { state.withLock { $0.conflicts } }
    public var undecodable: [UndecodableValue] { state.withLock { $0.undecodable } }
    /// Sizes of the batches passed to `insert`, in order.
    public var insertBatches: [Int] { state.withLock { $0.insertBatches } }

    /// Makes every insert after the next `n` fail, as a full disk would.
    public func failInserts(after n: Int?) { state.withLock { $0.failInsertsAfter = n } }

    public func meter(_ address: String) async throws -> MeterInfo? {
        state.withLock { $0.meters[address] }
    }

    public func pairedMeters() async throws -> [MeterInfo] {
        state.withLock { $0.meters.values.sorted { $0.address < $1.address } }
    }

    public func saveMeter(_ meter: MeterInfo) async throws {
        state.withLock { s in
            var row = meter
            if let old = s.meters[meter.address]?.highestSequence {
                row.highestSequence = meter.highestSequence.map { SequencePosition.advanced(old, by: $0) } ?? old
            }
            s.meters[meter.address] = row
        }
        feed.emit(.meters)
    }

    @discardableResult
    public func setBondLost(_ address: String, at: UnixMillis?, message: String?) async throws -> Bool {
        let found = state.withLock { s -> Bool in
            guard s.meters[address] != nil else { return false }
            s.meters[address]?.bondLostAt = at
            s.meters[address]?.bondLostMessage = at == nil ? nil : message
            return true
        }
        if found { feed.emit(.meters) }
        return found
    }

    @discardableResult
    public func insert(_ readings: [NewReading]) async throws -> Int {
        try await insertReadings(readings).inserted
    }

    /// As the SQLite store, without an outbox: a conflicting record's bytes are kept in `conflicts` once,
    /// and the stored reading becomes `conflicting-record`.
    public func insertReadings(_ readings: [NewReading]) async throws -> InsertOutcome {
        let outcome = try state.withLock { s throws(Failure) in
            if let n = s.failInsertsAfter {
                if n <= 0 { throw Failure(description: "database or disk is full") }
                s.failInsertsAfter = n - 1
            }
            s.insertBatches.append(readings.count)
            var outcome = InsertOutcome(inserted: 0)
            for r in readings {
                let key = "\(r.meterAddress)|\(r.sequence)|\(r.userFacingTime)"
                if s.meters[r.meterAddress] == nil {
                    s.meters[r.meterAddress] = MeterInfo(address: r.meterAddress, timeZone: "UTC")
                }
                let old = s.meters[r.meterAddress]?.highestSequence
                s.meters[r.meterAddress]?.highestSequence = SequencePosition.advanced(old, by: r.sequence)
                guard s.keys.insert(key).inserted else {
                    guard let i = s.readings.firstIndex(where: {
                        $0.meterAddress == r.meterAddress && $0.sequence == r.sequence && $0.userFacingTime == r.userFacingTime
                    }), s.readings[i].rawMeasurement != r.rawMeasurement,
                        !s.conflicts.contains(where: { "\($0.meterAddress)|\($0.sequence)|\($0.userFacingTime)" == key && $0.rawMeasurement == r.rawMeasurement })
                    else { continue }
                    s.conflicts.append(r)
                    s.readings[i].exclusion = .conflictingRecord
                    outcome.conflicts.append(RecordConflict(meterAddress: r.meterAddress, sequence: r.sequence, userFacingTime: r.userFacingTime,
                                                            storedID: Int64(i + 1), acknowledgedBy: []))
                    continue
                }
                s.readings.append(r)
                outcome.inserted += 1
            }
            return outcome
        }
        if outcome.inserted > 0 || !outcome.conflicts.isEmpty { feed.emit(.readings) }
        return outcome
    }

    /// As the SQLite store: the same bytes from the same meter on the same characteristic are kept once.
    /// Fails with the inserts (`failInserts(after:)`), as a full disk fails every write.
    @discardableResult
    public func keepUndecodable(_ values: [UndecodableValue]) async throws -> Int {
        let kept = try state.withLock { s throws(Failure) in
            if let n = s.failInsertsAfter, n <= 0 { throw Failure(description: "database or disk is full") }
            var kept = 0
            for v in values where !s.undecodable.contains(where: {
                $0.meterAddress == v.meterAddress && $0.characteristic == v.characteristic && $0.raw == v.raw
            }) {
                s.undecodable.append(v)
                kept += 1
            }
            return kept
        }
        if kept > 0 { feed.emit(.readings) }
        return kept
    }

    @discardableResult
    public func releaseHeldReadings(
        _ meterAddress: String, reevaluate: @Sendable (NewReading) -> NewReading?
    ) async throws -> [StoredReading] {
        let released = state.withLock { s in
            var released: [StoredReading] = []
            for i in s.readings.indices where s.readings[i].meterAddress == meterAddress
                && (s.readings[i].exclusion == .timeInFuture || s.readings[i].exclusion == .timeUnresolved) {
                let old = s.readings[i]
                guard let fresh = reevaluate(old), fresh.exclusion != .timeInFuture, fresh.exclusion != .timeUnresolved,
                      fresh.sequence == old.sequence,
                      fresh.userFacingTime == old.userFacingTime, fresh.meterInstant == old.meterInstant else { continue }
                s.readings[i].instant = fresh.instant
                s.readings[i].exclusion = fresh.exclusion
                released.append(StoredReading(id: Int64(i + 1), reading: s.readings[i]))
            }
            return released
        }
        if !released.isEmpty { feed.emit(.readings) }
        return released
    }

    public func readings(_ address: String, atUserFacingTimes times: [GlucoseDateTime]) async throws -> [StoredReading] {
        let wanted = Set(times.map(\.isoString))
        return state.withLock { s in
            s.readings.enumerated().compactMap { i, r in
                r.meterAddress == address && wanted.contains(r.userFacingTime.isoString)
                    ? StoredReading(id: Int64(i + 1), reading: r) : nil
            }
        }
    }

    public func highestSequence(_ address: String) async throws -> Int? {
        state.withLock { s in
            s.meters[address]?.highestSequence ?? s.readings.filter { $0.meterAddress == address }.map(\.sequence).max()
        }
    }

    public func largestStoredSequence(_ address: String) async throws -> Int? {
        state.withLock { s in s.readings.filter { $0.meterAddress == address }.map(\.sequence).max() }
    }

    public func resetHighestSequence(_ address: String, to sequence: Int?) async throws {
        state.withLock { $0.meters[address]?.highestSequence = sequence }
        feed.emit(.meters)
    }

    public func readingTotals() async throws -> (stored: Int, excluded: Int) {
        state.withLock { s in (s.readings.count, s.readings.filter { $0.exclusion != nil }.count) }
    }

    public func log(_ event: GatewayEvent) async throws {
        state.withLock { $0.events.append(event) }
        feed.emit(.events)
    }

    public func logWithoutSync(_ event: GatewayEvent) async throws {
        try await log(event)
    }

    public func saveMeter(_ meter: MeterInfo, logging event: GatewayEvent) async throws {
        try await saveMeter(meter)
        try await log(event)
    }

    /// Nothing but this object writes to it.
    public func changedByOtherProcesses() async throws -> Bool { false }

    public func changes() -> AsyncStream<StoreChange> { feed.stream() }
}
