import GatewayCore
import Support
import Synchronization
import Transport

/// What a one-shot drain achieved, for the exit status of `sync` and `upload`.
public struct UploadOutcome: Sendable, Equatable {
    public var uploaded: Int
    /// Rows still waiting (pending or in flight) across destinations.
    public var pending: Int
    public var quarantined: Int
    /// Some destination ended with readings still to send (network, server, auth, poison, deadline).
    public var deferred: Bool
    public var reports: [SessionReport]

    /// `sync`: 0 when everything is uploaded, 75 (readings stored, upload deferred) otherwise; with
    /// `error_bypass` a deferred upload does not fail the command.
    public func exitStatus(errorBypass: Bool) -> ExitStatus {
        if !deferred { return .ok }
        return errorBypass ? .ok : .tempFail
    }
}

/// Per-destination view for `status`.
public struct DestinationStatus: Sendable, Equatable {
    public var destination: DestinationName
    public var state: DestinationState
    public var counts: OutboxCounts
    /// Age of the oldest reading not yet acknowledged, in seconds; nil when none.
    public var oldestUnsentAgeSeconds: Int64?
}

/// The upload side of the gateway: one dispatcher per enabled destination over the shared outbox.
/// `sync` calls `drain(deadline:)`; the daemon runs `run()`; `upload` calls `drain` after `prepare`.
public final class Uploader: DaemonUploads, Sendable {
    public let settings: UploadSettings
    let store: any OutboxStore
    let logger: Logger
    let timing: UploadTiming
    let connectivity: (any ConnectivityMonitor)?
    public let dispatchers: [Dispatcher]
    private let destinations: [any UploadDestination]
    let clock: any SessionClock
    /// Fired when new readings are queued or the network comes back: every destination looks at its
    /// queue again at once instead of at its next timer.
    private let queueChanged = WakeSignal()

    public convenience init(settings: UploadSettings, store: any OutboxStore, http: any HTTPClient = CurlHTTPClient(),
                            connectivity: (any ConnectivityMonitor)? = nil, logger: Logger, timing: UploadTiming = .standard,
                            loopbackIgnoresConnectivity: Bool = true, clock: any SessionClock = ContinuousClock(),
                            mqttClient: MQTTClient? = nil) {
        self.init(settings: settings, destinations: Self.destinations(settings, http: http, clock: clock, mqttClient: mqttClient, logger: logger),
                  store: store, http: http, connectivity: connectivity, logger: logger, timing: timing,
                  loopbackIgnoresConnectivity: loopbackIgnoresConnectivity, clock: clock)
    }

    /// With explicit destinations (tests, other servers).
    /// `loopbackIgnoresConnectivity`: a server on this host is reachable whatever the system says about
    /// the network (a Nightscout on the gateway itself); tests of connectivity handling turn it off.
    public init(settings: UploadSettings, destinations: [any UploadDestination], store: any OutboxStore, http: any HTTPClient,
                connectivity: (any ConnectivityMonitor)?, logger: Logger, timing: UploadTiming, loopbackIgnoresConnectivity: Bool = true,
                clock: any SessionClock = ContinuousClock()) {
        self.settings = settings
        self.clock = clock
        self.store = store
        self.logger = logger
        self.timing = timing
        self.connectivity = connectivity
        self.destinations = destinations
        self.dispatchers = destinations.map { d in
            Dispatcher(destination: d, store: store, settings: settings.recovery, timing: timing, http: http,
                       connectivity: connectivity, logger: logger, isLocal: loopbackIgnoresConnectivity && Self.isLocal(d.origin), clock: clock)
        }
        for d in destinations {
            if let m = d as? MQTTDestination { m.client.whenConnected { [weak self] in self?.brokerConnected() } }
        }
    }

    /// The destinations the settings enable.
    static func destinations(_ settings: UploadSettings, http: any HTTPClient, clock: any SessionClock, mqttClient: MQTTClient? = nil,
                             logger: Logger = .silent) -> [any UploadDestination] {
        var list: [any UploadDestination] = []
        if let ns = settings.nightscout {
            if ns.api == .v3, let entries = NightscoutV3Destination(settings: ns, http: http, clock: clock) {
                // API v3 has its treatments collection whether careportal is on or not; one JWT for both.
                list.append(entries)
                if ns.sendsTreatments { list.append(entries.sibling(name: .nightscoutTreatments, collection: "treatments")) }
            } else {
                list.append(NightscoutDestination(settings: ns, http: http))
                if ns.sendsTreatments { list.append(NightscoutTreatmentsDestination(settings: ns, http: http)) }
            }
        }
        if let fhir = settings.fhir { list.append(FHIRDestination(settings: fhir, http: http)) }
        if let mqtt = settings.mqtt {
            // Without a client from the caller (a one-shot command): no availability topic, no last will.
            let client = mqttClient ?? MQTTClient(settings: mqtt.broker, availabilityTopic: nil, logger: logger)
            list.append(MQTTDestination(settings: mqtt, client: client))
        }
        return list
    }

    static func isLocal(_ origin: String) -> Bool {
        let host = origin.split(separator: "/").last.map(String.init) ?? ""
        return host.hasPrefix("127.") || host.hasPrefix("localhost") || host.hasPrefix("[::1]")
    }

    /// At start-up: rows left in flight by a crash go back to pending; saved states are loaded.
    /// Call it only from the process that owns the uploads (see `UploadLock`).
    public func prepare() async throws {
        let requeued = try await store.requeueInFlight()
        if requeued > 0 { logger.notice("\(requeued) upload(s) interrupted earlier are pending again") }
        for d in dispatchers { await d.load() }
        for d in dispatchers { await d.checkAtStart() }
    }

    /// Uploads everything pending to every destination, in parallel across destinations and one request
    /// at a time within each, until done or `deadline`.
    public func drain(deadline: ContinuousClock.Instant?) async -> UploadOutcome {
        let reports = await withTaskGroup(of: SessionReport.self) { group in
            for d in dispatchers { group.addTask { await d.session(deadline: deadline) } }
            var all: [SessionReport] = []
            for await r in group { all.append(r) }
            return all
        }
        return await outcome(reports)
    }

    private func outcome(_ reports: [SessionReport]) async -> UploadOutcome {
        var pending = 0
        var quarantined = 0
        for d in dispatchers {
            if let c = try? await store.unsentCounts(d.name) {
                pending += c.pending + c.inFlight
                quarantined += c.quarantined
            }
        }
        let deferred = reports.contains { $0.end != .drained } || pending > 0
        return UploadOutcome(uploaded: reports.reduce(0) { $0 + $1.uploaded }, pending: pending, quarantined: quarantined,
                             deferred: deferred, reports: reports.sorted { $0.destination.rawValue < $1.destination.rawValue })
    }

    /// `upload --check`: each destination's verdict on the credentials, with a long timeout.
    public func checkCredentials() async -> [(DestinationName, CredentialCheck)] {
        await Self.checkCredentials(destinations, timing: timing, recovery: settings.recovery)
    }

    /// `upload --check` without an upload queue: the verdicts of the destinations the settings enable.
    public static func checkCredentials(settings: UploadSettings, http: any HTTPClient = CurlHTTPClient(),
                                        timing: UploadTiming = .standard) async -> [(DestinationName, CredentialCheck)] {
        let list = destinations(settings, http: http, clock: ContinuousClock())
        let results = await checkCredentials(list, timing: timing, recovery: settings.recovery)
        for d in list {
            if let m = d as? MQTTDestination { await m.client.stop() }
        }
        return results
    }

    private static func checkCredentials(_ destinations: [any UploadDestination], timing: UploadTiming,
                                         recovery: RecoverySettings) async -> [(DestinationName, CredentialCheck)] {
        var results: [(DestinationName, CredentialCheck)] = []
        for d in destinations {
            results.append((d.name, await d.checkCredentials(timeoutMs: max(Int(timing.credentialTimeout.wholeMilliseconds), recovery.networkTimeoutMs))))
        }
        return results
    }

    /// `upload --redrive`: quarantined rows of every destination back to pending.
    public func redrive() async throws -> Int {
        var total = 0
        for d in dispatchers { total += try await store.redrive(d.name) }
        return total
    }

    public func status(now: UnixMillis) async throws -> [DestinationStatus] {
        var list: [DestinationStatus] = []
        for d in dispatchers {
            let counts = try await store.counts(d.name)
            let state = try await store.destinationState(d.name) ?? DestinationState(destination: d.name, state: .ok)
            list.append(DestinationStatus(destination: d.name, state: state, counts: counts,
                                          oldestUnsentAgeSeconds: counts.oldestUnsent.map { max(0, (now - $0) / 1000) }))
        }
        return list
    }

    /// The MQTT broker is reachable again: forget that destination's long-term backoff and send now.
    public func brokerConnected() {
        Task {
            for d in dispatchers where d.name == .mqtt { await d.resetBackoff() }
            queueChanged.fire()
        }
    }

    /// Ends the MQTT connections cleanly (availability "offline" first); the HTTP destinations need nothing.
    public func shutdown() async {
        for d in destinations {
            if let m = d as? MQTTDestination { await m.client.stop() }
        }
    }

    /// New readings were stored: start a session now rather than at the next timer.
    public func readingsStored() {
        queueChanged.fire()
    }

    /// The daemon's upload service, looking at the queue at least hourly: it sleeps until new readings,
    /// connectivity or the end of a backoff, so the hourly look is only a safety net.
    public func run() async {
        await run(idleCheck: .seconds(3600))
    }

    /// The daemon's upload service: a session per destination whenever there is something to send,
    /// then waiting for new readings, connectivity, or the end of the long-term backoff. Stops on
    /// cancellation. `idleCheck` bounds how long it sleeps without looking at the queue.
    public func run(idleCheck: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            for d in dispatchers {
                group.addTask { await self.serve(d, idleCheck: idleCheck) }
            }
            if let connectivity {
                // Connectivity back: forget the long-term backoff and wake the dispatchers.
                group.addTask {
                    while !Task.isCancelled {
                        if await connectivity.waitForUp(timeout: .seconds(3600), clock: self.clock) {
                            for d in self.dispatchers { await d.resetBackoff() }
                            self.queueChanged.fire()
                        }
                    }
                }
            }
        }
    }

    private func serve(_ d: Dispatcher, idleCheck: Duration) async {
        while !Task.isCancelled {
            let counts = try? await store.unsentCounts(d.name)
            let hasWork = (counts?.pending ?? 0) > 0
            let notBefore = await d.nextAttemptAt
            if hasWork, notBefore.map({ clock.now >= $0 }) ?? true {
                _ = await d.session(deadline: nil)
                continue
            }
            var wait = idleCheck
            if hasWork, let notBefore {
                wait = min(wait, max(.milliseconds(1), clock.now.duration(to: notBefore)))
            }
            _ = await queueChanged.wait(timeout: wait, clock: clock)
        }
    }
}
