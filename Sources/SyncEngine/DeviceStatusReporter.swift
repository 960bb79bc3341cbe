import GatewayCore
import Support
import Transport

/// Sends the gateway's `devicestatus` documents to Nightscout (`[nightscout] device_status = true`).
///
/// The daemon gives it its state as it changes (`update`) and says when a download ended (`downloadEnded`);
/// `DeviceStatusSchedule` decides when a document is due, and one timer on the injected clock waits for it.
/// Requests run one at a time in their own task, so the caller never waits; a document that falls due while
/// one is in flight goes out after it, with the state of that moment. Failures are logged once per change
/// of outcome. API v1 posts to `/api/v1/devicestatus` with the site's secret; API v3 posts each document to
/// the `devicestatus` collection with the entries' JWT (a sibling of the entries destination).
public actor DeviceStatusReporter {
    public enum Sender: Sendable {
        case v1(NightscoutDestination)
        case v3(NightscoutV3Destination)
    }

    private let sender: Sender
    private let device: String
    private var schedule: DeviceStatusSchedule
    private let networkTimeoutMs: Int
    private let clock: any SessionClock
    private let now: @Sendable () -> UnixMillis
    private let logger: Logger
    private let delivered: @Sendable (UnixMillis) -> Void

    private var report: DeviceStatusReport?
    private var timer: Task<Void, Never>?
    private var sending: Task<Void, Never>?
    private var sendAgain = false
    private var lastOutcome: String?
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
        self.clock = clock
        self.now = now
        self.logger = logger
        self.delivered = delivered
    }

    /// The gateway's state now. The first one is news (a document goes out at start).
    public func update(_ report: DeviceStatusReport) {
        guard !stopped else { return }
        let first = self.report == nil
        self.report = report
        if first { schedule.news(at: clock.now) }
        decide()
    }

    /// A download ended: a document goes out soon, with the state given next or already held.
    public func downloadEnded() {
        guard !stopped else { return }
        schedule.news(at: clock.now)
        decide()
    }

    public func stop() {
        stopped = true
        timer?.cancel()
        timer = nil
        sending?.cancel()
    }

    private func decide() {
        guard !stopped, let report else { return }
        if schedule.take(at: clock.now) {
            send(report)
        }
        timer?.cancel()
        timer = nil
        if let due = schedule.due {
            let clock = self.clock
            timer = Task { [weak self] in
                do { try await clock.sleep(until: due) } catch { return }
                await self?.timerFired()
            }
        }
    }

    private func timerFired() {
        timer = nil
        decide()
    }

    private func send(_ report: DeviceStatusReport) {
        guard sending == nil else {
            sendAgain = true
            return
        }
        let at = now()
        let document = report.document(device: device, at: at)
        let sender = self.sender
        let timeout = networkTimeoutMs
        sending = Task { [weak self] in
            let failure = await Self.post(document, createdAt: at, with: sender, networkTimeoutMs: timeout)
            await self?.sent(at: at, error: failure)
        }
    }

    private func sent(at: UnixMillis, error: String?) {
        sending = nil
        guard !stopped else { return }
        let outcome = error ?? "ok"
        if outcome != lastOutcome {
            if let error {
                logger.warning("[nightscout] device status not sent: \(error); trying again at the next one")
            } else if lastOutcome != nil {
                logger.notice("[nightscout] device status sent again")
            }
            lastOutcome = outcome
        }
        if error == nil { delivered(at) }
        if sendAgain, let report {
            sendAgain = false
            send(report)
        }
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
