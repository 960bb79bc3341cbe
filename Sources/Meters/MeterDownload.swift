import GatewayCore
import GlucoseProfile
import Support
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
    /// Listening on after the RACP response for records still on their way.
    public var lateRecords: LateRecordWait
    public var clinical: ClinicalSettings
    /// `[gateway] set_meter_clock`: write the gateway's time to a meter whose clock is off by more than the
    /// skew threshold (see `MeterClockWriter`).
    public var setMeterClock: Bool
    /// The most records a download holds uncommitted (a meter that numbers newest first has its report
    /// committed only at its end): twice the 65,536 numbers a meter has, for notifications sent twice.
    public var maxHeldRecords = 2 * 65_536

    public init(
        inactivityTimeout: Duration = .seconds(30), commitInterval: Duration = .milliseconds(500),
        commitBatchSize: Int = 1000, abortResponseTimeout: Duration = .seconds(5),
        lateRecords: LateRecordWait = LateRecordWait(), clinical: ClinicalSettings = ClinicalSettings(),
        setMeterClock: Bool = false
    ) {
        self.setMeterClock = setMeterClock
        self.inactivityTimeout = inactivityTimeout
        self.commitInterval = commitInterval
        self.commitBatchSize = max(1, commitBatchSize)
        self.abortResponseTimeout = abortResponseTimeout
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

    /// When `isOver` turns true if no value arrives before then (and it is not over already).
    public func decisionTime(respondedAt: ContinuousClock.Instant, lastValueAt: ContinuousClock.Instant,
                             received: Int, expected: Int?) -> ContinuousClock.Instant {
        let quietEnd = max(respondedAt, lastValueAt) + quiet
        var at = quietEnd
        if let expected, received < expected { at = max(quietEnd, respondedAt + patience) }
        return min(at, respondedAt + limit)
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
    /// The strings as sent, for those that cleaning changed (see `MeterInfo.rawIdentity`).
    public var raw: [String: [UInt8]] = [:]
    /// Whether any Device Information string was read in this session.
    public var wasRead: Bool { manufacturer != nil || model != nil || serial != nil || firmware != nil || !raw.isEmpty }
    public init(manufacturer: String? = nil, model: String? = nil, serial: String? = nil, firmware: String? = nil) {
        self.manufacturer = manufacturer
        self.model = model
        self.serial = serial
        self.firmware = firmware
    }

    /// The `MeterInfo.rawIdentity` key of a Device Information characteristic.
    static func field(_ uuid: GATTUUID) -> String? {
        switch uuid {
        case .manufacturerName: "manufacturer"
        case .modelNumber: "model"
        case .serialNumber: "serial"
        case .firmwareRevision: "firmware"
        default: nil
        }
    }
}

extension MeterInfo {
    /// This meter with the identity read in a session (strings not read stay as stored).
    mutating func apply(_ identity: MeterIdentity) {
        if let v = identity.manufacturer { manufacturer = v }
        if let v = identity.model { model = v }
        if let v = identity.serial { serial = v }
        if let v = identity.firmware { firmware = v }
        if identity.wasRead { rawIdentity = identity.raw }
    }

    /// What the gateway does differently for this meter (`MeterHandling`).
    public var handling: MeterHandling { MeterHandling(for: self) }
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
    /// Records with the number and user-facing time of a stored reading but other bytes: kept apart,
    /// never uploaded (`ReadingStore.insertReadings`).
    public var conflicts: Int = 0
    /// The meter's answer to the count request, when it gave one.
    public var total: Int?
    /// The meter's sequence counter went back; a full download was done.
    public var counterReset = false
    /// Values that could not be decoded (kept out, logged without health data).
    public var malformed = 0
    /// Distinct 0x2A18 and 0x2A34 values of this download that could not be decoded: kept raw in the store
    /// with the reason (`ReadingStore.keepUndecodable`), never counted as readings.
    public var undecodable = 0
    /// Of `undecodable`, those the store did not have yet (a re-download delivers the same bytes again).
    public var undecodableKept = 0
    /// Contexts whose measurement never arrived in this download or was already committed.
    public var unmatchedContexts = 0
    public var skew: ClockSkew?
    /// The skew is beyond `clock_skew_threshold_s` (what the sync summary and the event log call off).
    public var skewBeyondThreshold = false
    /// The meter's clock was set during this download (`set_meter_clock`).
    public var clockSet: MeterClockWriter.Written?
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
        let session = Run(download: self, link: link, meter: meter, progress: progress)
        return try await session.run()
    }
}
