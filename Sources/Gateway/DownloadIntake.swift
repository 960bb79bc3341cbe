import GatewayCore
import GlucoseProfile
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
/// session's task wakes only for RACP indications, full batches and its timer: one task switch per
/// notification instead of two.
final class DownloadIntake: Sendable {
    struct State {
        var pending: [PendingRecord] = []
        /// The last pending record is the latest event and may still get its context.
        var holdLast = false
        var orphanContexts: [UInt16: (GlucoseMeasurementContext, [UInt8])] = [:]
        var lastActivity: ContinuousClock.Instant
        var lastMeasurementSequence: UInt16?
        var highestSequence: Int?
        var received = 0
        var malformed = 0
        var total: Int?
        var batchSignalled = false

        var committable: Int { holdLast ? pending.count - 1 : pending.count }
    }

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
    func touch(clearHold: Bool) {
        let at = clock.now
        state.withLock {
            $0.lastActivity = at
            if clearHold { $0.holdLast = false }
        }
    }

    /// Takes in a 0x2A18 value; true when a full batch now waits (signalled once per batch).
    func measurement(_ bytes: [UInt8]) -> Bool {
        let arrived = clock.now
        guard let decoded = DecodedMeasurement(bytes) else {
            state.withLock {
                $0.lastActivity = arrived
                $0.holdLast = false
                $0.malformed += 1
            }
            let seq = bytes.count >= 3 ? " (sequence \(Int(bytes[1]) | Int(bytes[2]) << 8))" : ""
            logger.warning("meter \(address): undecodable glucose measurement\(seq) skipped")
            return false
        }
        let seq = decoded.measurement.sequenceNumber
        let receivedAt = now()
        let update = state.withLock { s -> (DownloadProgress, Bool)? in
            s.lastActivity = arrived
            s.holdLast = false
            // The same notification twice in a row (seen on real meters) is one record.
            if let last = s.pending.last, last.decoded.raw == bytes { return nil }
            var record = PendingRecord(decoded: decoded, context: nil, rawContext: nil, receivedAt: receivedAt, arrived: arrived)
            if let (context, raw) = s.orphanContexts.removeValue(forKey: seq) {
                record.context = context
                record.rawContext = raw
            }
            s.pending.append(record)
            s.holdLast = record.awaitingContext
            s.lastMeasurementSequence = seq
            s.received += 1
            s.highestSequence = max(s.highestSequence ?? Int(seq), Int(seq))
            var signal = false
            if s.committable >= batchSize, !s.batchSignalled {
                s.batchSignalled = true
                signal = true
            }
            return (DownloadProgress(received: s.received, total: s.total), signal)
        }
        guard let (p, signal) = update else { return false }
        progress(p)
        return signal
    }

    /// Takes in a 0x2A34 value: attached to its pending measurement by sequence, or kept for a
    /// measurement still to come.
    func context(_ bytes: [UInt8]) {
        let arrived = clock.now
        guard let context = try? GlucoseMeasurementContext(bytes: bytes) else {
            state.withLock {
                $0.lastActivity = arrived
                $0.holdLast = false
                $0.malformed += 1
            }
            logger.warning("meter \(address): undecodable measurement context skipped")
            return
        }
        let seq = context.sequenceNumber
        state.withLock { s in
            s.lastActivity = arrived
            s.holdLast = false
            if let index = s.pending.lastIndex(where: { $0.decoded.measurement.sequenceNumber == seq }) {
                if s.pending[index].context == nil {
                    s.pending[index].context = context
                    s.pending[index].rawContext = bytes
                }
                return
            }
            // Context before its measurement, or for one already committed: kept by sequence in case the
            // measurement follows; counted as unmatched at the end otherwise.
            s.orphanContexts[seq] = (context, bytes)
        }
    }

    /// Up to `limit` records ready to be committed, oldest first; unless `final`, a trailing record that
    /// may still get its context stays.
    func take(final: Bool, limit: Int) -> [PendingRecord] {
        state.withLock { s in
            let available = final ? s.pending.count : s.committable
            let count = min(max(0, available), limit)
            let taken = Array(s.pending.prefix(count))
            s.pending.removeFirst(count)
            if s.committable < batchSize { s.batchSignalled = false }
            return taken
        }
    }

    /// When the oldest record ready to be committed arrived; nil when none is ready.
    var oldestCommittable: ContinuousClock.Instant? {
        state.withLock { s in s.committable > 0 ? s.pending.first?.arrived : nil }
    }

    var snapshot: State { state.withLock { $0 } }

    func setTotal(_ total: Int?) { state.withLock { $0.total = total } }
    func forgetLastSequence() { state.withLock { $0.lastMeasurementSequence = nil } }
}
