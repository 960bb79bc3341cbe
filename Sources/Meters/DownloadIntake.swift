import GatewayCore
import GlucoseProfile
import Support
import Synchronization

struct PendingRecord: Sendable {
    var decoded: DecodedMeasurement
    var context: GlucoseMeasurementContext?
    var rawContext: [UInt8]?
    var receivedAt: UnixMillis
    var arrived: ContinuousClock.Instant
    var awaitingContext: Bool { decoded.measurement.contextFollows && context == nil }
}

/// Records and contexts as the link delivers them, paired by sequence, waiting to be committed.
///
/// The task that receives the link's events takes records and contexts in here directly, so the
/// session's task wakes only for what it must act on (see `Wake`), RACP indications and its deadlines:
/// no task switch for most notifications.
final class DownloadIntake: Sendable {
    /// Why the session must look again, returned by each method that takes something in.
    struct Wake: OptionSet, Sendable {
        var rawValue: UInt8
        /// A full batch waits to be committed (once per batch).
        static let batchFull = Wake(rawValue: 1 << 0)
        /// A record can now be committed where none could: the commit interval starts (once until
        /// everything committable is taken).
        static let recordsWaiting = Wake(rawValue: 1 << 1)
        /// A value arrived while the session listens for late records (`wakeOnEveryValue`).
        static let value = Wake(rawValue: 1 << 2)
    }

    struct State {
        var pending: [PendingRecord] = []
        /// Records whose context is still to come stay uncommitted (see `committable`), until the report's
        /// end or an undecodable value clears this.
        var holding = false
        /// How many pending records await their context.
        var awaiting = 0
        var orphanContexts: [UInt16: (GlucoseMeasurementContext, [UInt8])] = [:]
        private(set) var lastActivity: ContinuousClock.Instant
        /// How many times the meter was heard from (see `answered(since:)`).
        private(set) var activityCount = 0
        var lastMeasurementSequence: UInt16?
        var highestSequence: Int?
        var received = 0
        var malformed = 0
        /// Undecodable 0x2A18 and 0x2A34 values not yet kept in the store, each distinct one once.
        var undecodable: [UndecodableValue] = []
        /// How many distinct undecodable values this download took in (kept ones included).
        var undecodableCount = 0
        /// (characteristic, bytes) of every undecodable value taken in, so a repeated notification is one.
        var undecodableSeen: Set<UndecodableKey> = []
        var total: Int?
        var batchSignalled = false
        var waitingSignalled = false
        var wakeOnEveryValue = false

        /// How many records, oldest first, may be committed: those before the oldest record that still
        /// awaits its context among the newest `contextLag`. Over the bus a context comes right behind its
        /// measurement, so only the last record can wait for one; through two `AcquireNotify` sockets
        /// the context can also come after a few later measurements, or before its own.
        var committable: Int {
            guard holding, awaiting > 0 else { return pending.count }
            let start = max(0, pending.count - DownloadIntake.contextLag)
            return pending[start...].firstIndex(where: \.awaitingContext) ?? pending.count
        }

        /// Whether records wait for their contexts.
        var holdsRecords: Bool { committable < pending.count }

        init(lastActivity: ContinuousClock.Instant) { self.lastActivity = lastActivity }

        /// The meter was heard from at `at`.
        mutating func heard(at: ContinuousClock.Instant) {
            lastActivity = at
            activityCount &+= 1
        }

        /// Keeps an undecodable value for the store unless the same one was already taken in.
        mutating func undecodable(_ value: UndecodableValue) {
            guard undecodableSeen.insert(UndecodableKey(characteristic: value.characteristic, raw: value.raw)).inserted else { return }
            undecodable.append(value)
            undecodableCount += 1
        }

        /// After taking something in: what the session must be told.
        mutating func wakes(batchSize: Int) -> Wake {
            var wake: Wake = []
            if committable >= batchSize, !batchSignalled {
                batchSignalled = true
                wake.insert(.batchFull)
            }
            if committable > 0, !waitingSignalled {
                waitingSignalled = true
                wake.insert(.recordsWaiting)
            }
            if wakeOnEveryValue { wake.insert(.value) }
            return wake
        }
    }

    struct UndecodableKey: Hashable {
        var characteristic: UndecodableValue.Characteristic
        var raw: [UInt8]
    }

    /// How many later measurements a record still waits behind for its context (see `State.committable`);
    /// one that waited longer is committed without it (a context that comes later is counted unmatched).
    static let contextLag = 64

    let state: Mutex<State>
    let batchSize: Int
    let address: String
    let logger: Logger
    let now: @Sendable () -> UnixMillis
    let progress: @Sendable (DownloadProgress) -> Void
    let clock: any SessionClock

    init(batchSize: Int, address: String, logger: Logger, now: @escaping @Sendable () -> UnixMillis,
         clock: any SessionClock, progress: @escaping @Sendable (DownloadProgress) -> Void) {
        state = Mutex(State(lastActivity: clock.now))
        self.clock = clock
        self.batchSize = batchSize
        self.address = address
        self.logger = logger
        self.now = now
        self.progress = progress
    }

    /// Something arrived from the meter or the meter answered a request.
    @discardableResult
    func touch(clearHold: Bool) -> Wake {
        let at = clock.now
        return state.withLock {
            $0.heard(at: at)
            if clearHold { $0.holding = false }
            return $0.wakes(batchSize: batchSize)
        }
    }

    /// A mark of what has been heard from the meter so far, taken before a request is sent.
    var activityMark: Int { state.withLock { $0.activityCount } }

    /// The meter answered a request sent at `mark`. Its answer counts as activity only when nothing
    /// else was heard since: a value that arrived meanwhile came after the answer (a meter acknowledges a
    /// write before it sends what the write asked for), so the answer must not move the last activity
    /// past it, however late the session gets to look at the answer.
    func answered(since mark: Int) {
        let at = clock.now
        state.withLock { if $0.activityCount == mark { $0.heard(at: at) } }
    }

    /// Takes in a 0x2A18 value.
    func measurement(_ bytes: [UInt8]) -> Wake {
        let arrived = clock.now
        let decoded: DecodedMeasurement
        do {
            decoded = try DecodedMeasurement(decoding: bytes)
        } catch {
            return undecodable(.glucoseMeasurement, bytes, reason: error, arrived: arrived)
        }
        let seq = decoded.measurement.sequenceNumber
        let receivedAt = now()
        let update = state.withLock { s -> (DownloadProgress, Wake)? in
            s.heard(at: arrived)
            // The same notification twice in a row (seen on real meters) is one record.
            if let last = s.pending.last, last.decoded.raw == bytes { return nil }
            var record = PendingRecord(decoded: decoded, context: nil, rawContext: nil, receivedAt: receivedAt, arrived: arrived)
            if let (context, raw) = s.orphanContexts.removeValue(forKey: seq) {
                record.context = context
                record.rawContext = raw
            }
            s.pending.append(record)
            s.holding = true
            if record.awaitingContext { s.awaiting += 1 }
            s.lastMeasurementSequence = seq
            s.received += 1
            s.highestSequence = max(s.highestSequence ?? Int(seq), Int(seq))
            return (DownloadProgress(received: s.received, total: s.total), s.wakes(batchSize: batchSize))
        }
        guard let (p, wake) = update else { return [] }
        progress(p)
        return wake
    }

    /// Takes in a 0x2A34 value: attached to its pending measurement by sequence, or kept for a
    /// measurement still to come.
    func context(_ bytes: [UInt8]) -> Wake {
        let arrived = clock.now
        let context: GlucoseMeasurementContext
        do {
            context = try GlucoseMeasurementContext(bytes: bytes)
        } catch {
            return undecodable(.glucoseMeasurementContext, bytes, reason: error, arrived: arrived)
        }
        let seq = context.sequenceNumber
        return state.withLock { s in
            s.heard(at: arrived)
            if let index = s.pending.lastIndex(where: { $0.decoded.measurement.sequenceNumber == seq }) {
                if s.pending[index].context == nil {
                    if s.pending[index].awaitingContext { s.awaiting -= 1 }
                    s.pending[index].context = context
                    s.pending[index].rawContext = bytes
                }
            } else {
                // Context before its measurement, or for one already committed: kept by sequence in case the
                // measurement follows; counted as unmatched at the end otherwise.
                s.orphanContexts[seq] = (context, bytes)
            }
            return s.wakes(batchSize: batchSize)
        }
    }

    /// A value the codec refused: counted as malformed, kept raw with the codec's reason for the store
    /// (`takeUndecodable`), never a record. It ends the wait of records for their contexts, as the report's
    /// end does: the meter is past them.
    private func undecodable(_ characteristic: UndecodableValue.Characteristic, _ bytes: [UInt8], reason: GlucoseDecodingError,
                             arrived: ContinuousClock.Instant) -> Wake {
        let value = UndecodableValue(meterAddress: address, characteristic: characteristic, raw: bytes,
                                     reason: reason.description, receivedAt: now())
        let wake = state.withLock {
            $0.heard(at: arrived)
            $0.holding = false
            $0.malformed += 1
            $0.undecodable(value)
            return $0.wakes(batchSize: batchSize)
        }
        let what = characteristic == .glucoseMeasurement ? "glucose measurement" : "measurement context"
        let seq = value.sequence.map { " (sequence \($0))" } ?? ""
        logger.warning("meter \(address): undecodable \(what)\(seq): \(reason); its bytes are kept, not uploaded")
        return wake
    }

    /// The undecodable values taken in since the last call, in arrival order.
    func takeUndecodable() -> [UndecodableValue] {
        state.withLock { s in
            defer { s.undecodable = [] }
            return s.undecodable
        }
    }

    /// Up to `limit` records ready to be committed, oldest first; unless `final`, a trailing record that
    /// may still get its context stays.
    func take(final: Bool, limit: Int) -> [PendingRecord] {
        state.withLock { s in
            let available = final ? s.pending.count : s.committable
            let count = min(max(0, available), limit)
            let taken: [PendingRecord]
            if count == s.pending.count {
                // All of them (the usual case): hand the array over. A copy of its prefix would share its
                // storage, and removing that prefix would then allocate a second array as large.
                taken = s.pending
                s.pending = []
            } else {
                taken = Array(s.pending.prefix(count))
                s.pending.removeFirst(count)
            }
            if s.awaiting > 0 { s.awaiting -= taken.reduce(0) { $0 + ($1.awaitingContext ? 1 : 0) } }
            if s.committable < batchSize { s.batchSignalled = false }
            if s.committable <= 0 { s.waitingSignalled = false }
            return taken
        }
    }

    /// When anything last arrived, and when the oldest record ready to be committed arrived (nil: none is).
    var timing: (lastActivity: ContinuousClock.Instant, oldestCommittable: ContinuousClock.Instant?) {
        state.withLock { s in (s.lastActivity, s.committable > 0 ? s.pending.first?.arrived : nil) }
    }

    var snapshot: State { state.withLock { $0 } }

    func setTotal(_ total: Int?) { state.withLock { $0.total = total } }
    /// While set, every value taken in wakes the session (listening for late records).
    func setWakeOnEveryValue(_ on: Bool) { state.withLock { $0.wakeOnEveryValue = on } }
    func forgetLastSequence() { state.withLock { $0.lastMeasurementSequence = nil } }
}
