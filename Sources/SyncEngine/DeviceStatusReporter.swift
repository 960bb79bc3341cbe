import GatewayCore
import Support
import Transport

/// Sends the gateway's `devicestatus` documents to Nightscout (`[nightscout] device_status = true`).
///
/// The daemon gives it where its state can be read (`update`) and says when a download ended
/// (`downloadEnded`); `DeviceStatusSchedule` decides when a document is due, and `PacedSender` waits for it
/// on the injected clock and sends one document at a time, so the caller never waits. The state is read
/// only when a document is built (an idle gateway reads nothing between documents); a document that falls
/// due while one is in flight goes out after it, with the state of that moment. Failures are logged once
/// per change of outcome. API v1 posts to `/api/v1/devicestatus` with the site's secret; API v3 posts each
/// document to the `devicestatus` collection with the entries' JWT (a sibling of the entries destination).
public actor DeviceStatusReporter {
    public enum Sender: Sendable {
        case v1(NightscoutDestination)
        case v3(NightscoutV3Destination)
    }

    /// The gateway's state, read when a document is built; nil when it cannot be read now (the reader
    /// says why), and then no document goes out until the next `update`.
    public typealias ReportSource = @Sendable () async -> DeviceStatusReport?

    private let sender: Sender
    private let device: String
    private var schedule: DeviceStatusSchedule
    private let networkTimeoutMs: Int
    private let now: @Sendable () -> UnixMillis
    private let logger: Logger
    private let delivered: @Sendable (UnixMillis) -> Void

    private var source: ReportSource?
    /// The last read of the state failed: the next `update` is news, so its state goes out soon.
    private var unread = false
    private let paced: PacedSender
    private var outcomes = OutcomeChanges()
    private var stopped = false

    /// `device` names the gateway in Nightscout (its host name). `delivered` is told the time of each
    /// document the server took.
    public init(settings: NightscoutSettings, http: any HTTPClient, device: String, policy: DeviceStatusPolicy,
                networkTimeoutMs: Int, clock: any SessionClock, now: @escaping @Sendable () -> UnixMillis = SystemClock.now,
                logger: Logger, delivered: @escaping @Sendable (UnixMillis) -> Void = { _ in }) {
        switch settings.api {
        case .v1:
            sender = .v1(NightscoutDestination(settings: settings, http: http))
        case .v3:
            if let v3 = NightscoutV3Destination(settings: settings, http: http, clock: clock) {
                sender = .v3(v3.sibling(name: .nightscoutDeviceStatus, collection: "devicestatus"))
            } else {
                sender = .v1(NightscoutDestination(settings: settings, http: http))
            }
        }
        self.device = device
        self.schedule = DeviceStatusSchedule(policy: policy)
        self.networkTimeoutMs = networkTimeoutMs
        self.now = now
        self.logger = logger
        self.delivered = delivered
        paced = PacedSender(clock: clock)
    }

    /// The gateway's state now. The first one is news (a document goes out at start).
    public func update(_ report: DeviceStatusReport) {
        update { report }
    }

    /// Where the gateway's state is read from now; it is read only when a document is built. The first
    /// one is news (a document goes out at start).
    public func update(_ source: @escaping ReportSource) {
        guard !stopped else { return }
        if self.source == nil || unread { schedule.news(at: paced.clock.now) }
        self.source = source
        unread = false
        decide()
    }

    /// A download ended: a document goes out soon, with the state given next or already held.
    public func downloadEnded() {
        guard !stopped else { return }
        schedule.news(at: paced.clock.now)
        decide()
    }

    public func stop() {
        stopped = true
        paced.stop()
    }

    private func decide() {
        guard !stopped, source != nil else { return }
        if schedule.take(at: paced.clock.now) {
            paced.submit { [weak self] in await self?.send() }
        }
        paced.wake(at: schedule.due) { [weak self] in await self?.decide() }
    }

    /// Builds the document from the state of this moment and sends it.
    private func send() async {
        guard !stopped, let source else { return }
        let at = now()
        guard let report = await source() else {
            unread = true
            return
        }
        let document = report.document(device: device, at: at)
        let failure = await Self.post(document, createdAt: at, with: sender, networkTimeoutMs: networkTimeoutMs)
        guard !stopped else { return }
        switch outcomes.record(error: failure) {
        case .failing(let error): logger.warning("[nightscout] device status not sent: \(error); trying again at the next one")
        case .recovered: logger.notice("[nightscout] device status sent again")
        case nil: break
        }
        if failure == nil { delivered(at) }
    }

    /// Nil when the server took the document, else why not (no secret in it).
    static func post(_ document: (identifier: String, body: [UInt8]), createdAt: UnixMillis, with sender: Sender,
                     networkTimeoutMs: Int) async -> String? {
        let item = OutboxItem(id: 1, destination: .nightscoutDeviceStatus, readingID: 0, key: document.identifier,
                              body: document.body, state: .pending, attempts: 0, createdAt: createdAt)
        switch sender {
        case .v3(let destination):
            return describe(await destination.send([item], networkTimeoutMs: networkTimeoutMs))
        case .v1(let destination):
            let request = destination.server.post("/api/v1/devicestatus", headers: destination.headers, body: document.body,
                                                  elements: 1, networkTimeoutMs: networkTimeoutMs)
            do throws(HTTPError) {
                let answer = try await destination.server.http.send(request)
                return (200..<300).contains(answer.status) ? nil : "server answered HTTP \(answer.status)"
            } catch {
                return error.description
            }
        }
    }

    private static func describe(_ outcome: BatchOutcome) -> String? {
        switch outcome {
        case .perElement(let stored, _, let rejected, _, let reason):
            if !stored.isEmpty { return nil }
            return rejected.values.first ?? reason
        case .rejected(let status, _): return "server answered HTTP \(status)"
        case .tooLarge: return "server answered HTTP 413"
        case .auth(let status, _): return "credentials refused (HTTP \(status))"
        case .misconfigured(let status, _): return "server answered HTTP \(status): check the URL"
        case .transient(let failure): return failure.message
        }
    }
}

extension DestinationName {
    /// Nightscout's `devicestatus` documents; never an outbox destination.
    public static let nightscoutDeviceStatus = DestinationName(rawValue: "nightscout-devicestatus")
}
