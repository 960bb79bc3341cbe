import GatewayCore
import GlucoseProfile
import Synchronization

/// Timing and rules of one download.
public struct DownloadOptions: Sendable, Equatable {
    /// The download ends when no notification or indication arrived for this long (GLS: 30 s).
    public var inactivityTimeout: Duration
    /// Received readings are committed at least this often...
    public var commitInterval: Duration
    /// ...and at least every this many readings.
    public var commitBatchSize: Int
    /// How long to wait for the answer to an Abort Operation before retrying the refused request.
    public var abortResponseTimeout: Duration
    /// Granularity of the timers above.
    public var tick: Duration
    /// Listening on after the RACP response for records still on their way.
    public var lateRecords: LateRecordWait
    public var clinical: ClinicalSettings

    public init(
        inactivityTimeout: Duration = .seconds(30), commitInterval: Duration = .milliseconds(500),
        commitBatchSize: Int = 200, abortResponseTimeout: Duration = .seconds(5), tick: Duration = .milliseconds(50),
        lateRecords: LateRecordWait = LateRecordWait(), clinical: ClinicalSettings = ClinicalSettings()
    ) {
        self.inactivityTimeout = inactivityTimeout
        self.commitInterval = commitInterval
        self.commitBatchSize = max(1, commitBatchSize)
        self.abortResponseTimeout = abortResponseTimeout
        self.tick = tick
        self.lateRecords = lateRecords
        self.clinical = clinical
    }
}

/// How long a download keeps listening after the RACP response that ends a report.
///
/// The Glucose Profile sends the response after the last record, but the stack can reorder them: a BlueZ
/// peripheral batches notifications for 10 ms (ATT Multiple Handle Value Notification) and sends
/// indications at once, and with EATT the two travel on different bearers. So the response can overtake
/// the records it ends. After it the download waits until no value has arrived for `quiet`; when the
/// meter announced more records than arrived, until `patience` after the response; never beyond `limit`.
/// When every announced record is in (and none awaits its context), it stops at once.
public struct LateRecordWait: Sendable, Equatable {
    public var quiet: Duration
    public var patience: Duration
    public var limit: Duration

    public init(quiet: Duration = .milliseconds(300), patience: Duration = .seconds(2), limit: Duration = .seconds(10)) {
        self.quiet = quiet
        self.patience = max(patience, quiet)
        self.limit = max(limit, self.patience)
    }

    /// Whether to stop listening now. `received` counts the records of this report, `expected` is the
    /// meter's count for it (nil when unknown), `lastValueAt` when any value last arrived.
    public func isOver(respondedAt: ContinuousClock.Instant, lastValueAt: ContinuousClock.Instant,
                       now: ContinuousClock.Instant, received: Int, expected: Int?, awaitingContext: Bool) -> Bool {
        if let expected, received >= expected, !awaitingContext { return true }
        let sinceResponse = now - respondedAt
        if sinceResponse >= limit { return true }
        let quietFor = now - max(respondedAt, lastValueAt)
        guard quietFor >= quiet else { return false }
        if let expected, received < expected { return sinceResponse >= patience }
        return true
    }
}

/// Where a running download stands, for a progress bar.
public struct DownloadProgress: Sendable, Equatable {
    /// Records received in this download.
    public var received: Int
    /// What the meter said it would send, when it answered the count request.
    public var total: Int?
    public init(received: Int, total: Int?) {
        self.received = received
        self.total = total
    }
}

public enum DownloadOutcome: Sendable, Equatable, CustomStringConvertible {
    /// The meter ended the report with "success".
    case completed
    /// Nothing new: zero records to report, or "no records found".
    case noRecords
    /// The link dropped; everything committed before stays and the next download resumes after it.
    case interrupted(reason: String)
    /// No notification for the inactivity timeout.
    case timedOut

    public var description: String {
        switch self {
        case .completed: "completed"
        case .noRecords: "no new records"
        case .interrupted(let reason): "interrupted (\(reason))"
        case .timedOut: "timed out"
        }
    }

    public var isComplete: Bool { self == .completed || self == .noRecords }
}

/// The Device Information a meter returned in this session.
public struct MeterIdentity: Sendable, Equatable {
    public var manufacturer: String?
    public var model: String?
    public var serial: String?
    public var firmware: String?
    public init(manufacturer: String? = nil, model: String? = nil, serial: String? = nil, firmware: String? = nil) {
        self.manufacturer = manufacturer
        self.model = model
        self.serial = serial
        self.firmware = firmware
    }
}

/// What one download did.
public struct DownloadReport: Sendable, Equatable {
    public var address: String
    public var outcome: DownloadOutcome
    /// Records received (notifications of 0x2A18 that decoded).
    public var received: Int = 0
    /// Readings the store did not have yet.
    public var stored: Int = 0
    /// Readings the store already had.
    public var duplicates: Int = 0
    /// The meter's answer to the count request, when it gave one.
    public var total: Int?
    /// The meter's sequence counter went back; a full download was done.
    public var counterReset = false
    /// Values that could not be decoded (kept out, logged without health data).
    public var malformed = 0
    /// Contexts whose measurement never arrived in this download or was already committed.
    public var unmatchedContexts = 0
    public var skew: ClockSkew?
    public var features: UInt16?
    public var identity = MeterIdentity()

    public init(address: String, outcome: DownloadOutcome) {
        self.address = address
        self.outcome = outcome
    }
}

/// Why a download failed outright (rather than ending early with what it had committed).
public struct DownloadError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The meter refused or broke the procedure.
        case meter
        /// The store could not commit (locked, full, read-only). Nothing committed is lost.
        case store
    }
    public var kind: Kind
    public var message: String
    /// Records committed before the failure.
    public var stored: Int
    public init(_ kind: Kind, _ message: String, stored: Int = 0) {
        self.kind = kind
        self.message = message
        self.stored = stored
    }
    public var description: String { message }
}

/// The download procedure of one meter session, over a connected `MeterLink` with services resolved.
///
/// 1. Reads Device Information, the Glucose Feature and the meter's clock (Current Time 0x2A2B, else the
///    Date Time 0x2A08 that Roche meters keep inside the glucose service) to measure clock skew.
/// 2. Subscribes to 0x2A18, to 0x2A34 when the meter has it, and to RACP indications, before any RACP write.
/// 3. Asks the number of records from the highest stored sequence + 1 (all of them on the first sync),
///    then reports them. When nothing is newer, it asks for the meter's last record: a sequence below
///    the highest stored means the counter went back, and everything is downloaded again (the store keeps
///    each reading once).
/// 4. Contexts are paired with measurements strictly by sequence number; a measurement never waits for its
///    context beyond the next event from the meter.
/// 5. Readings are committed every `commitBatchSize` records or `commitInterval`, and at the end, so an
///    interrupted download keeps what it committed.
/// 6. Ends on the RACP response ("no records found" is a normal end) or after `inactivityTimeout` without
///    any notification. ATT 0x80 (procedure already in progress) aborts and retries once; ATT 0x81 (CCCD
///    improperly configured) subscribes again and retries once. Records are never deleted on the meter.
/// 7. Stops notifications and disconnects.
public struct MeterDownload: Sendable {
    public var store: any ReadingStore
    public var options: DownloadOptions
    public var logger: Logger
    public var now: @Sendable () -> UnixMillis
    /// The timers' clock (inactivity, commits, waiting for late records).
    public var clock: any SessionClock

    public init(store: any ReadingStore, options: DownloadOptions = DownloadOptions(), logger: Logger,
                now: @escaping @Sendable () -> UnixMillis = SystemClock.now, clock: any SessionClock = ContinuousClock()) {
        self.store = store
        self.options = options
        self.logger = logger
        self.now = now
        self.clock = clock
    }

    /// Runs the download on `link` for `meter` (its row as stored at pairing), then disconnects the link.
    public func run(
        link: any MeterLink, meter: MeterInfo, progress: @escaping @Sendable (DownloadProgress) -> Void = { _ in }
    ) async throws(DownloadError) -> DownloadReport {
        let session = DownloadSession(download: self, link: link, meter: meter, progress: progress)
        return try await session.run()
    }
}

/// How a session stops early, internally.
private enum Stop: Error {
    case disconnected(String)
    case timedOut
    case failed(DownloadError)
}

private enum Input: Sendable {
    /// An RACP indication or the end of the link (records and contexts are taken in by `Intake`).
    case link(MeterLinkEvent)
    case linkEnded
    /// A full batch waits to be committed.
    case batchFull
    case tick
}

private struct PendingRecord: Sendable {
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
private final class Intake: Sendable {
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

/// The state of one running download. Lives inside the caller's task only.
private final class DownloadSession {
    let download: MeterDownload
    let link: any MeterLink
    let meter: MeterInfo
    let progress: @Sendable (DownloadProgress) -> Void
    let logger: Logger
    let clock: any SessionClock

    var report: DownloadReport
    var interpreter: ReadingInterpreter
    let intake: Intake
    var subscribed: [GATTUUID] = []
    var hasContextCharacteristic = false

    var inputs: AsyncStream<Input>.Iterator
    var forwarder: Task<Void, Never>?
    var ticker: Task<Void, Never>?

    init(download: MeterDownload, link: any MeterLink, meter: MeterInfo, progress: @escaping @Sendable (DownloadProgress) -> Void) {
        self.download = download
        self.link = link
        self.meter = meter
        self.progress = progress
        self.logger = download.logger
        self.clock = download.clock
        report = DownloadReport(address: meter.address, outcome: .noRecords)
        interpreter = ReadingInterpreter(
            meterAddress: meter.address, zone: MeterTimeZone(identifier: meter.timeZone), settings: download.options.clinical
        )
        let intake = Intake(batchSize: download.options.commitBatchSize, address: meter.address, logger: download.logger,
                            now: download.now, clock: download.clock, progress: progress)
        self.intake = intake
        let (stream, continuation) = AsyncStream<Input>.makeStream(bufferingPolicy: .unbounded)
        inputs = stream.makeAsyncIterator()
        let events = link.events
        forwarder = Task {
            for await event in events {
                switch event {
                case .value(.glucoseMeasurement, let bytes):
                    if intake.measurement(bytes) { continuation.yield(.batchFull) }
                case .value(.glucoseMeasurementContext, let bytes):
                    intake.context(bytes)
                case .value(.recordAccessControlPoint, _):
                    intake.touch(clearHold: true)
                    continuation.yield(.link(event))
                case .value:
                    intake.touch(clearHold: false)
                case .disconnected:
                    continuation.yield(.link(event))
                }
            }
            continuation.yield(.linkEnded)
        }
        let tick = download.options.tick
        let clock = download.clock
        ticker = Task {
            while !Task.isCancelled {
                do { try await clock.sleep(until: clock.now + tick) } catch { break }
                continuation.yield(.tick)
            }
        }
    }

    deinit {
        forwarder?.cancel()
        ticker?.cancel()
    }

    func run() async throws(DownloadError) -> DownloadReport {
        if interpreter.zone == nil {
            logger.warning("meter \(meter.address): time zone '\(meter.timeZone)' cannot be loaded; reading times stay unresolved")
        }
        var failure: DownloadError?
        do throws(Stop) {
            try await readMeterInformation()
            try await subscribe()
            try await procedure()
            try await flush(final: true)
        } catch {
            switch error {
            case .disconnected(let reason):
                report.outcome = .interrupted(reason: reason)
            case .timedOut:
                report.outcome = .timedOut
                // Best effort: tell the meter to stop a procedure that may still be running.
                try? await link.write(.recordAccessControlPoint, RACPRequest.abort.encoded())
            case .failed(let e):
                failure = e
            }
            if failure?.kind != .store {
                do throws(Stop) { try await flush(final: true) } catch {
                    if case .failed(let e) = error { failure = e }
                }
            }
        }
        await finishLink()
        if failure?.kind != .store {
            // Records taken in after the last commit (after the final response, or while stopping).
            do throws(Stop) { try await flush(final: true) } catch {
                if case .failed(let e) = error { failure = e }
            }
        }
        let taken = intake.snapshot
        report.received = taken.received
        report.malformed += taken.malformed
        if report.unmatchedContexts + taken.orphanContexts.count > 0 {
            report.unmatchedContexts += taken.orphanContexts.count
            logger.warning("meter \(meter.address): \(report.unmatchedContexts) context value(s) without a matching measurement were not kept")
        }
        if var failure {
            failure.stored = report.stored
            // A store that refused a commit (locked, full) would refuse the bookkeeping too.
            if failure.kind != .store {
                await saveBookkeeping()
                await log(.error, code: nil, "download failed: \(failure.message)")
            }
            throw failure
        }
        // A record the meter made after it counted none (caught by the last-record check) is new:
        // the download completed, it did not find nothing.
        if report.outcome == .noRecords, report.stored > 0 { report.outcome = .completed }
        await saveBookkeeping()
        await log(.downloadFinished, code: nil,
                  "\(report.outcome): \(report.received) received, \(report.stored) new, \(report.duplicates) already stored")
        return report
    }

    // MARK: - Steps

    func readMeterInformation() async throws(Stop) {
        if let bytes = try await optionalRead(.glucoseFeature), let features = try? GlucoseFeatures(bytes: bytes) {
            report.features = features.rawValue
        }
        report.identity.manufacturer = try await optionalString(.manufacturerName)
        report.identity.model = try await optionalString(.modelNumber)
        report.identity.serial = try await optionalString(.serialNumber)
        report.identity.firmware = try await optionalString(.firmwareRevision)

        var clockValue: [UInt8]?
        if await link.hasCharacteristic(.currentTime) {
            clockValue = try await optionalRead(.currentTime)
        }
        if clockValue == nil, await link.hasCharacteristic(.dateTime) {
            clockValue = try await optionalRead(.dateTime)
        }
        if let clockValue, let zone = interpreter.zone {
            if let skew = ClockSkew.measure(clockValue: clockValue, zone: zone, gatewayNow: download.now()) {
                report.skew = skew
                interpreter.skew = skew
                if interpreter.correctionSeconds != 0 {
                    logger.notice("meter \(meter.address): clock is off by \(skew.seconds) s; reading times are corrected")
                    await log(.clockSkew, code: skew.seconds, "meter clock off by \(skew.seconds) s; times corrected")
                } else if abs(skew.seconds) > download.options.clinical.clockSkewThresholdSeconds {
                    await log(.clockSkew, code: skew.seconds, "meter clock off by \(skew.seconds) s; correction disabled")
                }
            } else {
                logger.info("meter \(meter.address): meter clock value is not a usable date")
            }
        }
    }

    func subscribe() async throws(Stop) {
        hasContextCharacteristic = await link.hasCharacteristic(.glucoseMeasurementContext)
        try await subscribeRequired(.glucoseMeasurement)
        if hasContextCharacteristic {
            do {
                try await link.subscribe(.glucoseMeasurementContext)
                if !subscribed.contains(.glucoseMeasurementContext) { subscribed.append(.glucoseMeasurementContext) }
            } catch {
                if error.kind == .disconnected { throw .disconnected(error.message) }
                logger.warning("meter \(meter.address): cannot subscribe to measurement context: \(error.message)")
            }
        }
        try await subscribeRequired(.recordAccessControlPoint)
    }

    func subscribeRequired(_ uuid: GATTUUID) async throws(Stop) {
        do {
            try await link.subscribe(uuid)
            if !subscribed.contains(uuid) { subscribed.append(uuid) }
        } catch {
            if error.kind == .disconnected { throw .disconnected(error.message) }
            throw .failed(DownloadError(.meter, "cannot subscribe to \(uuid): \(error.message)"))
        }
    }

    func procedure() async throws(Stop) {
        let highest: Int?
        do {
            highest = try await download.store.highestSequence(meter.address)
        } catch {
            throw .failed(DownloadError(.store, "cannot read the highest stored sequence: \(error)"))
        }
        guard let highest else {
            try await downloadAll()
            return
        }
        if highest < Int(UInt16.max) {
            let from = UInt16(highest + 1)
            let count = try await count(.reportNumberFrom(sequence: from))
            if count != 0 {
                report.total = count
                intake.setTotal(count)
                report.outcome = try await reportRecords(.reportFrom(sequence: from), fallbackToAll: true)
                return
            }
        }
        // Nothing newer than what is stored: check whether the counter went back.
        intake.forgetLastSequence()
        _ = try await reportRecords(.reportRecords(.lastRecord), fallbackToAll: false)
        if let last = intake.snapshot.lastMeasurementSequence, Int(last) < highest {
            report.counterReset = true
            logger.notice("meter \(meter.address): sequence counter went back (last \(last), stored up to \(highest)); downloading everything")
            await log(.counterReset, code: Int(last), "sequence counter went back from \(highest) to \(last); full download")
            try await downloadAll()
        } else {
            report.outcome = .noRecords
        }
    }

    func downloadAll() async throws(Stop) {
        let count = try await count(.reportNumberAll)
        report.total = count
        intake.setTotal(count)
        if count == 0 {
            report.outcome = .noRecords
            return
        }
        report.outcome = try await reportRecords(.reportAll, fallbackToAll: false)
    }

    /// Count request; nil when the meter does not support it.
    func count(_ request: RACPRequest) async throws(Stop) -> Int? {
        try await writeRACP(request)
        while true {
            switch try await nextRACPResponse() {
            case .numberOfRecords(let n):
                return Int(n)
            case .response(let op, let code) where op == .reportNumberOfStoredRecords:
                if code == .noRecordsFound { return 0 }
                logger.info("meter \(meter.address): count request answered \(code); downloading without a total")
                return nil
            case .response(let op, let code):
                logger.debug("meter \(meter.address): ignoring RACP response \(code) to \(op)")
            }
        }
    }

    /// Report request; returns how the procedure ended.
    func reportRecords(_ request: RACPRequest, fallbackToAll: Bool) async throws(Stop) -> DownloadOutcome {
        let receivedBefore = intake.snapshot.received + intake.snapshot.malformed
        let expected: Int? = request.operator == .lastRecord || request.operator == .firstRecord ? 1 : report.total
        try await writeRACP(request)
        while true {
            switch try await nextRACPResponse() {
            case .numberOfRecords:
                continue
            case .response(let op, let code) where op == .reportStoredRecords:
                if code == .success {
                    try await waitForLateRecords(receivedBefore: receivedBefore, expected: expected)
                    return .completed
                }
                if code == .noRecordsFound { return .noRecords }
                let refused: Set<RACPResponseCode> = [.opCodeNotSupported, .operatorNotSupported, .operandNotSupported, .invalidOperator, .invalidOperand]
                if refused.contains(code), fallbackToAll {
                    logger.info("meter \(meter.address): filtered report refused (\(code)); downloading everything")
                    return try await reportRecords(.reportAll, fallbackToAll: false)
                }
                if refused.contains(code), request.operator == .lastRecord {
                    // No way to ask for the last record: no counter check.
                    return .noRecords
                }
                throw .failed(DownloadError(.meter, "meter ended the report with \(code)"))
            case .response(let op, let code):
                logger.debug("meter \(meter.address): ignoring RACP response \(code) to \(op)")
            }
        }
    }

    /// Writes an RACP request, handling ATT 0x80/0xFE (abort, retry once), 0x81/0xFD (subscribe again,
    /// retry once) and transient stack errors.
    func writeRACP(_ request: RACPRequest) async throws(Stop) {
        var abortedOnce = false
        var resubscribedOnce = false
        var transientRetries = 0
        while true {
            do {
                try await link.write(.recordAccessControlPoint, request.encoded())
                intake.touch(clearHold: false)
                return
            } catch {
                if error.kind == .disconnected { throw .disconnected(error.message) }
                switch error.attError {
                case 0x80, 0xFE:
                    guard !abortedOnce else { break }
                    abortedOnce = true
                    logger.info("meter \(meter.address): a procedure is already in progress; aborting it and retrying")
                    try await abortProcedure()
                    continue
                case 0x81, 0xFD:
                    guard !resubscribedOnce else { break }
                    resubscribedOnce = true
                    logger.info("meter \(meter.address): meter reports notifications not configured; subscribing again")
                    for uuid in subscribed {
                        await link.unsubscribe(uuid)
                    }
                    subscribed.removeAll()
                    try await subscribe()
                    continue
                default:
                    if error.kind == .transient, transientRetries < 3 {
                        transientRetries += 1
                        try? await Task.sleep(for: .milliseconds(100 * transientRetries))
                        continue
                    }
                }
                let code = error.attError.map { " (ATT error 0x" + String($0, radix: 16) + ")" } ?? ""
                throw .failed(DownloadError(.meter, "RACP request \(request.opCode) refused: \(error.message)\(code)"))
            }
        }
    }

    /// Sends Abort Operation and waits (bounded) for its response.
    func abortProcedure() async throws(Stop) {
        do {
            try await link.write(.recordAccessControlPoint, RACPRequest.abort.encoded())
        } catch {
            if error.kind == .disconnected { throw .disconnected(error.message) }
            logger.info("meter \(meter.address): abort refused: \(error.message)")
            return
        }
        let deadline = clock.now.advanced(by: download.options.abortResponseTimeout)
        while clock.now < deadline {
            guard let response = try await nextRACPResponse(deadline: deadline) else { return }
            if case .response(let op, _) = response, op == .abortOperation { return }
        }
    }

    /// After the response to a report: takes in records still on their way (see `LateRecordWait`).
    func waitForLateRecords(receivedBefore: Int, expected: Int?) async throws(Stop) {
        let wait = download.options.lateRecords
        let respondedAt = clock.now
        func state() -> (received: Int, lastValueAt: ContinuousClock.Instant, awaitingContext: Bool) {
            let s = intake.snapshot
            return (s.received + s.malformed - receivedBefore, s.lastActivity, s.holdLast)
        }
        var now = state()
        if wait.isOver(respondedAt: respondedAt, lastValueAt: now.lastValueAt, now: respondedAt, received: now.received,
                       expected: expected, awaitingContext: now.awaitingContext) { return }
        if let expected, now.received < expected {
            logger.info("meter \(meter.address): the report ended before \(expected - now.received) of its \(expected) records arrived; waiting for them")
        } else {
            logger.debug("meter \(meter.address): report ended; listening for late values")
        }
        while true {
            guard let input = await inputs.next() else {
                throw .disconnected(Task.isCancelled ? "the gateway is stopping" : "link closed")
            }
            switch input {
            case .tick:
                now = state()
                if wait.isOver(respondedAt: respondedAt, lastValueAt: now.lastValueAt, now: clock.now, received: now.received,
                               expected: expected, awaitingContext: now.awaitingContext) { break }
                try await onTick()
                continue
            case .batchFull:
                try await flush(final: false)
            case .linkEnded, .link(.disconnected):
                now = state()
                if let expected, now.received < expected {
                    let reason: String
                    if case .link(.disconnected(let r)) = input { reason = r } else { reason = "link closed" }
                    throw .disconnected(reason)
                }
                return
            case .link(.value(let uuid, let bytes)):
                logger.debug("meter \(meter.address): RACP indication \(bytes.count) bytes on \(uuid) after the report ended; ignored")
            }
            now = state()
            if wait.isOver(respondedAt: respondedAt, lastValueAt: now.lastValueAt, now: clock.now, received: now.received,
                           expected: expected, awaitingContext: now.awaitingContext) {
                if let expected, now.received < expected {
                    logger.warning("meter \(meter.address): \(expected - now.received) of \(expected) announced records did not arrive; the next sync asks again")
                }
                return
            }
        }
    }

    // MARK: - Events

    /// Processes events until an RACP indication arrives; records and contexts are handled on the way.
    func nextRACPResponse() async throws(Stop) -> RACPResponse {
        while true {
            if let response = try await nextRACPResponse(deadline: nil) { return response }
        }
    }

    /// As above; nil when `deadline` passes first.
    func nextRACPResponse(deadline: ContinuousClock.Instant?) async throws(Stop) -> RACPResponse? {
        while true {
            guard let input = await inputs.next() else {
                throw .disconnected(Task.isCancelled ? "the gateway is stopping" : "link closed")
            }
            switch input {
            case .tick:
                try await onTick()
                if let deadline, clock.now >= deadline { return nil }
            case .linkEnded:
                throw .disconnected("link closed")
            case .link(.disconnected(let reason)):
                throw .disconnected(reason)
            case .batchFull:
                try await flush(final: false)
            case .link(.value(let uuid, let bytes)):
                guard uuid == .recordAccessControlPoint else { continue }
                do {
                    return try RACPResponse(bytes: bytes)
                } catch {
                    report.malformed += 1
                    logger.warning("meter \(meter.address): malformed RACP indication: \(error)")
                }
            }
        }
    }

    func onTick() async throws(Stop) {
        let now = clock.now
        if now - intake.snapshot.lastActivity >= download.options.inactivityTimeout {
            logger.warning("meter \(meter.address): no notification for \(download.options.inactivityTimeout); ending the download")
            throw .timedOut
        }
        if let oldest = intake.oldestCommittable, now - oldest + download.options.tick > download.options.commitInterval {
            try await flush(final: false)
        }
    }

    /// Commits the records taken in, in batches of at most `commitBatchSize`; unless `final`, a trailing
    /// record that may still get its context stays.
    func flush(final: Bool) async throws(Stop) {
        while true {
            let records = intake.take(final: final, limit: download.options.commitBatchSize)
            guard !records.isEmpty else { return }
            let batch = records.map {
                interpreter.reading($0.decoded, context: $0.context, rawContext: $0.rawContext, receivedAt: $0.receivedAt)
            }
            do {
                let new = try await download.store.insert(batch)
                report.stored += new
                report.duplicates += batch.count - new
            } catch {
                throw .failed(DownloadError(.store, "cannot store readings: \(error)"))
            }
        }
    }

    // MARK: - End

    func finishLink() async {
        forwarder?.cancel()
        ticker?.cancel()
        for uuid in subscribed.reversed() {
            await link.unsubscribe(uuid)
        }
        subscribed.removeAll()
        await link.disconnect()
    }

    func saveBookkeeping() async {
        do {
            // A meter unpaired meanwhile has no row to update; saving would pair it again.
            guard var row = try await download.store.meter(meter.address) else { return }
            let now = download.now()
            row.lastSeen = now
            if report.outcome.isComplete { row.lastSync = now }
            if let skew = report.skew { row.lastClockSkewSeconds = skew.seconds }
            if let features = report.features { row.features = Int(features) }
            if let v = report.identity.manufacturer { row.manufacturer = v }
            if let v = report.identity.model { row.model = v }
            if let v = report.identity.serial { row.serial = v }
            if let v = report.identity.firmware { row.firmware = v }
            try await download.store.saveMeter(row)
            // The meter sends oldest first, so its last record carries its current counter. Below the highest
            // sequence of this download, the counter restarted at some point: later downloads resume from the
            // new counter, not the old one (SaveMeter and insert only ever raise it).
            let taken = intake.snapshot
            // The same holds after a full download that followed a detected counter reset (the meter's memory
            // now holds only the new counter's records).
            let wentBack = report.counterReset || taken.highestSequence.map { h in taken.lastMeasurementSequence.map { Int($0) < h } ?? false } ?? false
            if report.outcome == .completed, wentBack, let last = taken.lastMeasurementSequence {
                try await download.store.resetHighestSequence(meter.address, to: Int(last))
            }
        } catch {
            logger.warning("meter \(meter.address): cannot save sync bookkeeping: \(error)")
        }
    }

    func log(_ kind: EventKind, code: Int?, _ message: String) async {
        do {
            try await download.store.log(GatewayEvent(at: download.now(), kind: kind, meterAddress: meter.address, code: code, message: message))
        } catch {
            logger.debug("cannot write event log: \(error)")
        }
    }

    func optionalRead(_ uuid: GATTUUID) async throws(Stop) -> [UInt8]? {
        guard await link.hasCharacteristic(uuid) else { return nil }
        do {
            return try await link.read(uuid)
        } catch {
            if error.kind == .disconnected { throw .disconnected(error.message) }
            logger.info("meter \(meter.address): cannot read \(uuid): \(error.message)")
            return nil
        }
    }

    func optionalString(_ uuid: GATTUUID) async throws(Stop) -> String? {
        guard let bytes = try await optionalRead(uuid) else { return nil }
        var trimmed = bytes
        while let last = trimmed.last, last == 0 { trimmed.removeLast() }
        let text = String(decoding: trimmed, as: UTF8.self)
        return text.isEmpty ? nil : text
    }
}
