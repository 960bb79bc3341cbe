import GatewayCore
import Support
import Transport
import GlucoseProfile

/// `[nightscout] device_status`: the gateway reports itself to Nightscout as an uploader, the way phone
/// uploaders do, so that a caregiver sees in Nightscout that the gateway is alive and whether a meter's
/// battery is low.
///
/// A status is not data: only the newest one is worth sending, so it never goes into the outbox. A send
/// that fails is not repeated with the old document; the next one, at the next due time, says what is
/// true then. It is not an upload either: it changes no upload state, count or metric.
public struct DeviceStatusPolicy: Sendable, Equatable {
    /// `device_status_interval`, in seconds: how often a document goes out while nothing happens.
    public static let intervalRange = 60...86_400
    public static let defaultIntervalSeconds = 900
    /// The shortest time between two documents: downloads that end close together (several meters, a
    /// retry) give one document, not one each.
    public static let minimumSpacing: Duration = .seconds(60)

    public var interval: Duration

    public init(interval: Duration = .seconds(DeviceStatusPolicy.defaultIntervalSeconds)) {
        self.interval = interval
    }
}

/// When a document is due: at start, soon after a download ended (no sooner than `minimumSpacing` after
/// the last one), and otherwise every `interval` after the last. It never sleeps and never sends.
public struct DeviceStatusSchedule: Sendable, Equatable {
    public let policy: DeviceStatusPolicy
    private var lastSent: ContinuousClock.Instant?
    /// When the next document is due; nil before the first news.
    public private(set) var due: ContinuousClock.Instant?

    public init(policy: DeviceStatusPolicy) {
        self.policy = policy
    }

    /// Something worth reporting happened at `now` (the daemon started, a download ended).
    public mutating func news(at now: ContinuousClock.Instant) {
        let earliest = lastSent.map { max(now, $0 + DeviceStatusPolicy.minimumSpacing) } ?? now
        due = due.map { min($0, earliest) } ?? earliest
    }

    /// Whether a document goes out at `now`; when it does, the next one is due an interval later.
    public mutating func take(at now: ContinuousClock.Instant) -> Bool {
        guard let due, now >= due else { return false }
        lastSent = now
        self.due = now + policy.interval
        return true
    }
}

/// What one document says of a meter. No address and no serial number: a Nightscout site is often
/// readable by anyone with its link.
public struct DeviceStatusMeter: Sendable, Equatable {
    public var name: String
    public var model: String?
    /// The battery-low bit of the meter's newest reading; nil when it has none.
    public var batteryLow: Bool?
    public var lastSeen: UnixMillis?
    public var lastSync: UnixMillis?
    public var repairNeeded: Bool

    public init(name: String, model: String? = nil, batteryLow: Bool? = nil, lastSeen: UnixMillis? = nil,
                lastSync: UnixMillis? = nil, repairNeeded: Bool = false) {
        self.name = name
        self.model = model
        self.batteryLow = batteryLow
        self.lastSeen = lastSeen
        self.lastSync = lastSync
        self.repairNeeded = repairNeeded
    }

    /// From the meter's row and its newest readings (newest first).
    public init(meter: MeterInfo, newestFirst readings: [NewReading]) {
        let meter = meter.withBoundedIdentity
        self.init(name: meter.name ?? meter.model ?? "Glucose meter", model: meter.model,
                  batteryLow: readings.first.map { ($0.sensorStatus ?? 0) & Int(SensorStatus.batteryLow.rawValue) != 0 },
                  lastSeen: meter.lastSeen, lastSync: meter.lastSync, repairNeeded: meter.bondLostAt != nil)
    }
}

/// The gateway's state as one document reports it.
public struct DeviceStatusReport: Sendable, Equatable {
    /// The heartbeat's one-line problem (`HeartbeatHealth.problem`), nil when healthy. It must not name a
    /// meter by its address (see `DeviceStatusMeter`).
    public var problem: String?
    /// Readings waiting for upload, all destinations together.
    public var pending: Int
    public var oldestPendingAge: Duration?
    public var meters: [DeviceStatusMeter]

    public init(problem: String?, pending: Int, oldestPendingAge: Duration? = nil, meters: [DeviceStatusMeter]) {
        self.problem = problem
        self.pending = pending
        self.oldestPendingAge = oldestPendingAge
        self.meters = meters
    }

    /// The document for Nightscout's `devicestatus` collection, made at `now` by the gateway called
    /// `device`. `uploader.name` is what Nightscout shows for the uploader; there is no `uploader.battery`,
    /// because the gateway runs on mains power and has none to report. The `identifier` is fixed by the
    /// device and the time (to the millisecond), so a document sent twice is stored once (API v3 deduplicates on it).
    public func document(device: String, at now: UnixMillis) -> (identifier: String, body: [UInt8]) {
        let createdAt = CivilCalendar.isoUTC(millis: now)
        let identifier = NameBasedUUID(namespace: IdempotencyKey.namespace.bytes, name: "devicestatus|\(device)|\(now)".utf8).description
        var w = JSONWriter(capacity: 512)
        w.beginObject()
        w.string("identifier", identifier)
        w.string("device", "glucose-gateway://" + device)
        w.string("created_at", createdAt)
        w.beginObject("uploader")
        w.string("name", "glucose-gateway on " + device)
        w.string("type", "glucose-gateway")
        w.endObject()
        w.beginObject("gateway")
        w.string("health", problem == nil ? "ok" : "unhealthy")
        if let problem { w.string("problem", problem) }
        w.integer("pending", Int64(pending))
        if let age = oldestPendingAge { w.integer("oldestPendingSeconds", age.components.seconds) }
        w.beginArray("meters")
        for meter in meters {
            w.beginObject()
            w.string("name", meter.name)
            if let model = meter.model { w.string("model", model) }
            if let low = meter.batteryLow { w.string("battery", low ? "low" : "ok") }
            if let seen = meter.lastSeen { w.string("lastSeen", CivilCalendar.isoUTC(millis: seen)) }
            if let sync = meter.lastSync { w.string("lastSync", CivilCalendar.isoUTC(millis: sync)) }
            w.string("state", meter.repairNeeded ? "re-pair needed" : "paired")
            w.endObject()
        }
        w.endArray()
        w.endObject()
        w.endObject()
        return (identifier, w.bytes)
    }
}
