import GatewayCore
import Support
import Transport

/// The heartbeat's last attempt, for `status` (no URL in it).
public struct HeartbeatReport: Sendable, Equatable {
    /// Wall-clock time of the attempt (or of the decision to stay silent).
    public var at: UnixMillis
    /// `ok`, `fail`, or `silent` (unhealthy with `heartbeat_on_fail = "silent"`: nothing sent).
    public var signal: String
    /// Why the gateway is unhealthy; nil for `ok`.
    public var reason: String?
    /// The monitor answered 2xx; false when the request failed or was refused.
    public var delivered: Bool
    /// Why the request failed (`connection refused`, `HTTP 404`); nil when delivered or not sent.
    public var error: String?

    public init(at: UnixMillis, signal: String, reason: String?, delivered: Bool, error: String?) {
        self.at = at
        self.signal = signal
        self.reason = reason
        self.delivered = delivered
        self.error = error
    }
}

/// Drives the heartbeat: takes the daemon's health as it changes, asks `HeartbeatSchedule` what to send,
/// sends it with the uploads' HTTP client and `[network]` timeout, and sleeps on the injected clock until
/// the next deadline (one timer, replaced at every decision; none while nothing is due).
///
/// It never blocks its caller: `PacedSender` runs the requests in their own task, one at a time; a signal
/// decided while one is in flight goes out after it (the latest one only). A ping is not an upload: nothing of it goes into
/// the outbox, the upload state or the upload metrics. Failures are logged once per change of outcome.
public actor HeartbeatPinger {
    private let target: HeartbeatTarget
    private var schedule: HeartbeatSchedule
    private let http: any HTTPClient
    private let networkTimeoutMs: Int
    private let now: @Sendable () -> UnixMillis
    private let logger: Logger
    private let report: @Sendable (HeartbeatReport) -> Void

    /// The last health given, and the wall-clock time its ages were measured at.
    private var health: HeartbeatHealth?
    private var observedAt: UnixMillis = 0
    private let paced: PacedSender
    private var outcomes = OutcomeChanges()
    private var stopped = false

    public init(target: HeartbeatTarget, policy: HeartbeatPolicy, http: any HTTPClient, networkTimeoutMs: Int,
                clock: any SessionClock, now: @escaping @Sendable () -> UnixMillis = SystemClock.now, logger: Logger,
                report: @escaping @Sendable (HeartbeatReport) -> Void = { _ in }) {
        self.target = target
        self.schedule = HeartbeatSchedule(policy: policy)
        self.http = http
        self.networkTimeoutMs = networkTimeoutMs
        self.now = now
        self.logger = logger
        self.report = report
        paced = PacedSender(clock: clock)
    }

    /// New health, its ages measured at `observedAt`; nil: the daemon is not running its loop (the
    /// heartbeat then neither pings nor reports a failure, and its timer stops).
    public func update(_ health: HeartbeatHealth?, observedAt: UnixMillis) {
        guard !stopped else { return }
        guard let health else {
            self.health = nil
            paced.wake(at: nil) {}
            return
        }
        self.health = health
        self.observedAt = observedAt
        decide()
    }

    /// Stops the timer and any request in flight.
    public func stop() {
        stopped = true
        paced.stop()
    }

    private static func aged(_ health: HeartbeatHealth, by ms: Int64) -> HeartbeatHealth {
        var h = health
        h.oldestUnsentAge = h.oldestUnsentAge.map { $0 + .milliseconds(max(0, ms)) }
        return h
    }

    private func decide() {
        guard !stopped, let health else { return }
        let wall = now()
        let current = Self.aged(health, by: wall - observedAt)
        let decision = schedule.decide(current, at: paced.clock.now)
        if decision.changed { logCondition(current) }
        if let signal = decision.send {
            send(signal)
        } else if decision.changed, schedule.policy.onFail == .silent,
                  let reason = current.problem(maxPending: schedule.policy.maxPending) {
            report(HeartbeatReport(at: wall, signal: "silent", reason: reason, delivered: false, error: nil))
        }
        paced.wake(at: decision.next) { [weak self] in await self?.decide() }
    }

    private func logCondition(_ health: HeartbeatHealth) {
        let policy = schedule.policy
        if let reason = health.problem(maxPending: policy.maxPending) {
            switch policy.onFail {
            case .report: logger.warning("heartbeat: unhealthy (\(reason)); reporting the failure to \(target.shown)")
            case .silent: logger.warning("heartbeat: unhealthy (\(reason)); not pinging \(target.shown) until healthy again")
            }
        } else {
            logger.notice("heartbeat: healthy; pinging \(target.shown) every \(policy.interval.components.seconds) s")
        }
    }

    private func send(_ signal: HeartbeatSignal) {
        let parts = target.request(for: signal)
        var request = HTTPRequest(method: parts.method, url: parts.url, body: parts.body,
                                  connectTimeoutMs: networkTimeoutMs, timeoutMs: networkTimeoutMs, maxResponseBytes: 64 * 1024)
        if !parts.body.isEmpty { request.headers = [("Content-Type", "text/plain; charset=utf-8")] }
        request.headers.append(("User-Agent", "glucose-gateway"))
        let http = self.http
        paced.submit { [weak self, request] in
            let failure: String?
            do throws(HTTPError) {
                let answer = try await http.send(request)
                failure = (200..<300).contains(answer.status) ? nil : "HTTP \(answer.status)"
            } catch {
                failure = error.description
            }
            await self?.sent(signal, error: failure)
        }
    }

    private func sent(_ signal: HeartbeatSignal, error: String?) {
        guard !stopped else { return }
        switch outcomes.record(error: error) {
        case .failing(let error): logger.warning("heartbeat: \(target.shown) not reached: \(error); trying again at the next ping")
        case .recovered: logger.notice("heartbeat: \(target.shown) reached again")
        case nil: break
        }
        let (name, reason): (String, String?) = switch signal {
        case .ok: ("ok", nil)
        case .fail(let why): ("fail", why)
        }
        report(HeartbeatReport(at: now(), signal: name, reason: reason, delivered: error == nil, error: error))
    }
}
