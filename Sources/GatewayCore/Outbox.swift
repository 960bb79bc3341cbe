/// A destination readings are uploaded to, by its config name: `nightscout` or `fhir`.
public struct DestinationName: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let nightscout = DestinationName(rawValue: "nightscout")
    public static let fhir = DestinationName(rawValue: "fhir")
    public var description: String { rawValue }
}

/// Builds the frozen request-body element for one reading, at the moment the reading is committed.
/// The store calls every enabled builder inside the transaction that inserts the reading, and keeps the
/// bytes: retries always send exactly these bytes, whatever changes later (clock correction, time zone).
public protocol OutboxBodyBuilder: Sendable {
    var destination: DestinationName { get }
    /// The body element (UTF-8 JSON) and its idempotency key, or nil when this reading is not uploaded
    /// to this destination (an excluded reading, a ketone reading to Nightscout, ...).
    func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement?
}

public struct OutboxElement: Sendable, Equatable {
    /// Deterministic idempotency key (UUIDv5 of meter identity, sequence and meter time), lower-case.
    public var key: String
    /// The frozen JSON element.
    public var body: [UInt8]
    public init(key: String, body: [UInt8]) {
        self.key = key
        self.body = body
    }
}

public enum OutboxState: String, Sendable, Codable, CaseIterable {
    case pending
    case inFlight = "in_flight"
    case acknowledged
    case quarantined
}

/// One queued upload of one reading to one destination.
public struct OutboxItem: Sendable, Equatable {
    public var id: Int64
    public var destination: DestinationName
    public var readingID: Int64
    public var key: String
    public var body: [UInt8]
    public var state: OutboxState
    public var attempts: Int
    public var createdAt: UnixMillis
    public init(id: Int64, destination: DestinationName, readingID: Int64, key: String, body: [UInt8],
                state: OutboxState, attempts: Int, createdAt: UnixMillis) {
        self.id = id
        self.destination = destination
        self.readingID = readingID
        self.key = key
        self.body = body
        self.state = state
        self.attempts = attempts
        self.createdAt = createdAt
    }
}

public struct OutboxCounts: Sendable, Equatable {
    public var pending: Int
    public var inFlight: Int
    public var acknowledged: Int
    public var quarantined: Int
    /// Creation time of the oldest row not yet acknowledged (pending or in flight).
    public var oldestUnsent: UnixMillis?
    public init(pending: Int = 0, inFlight: Int = 0, acknowledged: Int = 0, quarantined: Int = 0, oldestUnsent: UnixMillis? = nil) {
        self.pending = pending
        self.inFlight = inFlight
        self.acknowledged = acknowledged
        self.quarantined = quarantined
        self.oldestUnsent = oldestUnsent
    }
}

/// The upload queue as the sync engine sees it. Implemented by SQLiteStore over the same database
/// as the readings; nothing is ever deleted automatically.
public protocol OutboxStore: Sendable {
    /// Oldest pending rows of one destination, at most `limit`, marked in flight in the same transaction.
    func claimPending(_ destination: DestinationName, limit: Int) async throws -> [OutboxItem]
    /// The server confirmed these rows: acknowledged, with the time. With `synced` false the commit does not
    /// wait for the disk: a crash of the process keeps it, a power cut before the next synced commit may
    /// lose it (the rows are then sent again, and the server keeps one copy by their identifier). A caller
    /// that passes false makes a synced commit (``saveDestinationState(_:)``) before its session ends.
    func acknowledge(_ ids: [Int64], at: UnixMillis, synced: Bool) async throws
    /// Back to pending (ambiguous outcome, network down); counts an attempt.
    func release(_ ids: [Int64]) async throws
    /// Kept aside with the server's answer (error_bypass); re-sent only by `redrive`.
    func quarantine(_ id: Int64, answer: String) async throws
    /// Quarantined rows of a destination back to pending; returns how many.
    func redrive(_ destination: DestinationName) async throws -> Int
    /// In-flight rows return to pending (at start-up: a crash may have left some).
    func requeueInFlight() async throws -> Int
    func counts(_ destination: DestinationName) async throws -> OutboxCounts
    /// As `counts` without the acknowledged rows (`acknowledged` is 0): what a sync, an upload and the
    /// upload service need after every session, at a cost that does not grow with the history.
    func unsentCounts(_ destination: DestinationName) async throws -> OutboxCounts
    /// Records per-destination state (last error code/message, last success) for `status`.
    func saveDestinationState(_ state: DestinationState) async throws
    func destinationState(_ destination: DestinationName) async throws -> DestinationState?
}

extension OutboxStore {
    /// Acknowledges in a commit that is on the disk when this returns.
    public func acknowledge(_ ids: [Int64], at: UnixMillis) async throws {
        try await acknowledge(ids, at: at, synced: true)
    }
}

/// What `status` shows of a destination, persisted so a one-shot command and the daemon agree.
/// Where one destination's uploads stand, as stored and shown. An open set of names, so that a state
/// written by another version of the gateway reads back as itself.
public struct UploadState: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The last attempt worked, or nothing failed yet.
    public static let ok = UploadState(rawValue: "ok")
    /// A failure within a session: the next attempt follows a jittered backoff.
    public static let retrying = UploadState(rawValue: "retrying")
    /// Recovery mode: the network is down, and the session waits for it without spending attempts.
    public static let recovering = UploadState(rawValue: "recovering")
    /// The session's attempts ran out: the next session follows the long-term backoff.
    public static let backoff = UploadState(rawValue: "backoff")
    /// Credentials refused or the URL wrong: nothing is sent until that is fixed.
    public static let paused = UploadState(rawValue: "paused")
    /// A reading the server refuses blocks this destination (error_bypass off).
    public static let blocked = UploadState(rawValue: "blocked")
}

public struct DestinationState: Sendable, Equatable, Codable {
    public var destination: DestinationName
    public var state: UploadState
    /// 1001 NETWORK_NOT_CONNECTED, 1002 NETWORK_TIMEOUT, or an HTTP status; nil after success.
    public var lastErrorCode: Int?
    public var lastErrorMessage: String?
    public var lastErrorAt: UnixMillis?
    public var lastSuccessAt: UnixMillis?
    public init(destination: DestinationName, state: UploadState) {
        self.destination = destination
        self.state = state
    }
}

/// The upload side as the daemon drives it: the sync engine's `Uploader` in the product.
public protocol DaemonUploads: Sendable {
    /// Start-up work: rows left in flight by a crash back to pending, saved states loaded.
    func prepare() async throws
    /// Uploads continuously until cancelled.
    func run() async
    /// New readings were committed: send them now.
    func readingsStored()
}
