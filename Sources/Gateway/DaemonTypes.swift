import GatewayCore
import GlucoseProfile
import Meters
import Synchronization

/// The store as the daemon needs it: readings and the outbox in one database (SQLiteStore in the product).
public typealias DaemonStore = ReadingStore & OutboxStore

/// Alert codes of the daemon's own conditions (the upload side uses 1001 and 1002).
public enum DaemonAlert {
    /// bluetoothd holds `org.bluez` but does not answer.
    public static let bluetoothdNotAnswering = 2001
    /// The database failed its start-up check (`PRAGMA quick_check`).
    public static let databaseDamaged = 2002
    /// A meter lost its bond with the gateway: re-pair needed (`on_meter_error`).
    public static let meterBondLost = MeterSession.bondLostCode
}

/// A condition that needs a person, as the daemon raised it: the alert command runs once for each
/// (`AlertService`; `on_network_error`, or `on_meter_error` for a meter's condition). Raised once per change
/// of condition (a lost bond: once until the meter is paired again, also across restarts).
public struct RaisedAlert: Sendable, Equatable {
    /// Counts from 1 in each run of the daemon: a reader acts on those above the last it saw.
    public var number: Int
    /// A code from `DaemonAlert`.
    public var code: Int
    /// The meter's address, for a meter's condition.
    public var meter: String?
    /// One line.
    public var message: String
    public init(number: Int, code: Int, meter: String?, message: String) {
        self.number = number
        self.code = code
        self.meter = meter
        self.message = message
    }
}

/// An alert the daemon holds while it does no work at all (a damaged database): shown in status and the
/// run-state file until the daemon is restarted.
public struct HeldAlert: Sendable, Equatable {
    public var code: Int
    public var message: String
    public init(code: Int, message: String) {
        self.code = code
        self.message = message
    }
}

/// The daemon's settings, from the configuration plus timing that tests compress.
public struct DaemonSettings: Sendable, Equatable {
    /// Adapter name or address; nil: the first powered adapter.
    public var adapter: String?
    public var scanMode: ScanMode
    /// Connect plus service resolution.
    public var connectTimeout: Duration = .seconds(20)
    /// After a complete download the meter is left alone this long, even if it keeps advertising
    /// (a meter advertises for a while after a measurement; its records are already here).
    public var quietAfterDownload: Duration = .seconds(20)
    /// After a failed connection or an interrupted download, the next attempt waits this long.
    public var retryDelay: Duration = .seconds(2)
    /// SIGTERM: sessions get this long to abort their procedure and commit before the daemon exits anyway.
    public var stopGrace: Duration = .seconds(3)
    /// SIGTERM: how long the meters whose sessions outlived `stopGrace` get to be disconnected.
    public var stopDisconnectWait: Duration = .seconds(1)
    /// How long the list of paired meters is trusted before an unknown advertiser makes the daemon look
    /// again (a meter paired by `pair` while the daemon runs).
    public var pairedRefresh: Duration = .seconds(5)
    /// How often the daemon checks that bluetoothd answers (and that its own loop runs, for the watchdog),
    /// and how long bluetoothd gets to answer.
    public var healthInterval: Duration = .seconds(15)
    public var bluetoothdAnswerTimeout: Duration = .seconds(5)
    public var download: DownloadOptions
    /// Enabled upload destinations, for status and metrics.
    public var destinations: [DestinationName]
    /// The database whose per-meter lock files a session holds (`MeterSessionLock`), so that a manual `sync`
    /// and the daemon never run procedures on one meter at once; nil: no lock (tests with a fake store).
    public var sessionLockDatabase: String?

    public init(adapter: String? = nil, scanMode: ScanMode = .discovery, download: DownloadOptions = DownloadOptions(),
                destinations: [DestinationName] = []) {
        self.adapter = adapter
        self.scanMode = scanMode
        self.download = download
        self.destinations = destinations
    }

    /// From the configuration file.
    public init(config: GatewayConfig, destinations: [DestinationName]) {
        let meters = config.gateway.meters
        self.init(adapter: meters.adapter, scanMode: meters.scanMode, download: meters.downloadOptions, destinations: destinations)
    }
}

/// What the daemon is doing as a whole, as the run-state file and `status` show it.
public struct DaemonPhase: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// Loading the paired meters, preparing the upload queue, starting to watch.
    public static let starting = DaemonPhase(rawValue: "starting")
    public static let running = DaemonPhase(rawValue: "running")
    /// A signal came: downloads are ending.
    public static let stopping = DaemonPhase(rawValue: "stopping")
    public static let stopped = DaemonPhase(rawValue: "stopped")
    /// Holding off all work until a restart (a damaged database); see `HeldAlert`.
    public static let alert = DaemonPhase(rawValue: "alert")
}

/// Why a meter session ended without a complete download: the `reason` label of the failure counters.
public struct SessionFailure: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// Another process (a manual `sync`) holds the meter's session lock.
    public static let busy = SessionFailure(rawValue: "busy")
    /// The download ended before the meter said it was complete (the link dropped, the gateway stopped).
    public static let interrupted = SessionFailure(rawValue: "interrupted")
    /// The meter answered wrongly.
    public static let meter = SessionFailure(rawValue: "meter")
    /// The store refused the readings (a full disk); the meter keeps them.
    public static let store = SessionFailure(rawValue: "store")
    // A failed connection, by the kind of link error.
    public static let transient = SessionFailure(rawValue: "transient")
    public static let permanent = SessionFailure(rawValue: "permanent")
    public static let disconnected = SessionFailure(rawValue: "disconnected")
    public static let timeout = SessionFailure(rawValue: "timeout")
    public static let notSupported = SessionFailure(rawValue: "not-supported")
    /// The meter refused the encryption with the stored key: it lost the bond (re-pair needed).
    public static let bondLost = SessionFailure(rawValue: "bond-lost")

    /// A failed connection.
    public init(_ kind: MeterLinkError.Kind) {
        switch kind {
        case .transient: self = .transient
        case .permanent: self = .permanent
        case .disconnected: self = .disconnected
        case .timeout: self = .timeout
        case .notSupported: self = .notSupported
        case .bondLost: self = .bondLost
        }
    }
}

/// Counters since the daemon started, for status and metrics.
public struct DaemonCounters: Sendable, Equatable {
    public var connects = 0
    /// Failed connections and downloads by `SessionFailure` name.
    public var failures: [String: Int] = [:]
    public var downloads = 0
    /// Readings new to the store, from this daemon's downloads.
    public var readingsStored = 0
    public var bluetoothdRestarts = 0
    public var reloads = 0
    /// Commits of other processes to the database (a `pair`, `unpair` or `sync` beside the daemon), which
    /// may have changed the meters and their readings.
    public var otherWrites = 0
    public init() {}
}

/// One destination's upload state, for the one-line status and the metrics.
public struct DestinationSnapshot: Sendable, Equatable {
    public var name: DestinationName
    public var counts: OutboxCounts
    public var state: DestinationState?
    public init(name: DestinationName, counts: OutboxCounts, state: DestinationState?) {
        self.name = name
        self.counts = counts
        self.state = state
    }
}

/// What the daemon knows at one moment.
public struct DaemonSnapshot: Sendable, Equatable {
    public var pid: Int32 = 0
    public var startedAt: UnixMillis = 0
    public var updatedAt: UnixMillis = 0
    public var phase: DaemonPhase = .starting
    public var radio: RadioState = .absent
    /// Mode in effect (`discovery`, `profile`), nil while not watching.
    public var watching: ScanMode?
    public var pairedMeters: Int = 0
    /// Paired meters in state `re-pair needed` (they lost their bond), by address.
    public var repairNeeded: [String] = []
    public var activeSessions: [String] = []
    public var counters = DaemonCounters()
    public var readingsTotal: Int?
    public var readingsExcluded: Int?
    public var destinations: [DestinationSnapshot] = []
    public var lastReloadError: String?
    /// Gateway-side milliseconds from a meter being reported to `Connect` being sent, last session.
    public var lastReactionMs: Int?
    /// False while bluetoothd holds `org.bluez` but does not answer.
    public var bluetoothdAnswering = true
    /// Set when the daemon holds off all work (phase `alert`).
    public var alert: HeldAlert?
    /// The alerts raised lately, oldest first (at most `keptAlerts`), so that a reader that sees every
    /// snapshot sees each once.
    public var alerts: [RaisedAlert] = []
    public static let keptAlerts = 16
    public init() {}

    /// Adds a raised alert, numbered after the last.
    public mutating func raise(_ code: Int, _ message: String, meter: String? = nil) {
        alerts.append(RaisedAlert(number: (alerts.last?.number ?? 0) + 1, code: code, meter: meter, message: message))
        if alerts.count > Self.keptAlerts { alerts.removeFirst(alerts.count - Self.keptAlerts) }
    }

    public var pending: Int { destinations.reduce(0) { $0 + $1.counts.pending + $1.counts.inFlight } }
    public var quarantined: Int { destinations.reduce(0) { $0 + $1.counts.quarantined } }
    /// The network code (1001/1002) or HTTP status of the first destination whose last attempt failed.
    public var lastErrorCode: Int? { destinations.compactMap { $0.state?.lastErrorCode }.first }

    /// One line for systemd's STATUS=: "2 meters, 0 pending, last error 1001".
    public var statusLine: String {
        if let alert {
            return "ALERT \(alert.code) \(DaemonSnapshot.codeName(alert.code)): \(alert.message)"
        }
        var parts: [String] = []
        if !radio.bluetoothdRunning {
            parts.append("waiting for bluetoothd")
        } else if !bluetoothdAnswering {
            parts.append("bluetoothd not answering")
        } else if radio.adapter == nil {
            parts.append("waiting for an adapter")
        }
        parts.append("\(pairedMeters) meter\(pairedMeters == 1 ? "" : "s")")
        if !repairNeeded.isEmpty { parts.append("\(repairNeeded.count) re-pair needed") }
        if !activeSessions.isEmpty { parts.append("\(activeSessions.count) downloading") }
        parts.append("\(pending) pending")
        if quarantined > 0 { parts.append("\(quarantined) quarantined") }
        parts.append("last error " + (lastErrorCode.map(String.init) ?? "none"))
        return parts.joined(separator: ", ")
    }
}
