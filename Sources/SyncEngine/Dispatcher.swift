import GatewayCore
import Support
import Transport

/// Network error codes shown in logs, `status` and the alert command.
public enum NetworkErrorCode {
    /// The network itself is down (no route, DNS failure, the health probe fails, NetworkManager says so).
    public static let notConnected = 1001
    /// The network is up but the server is slow or failing (timeout, 5xx, 429).
    public static let timeout = 1002

    public static func name(_ code: Int) -> String {
        switch code {
        case notConnected: "NETWORK_NOT_CONNECTED"
        case timeout: "NETWORK_TIMEOUT"
        default: "HTTP_\(code)"
        }
    }
}

/// How one upload session of one destination ended.
public enum SessionEnd: Sendable, Equatable {
    /// Nothing left pending.
    case drained
    /// Readings remain pending: network or server trouble (code 1001/1002), or the deadline passed.
    case deferred(code: Int, message: String)
    /// Credentials refused or URL wrong: nothing is sent until that is fixed.
    case paused(code: Int, message: String)
    /// A reading the server refuses blocks this destination (error_bypass off).
    case blocked(code: Int, message: String)
}

public struct SessionReport: Sendable, Equatable {
    public var destination: DestinationName
    public var end: SessionEnd
    /// Rows acknowledged in this session (new plus already on the server).
    public var uploaded: Int
    public var duplicates: Int
    public var quarantined: Int
    public var requests: Int
}

/// Classifies a failure without an HTTP answer into 1001 or 1002.
struct NetworkClassifier: Sendable {
    var healthCheckURL: String?
    var networkTimeoutMs: Int
    var http: any HTTPClient
    var connectivity: (any ConnectivityMonitor)?
    /// The destination is on this host: system connectivity says nothing about it.
    var destinationIsLocal: Bool

    func classify(_ failure: TransientFailure) async -> Int {
        if failure.status != nil { return NetworkErrorCode.timeout }
        if !destinationIsLocal, connectivity?.current() == .down { return NetworkErrorCode.notConnected }
        if healthCheckURL != nil {
            return await probe() ? NetworkErrorCode.timeout : NetworkErrorCode.notConnected
        }
        switch failure.error {
        case .resolveFailed?, .unreachable?: return NetworkErrorCode.notConnected
        default: return NetworkErrorCode.timeout
        }
    }

    /// Any HTTP answer from the health-check URL means the network works.
    func probe() async -> Bool {
        guard let url = healthCheckURL else { return true }
        let request = HTTPRequest(method: "GET", url: url, connectTimeoutMs: networkTimeoutMs, timeoutMs: networkTimeoutMs,
                                  maxResponseBytes: ResponseLimit.probe)
        do {
            _ = try await http.send(request)
            return true
        } catch .tooLarge, .headersTooLong {
            return true  // it answered: the network works
        } catch {
            return false
        }
    }
}

/// Sends one destination's queue, one request at a time (the server deduplicates only sequential
/// re-sends), and applies the recovery settings. One actor per destination.
public actor Dispatcher {
    public nonisolated let name: DestinationName
    let destination: any UploadDestination
    let store: any OutboxStore
    let settings: RecoverySettings
    let timing: UploadTiming
    let classifier: NetworkClassifier
    let connectivity: (any ConnectivityMonitor)?
    let logger: Logger
    /// Monotonic time for backoff, retries, probes and deadlines (a `ManualClock` in tests, a `ScaledClock`
    /// under `run --time-scale`).
    let clock: any SessionClock
    var rng = SystemRandomNumberGenerator()

    private(set) var batchSize: Int
    private var longBackoffLevel = 0
    private var recoveryLevel = 0
    /// When the next session may start after a deferred one (long-term backoff); nil: any time.
    public private(set) var nextAttemptAt: ContinuousClock.Instant?
    private var lastReported: (state: UploadState, code: Int?)?
    private var persisted: DestinationState
    /// The state as last written to the store or read from it; nil while the store holds none.
    private var saved: DestinationState?
    /// When the running session started: a success is first written at most `successSaveInterval` after it.
    private var sessionStartedAt: ContinuousClock.Instant?

    init(destination: any UploadDestination, store: any OutboxStore, settings: RecoverySettings, timing: UploadTiming,
         http: any HTTPClient, connectivity: (any ConnectivityMonitor)?, logger: Logger, isLocal: Bool, clock: any SessionClock) {
        self.name = destination.name
        self.clock = clock
        self.destination = destination
        self.store = store
        self.settings = settings
        self.timing = timing
        self.connectivity = connectivity
        self.logger = logger.with(label: "upload.\(destination.name)")
        self.batchSize = timing.maxBatch
        self.classifier = NetworkClassifier(healthCheckURL: settings.healthCheckURL, networkTimeoutMs: settings.networkTimeoutMs,
                                            http: http, connectivity: connectivity, destinationIsLocal: isLocal)
        self.persisted = DestinationState(destination: destination.name, state: .ok)
    }

    /// Loads the persisted state so `paused`/`blocked` survive a restart.
    func load() async {
        if let saved = try? await store.destinationState(name) {
            persisted = saved
            self.saved = saved
            lastReported = (saved.state, saved.lastErrorCode)
        }
    }

    public var state: DestinationState { persisted }

    /// At start-up, for a destination the server may have turned off: ask before sending anything, and
    /// pause it (one line in the log) when it is off. Other answers are left to the first session.
    func checkAtStart() async {
        guard destination.checkedAtStart else { return }
        if case .disabled(let why) = await destination.checkCredentials(timeoutMs: credentialTimeoutMs) {
            await report(state: .paused, code: 404, message: why)
        }
    }

    /// Forgets the long-term backoff: after a success elsewhere, or when connectivity returns.
    public func resetBackoff() {
        longBackoffLevel = 0
        nextAttemptAt = nil
    }

    // MARK: - Session

    private enum Stop: Error {
        case end(SessionEnd)
    }

    private struct Counters {
        var uploaded = 0
        var duplicates = 0
        var quarantined = 0
        var requests = 0
    }

    private var counters = Counters()

    /// Sends everything pending, with the in-session retries, until the queue is empty, the session
    /// must stop, or `deadline` passes.
    public func session(deadline: ContinuousClock.Instant?) async -> SessionReport {
        counters = Counters()
        sessionStartedAt = clock.now
        let end = await runSession(deadline: deadline)
        if successUnsaved || acknowledgedUnsynced { await save() }
        switch end {
        case .drained:
            longBackoffLevel = 0
            nextAttemptAt = nil
        case .deferred, .paused, .blocked:
            let delay = Backoff.longTerm(level: longBackoffLevel, base: timing.longBackoffBase, cap: timing.longBackoffCap, using: &rng)
            longBackoffLevel += 1
            nextAttemptAt = clock.now.advanced(by: delay)
        }
        return SessionReport(destination: name, end: end, uploaded: counters.uploaded, duplicates: counters.duplicates,
                             quarantined: counters.quarantined, requests: counters.requests)
    }

    private func runSession(deadline: ContinuousClock.Instant?) async -> SessionEnd {
        if !classifier.destinationIsLocal, connectivity?.current() == .down {
            let message = "no network connectivity"
            await report(state: settings.recoveryMode ? .recovering : .backoff, code: NetworkErrorCode.notConnected, message: message)
            return .deferred(code: NetworkErrorCode.notConnected, message: message)
        }
        if persisted.state == .paused {
            // Credentials were refused earlier: check them (long timeout) before sending anything.
            switch await destination.checkCredentials(timeoutMs: credentialTimeoutMs) {
            case .accepted:
                logger.notice("credentials accepted by \(destination.origin); resuming")
            case .refused(let why):
                let code = persisted.lastErrorCode ?? 401
                await report(state: .paused, code: code, message: why)
                return .paused(code: code, message: why)
            case .disabled(let why):
                await report(state: .paused, code: 404, message: why)
                return .paused(code: 404, message: why)
            case .unreachable(let why):
                return .deferred(code: persisted.lastErrorCode ?? NetworkErrorCode.timeout, message: why)
            }
        }
        while true {
            if let deadline, clock.now >= deadline {
                return .deferred(code: persisted.lastErrorCode ?? NetworkErrorCode.timeout, message: "deadline reached with readings pending")
            }
            let items: [OutboxItem]
            do {
                items = try await store.claimPending(name, limit: batchSize)
            } catch {
                logger.error("cannot read the upload queue: \(error)")
                return .deferred(code: NetworkErrorCode.timeout, message: "upload queue unreadable")
            }
            if items.isEmpty {
                await reportSuccess(sessionEnds: true)
                return .drained
            }
            do {
                try await deliver(items, deadline: deadline)
            } catch Stop.end(let end) {
                return end
            } catch {
                return .deferred(code: NetworkErrorCode.timeout, message: "\(error)")
            }
        }
    }

    /// Delivers claimed rows, splitting on rejections and timeouts. Throws `Stop` to end the session,
    /// after releasing every row it still holds.
    private func deliver(_ claimed: [OutboxItem], deadline: ContinuousClock.Instant?) async throws {
        var queue: [[OutboxItem]] = [claimed]
        func releaseAll(_ extra: [OutboxItem]) async {
            let ids = (queue.flatMap { $0 } + extra).map(\.id)
            queue.removeAll()
            if !ids.isEmpty { try? await store.release(ids) }
        }
        while !queue.isEmpty {
            var batch = queue.removeFirst()
            var attempts = 0
            attemptLoop: while true {
                if let deadline, clock.now >= deadline {
                    await releaseAll(batch)
                    throw Stop.end(.deferred(code: persisted.lastErrorCode ?? NetworkErrorCode.timeout, message: "deadline reached with readings pending"))
                }
                counters.requests += 1
                let outcome = await destination.send(batch, networkTimeoutMs: settings.networkTimeoutMs)
                switch outcome {
                case let .perElement(stored, duplicates, rejected, retry, retryReason):
                    if !stored.isEmpty {
                        do {
                            try await store.acknowledge(stored, at: SystemClock.now(), synced: false)
                            acknowledgedUnsynced = true
                        } catch {
                            await releaseAll(batch)
                            throw Stop.end(.deferred(code: NetworkErrorCode.timeout, message: "cannot record acknowledgements"))
                        }
                        counters.uploaded += stored.count
                        recoveryLevel = 0
                        counters.duplicates += duplicates
                        batchSize = min(timing.maxBatch, max(batchSize + 1, batchSize + batchSize / 4))
                        await reportSuccess()
                    }
                    let refused = batch.filter { rejected[$0.id] != nil }
                    let again = batch.filter { retry.contains($0.id) }
                    if !refused.isEmpty {
                        if refused.count == 1, let item = refused.first {
                            try await poison(item, status: 200, answer: rejected[item.id] ?? "", holding: again, releaseAll: releaseAll)
                        } else {
                            queue.insert(contentsOf: Self.halves(refused), at: 0)
                        }
                    }
                    if again.isEmpty { break attemptLoop }
                    batch = again
                    attempts += 1
                    // Not confirmed by a 2xx: the server is up but did not store them; retried like a 5xx.
                    let failure = TransientFailure(status: 200, reason: retryReason)
                    if try await retryOrStop(failure, batch: batch, attempts: attempts, deadline: deadline, releaseAll: releaseAll) == .waitedForNetwork {
                        attempts -= 1
                    }
                case .tooLarge:
                    if batch.count == 1, let item = batch.first {
                        try await poison(item, status: 413, answer: "request too large", holding: [], releaseAll: releaseAll)
                        break attemptLoop
                    }
                    batchSize = max(1, batch.count / 2)
                    queue.insert(contentsOf: Self.halves(batch), at: 0)
                    break attemptLoop
                case let .rejected(status, answer):
                    if batch.count == 1, let item = batch.first {
                        try await poison(item, status: status, answer: answer, holding: [], releaseAll: releaseAll)
                        break attemptLoop
                    }
                    queue.insert(contentsOf: Self.halves(batch), at: 0)
                    break attemptLoop
                case let .auth(status, _):
                    await releaseAll(batch)
                    let message = "credentials refused by \(destination.origin) (HTTP \(status)); uploads paused until they are fixed"
                    await report(state: .paused, code: status, message: message)
                    throw Stop.end(.paused(code: status, message: message))
                case let .misconfigured(status, _):
                    await releaseAll(batch)
                    let message = "\(destination.origin) answered HTTP \(status): check the URL; uploads paused"
                    await report(state: .paused, code: status, message: message)
                    throw Stop.end(.paused(code: status, message: message))
                case let .transient(failure):
                    if failure.isTimeout, batch.count > 1 {
                        // A timeout on a big batch may be the batch's size: halve, same bytes per element.
                        batchSize = max(1, batch.count / 2)
                        let rest = Array(batch[batchSize...])
                        batch = Array(batch[..<batchSize])
                        queue.insert(rest, at: 0)
                    }
                    attempts += 1
                    if try await retryOrStop(failure, batch: batch, attempts: attempts, deadline: deadline, releaseAll: releaseAll) == .waitedForNetwork {
                        attempts -= 1
                    }
                }
            }
        }
    }

    /// After a transient failure: classify it, then wait for the network (recovery mode, 1001, not
    /// counted), sleep a jittered backoff before the next attempt, or end the session.
    private enum RetryKind { case counted, waitedForNetwork }

    private func retryOrStop(_ failure: TransientFailure, batch: [OutboxItem], attempts: Int, deadline: ContinuousClock.Instant?,
                             releaseAll: ([OutboxItem]) async -> Void) async throws -> RetryKind {
        let code = await classifier.classify(failure)
        let message = code == NetworkErrorCode.notConnected ? "network not connected (\(failure.message))" : "\(destination.origin): \(failure.message)"
        if code == NetworkErrorCode.notConnected && settings.recoveryMode {
            await report(state: .recovering, code: code, message: message)
            let back = await waitForNetwork(deadline: deadline)
            if !back {
                await releaseAll(batch)
                throw Stop.end(.deferred(code: code, message: message))
            }
            return .waitedForNetwork  // the same batch again, no attempt spent
        }
        let limitReached = attempts > settings.retryCount
        if limitReached, failure.isTimeout, code == NetworkErrorCode.timeout {
            // Nightscout answers a wrong secret only after a delay that grows with each failure, so wrong
            // credentials look like timeouts: ask the credential check, which waits long enough.
            if case .refused(let why) = await destination.checkCredentials(timeoutMs: credentialTimeoutMs) {
                await releaseAll(batch)
                let message = "credentials refused by \(destination.origin) (\(why)); uploads paused until they are fixed"
                await report(state: .paused, code: 401, message: message)
                throw Stop.end(.paused(code: 401, message: message))
            }
        }
        await report(state: limitReached ? .backoff : .retrying, code: code, message: message)
        if limitReached {
            await releaseAll(batch)
            throw Stop.end(.deferred(code: code, message: message))
        }
        var delay = Backoff.fullJitter(attempt: attempts - 1, base: timing.retryBase, cap: timing.retryCap, using: &rng)
        if let afterMs = failure.retryAfterMs {
            let after = Duration.milliseconds(afterMs)
            if after > timing.retryAfterCap {
                await releaseAll(batch)
                throw Stop.end(.deferred(code: code, message: message))
            }
            delay = max(delay, after)
        }
        if let deadline, clock.now.advanced(by: delay) >= deadline {
            await releaseAll(batch)
            throw Stop.end(.deferred(code: code, message: message))
        }
        try? await clock.sleep(for: delay)
        if Task.isCancelled {
            await releaseAll(batch)
            throw Stop.end(.deferred(code: code, message: "stopped"))
        }
        return .counted
    }

    /// Recovery mode: wait for a connectivity event, or probe every min(probe cap, backoff). Returns
    /// false when the deadline passes or the task is cancelled first.
    private func waitForNetwork(deadline: ContinuousClock.Instant?) async -> Bool {
        while !Task.isCancelled {
            // The probe interval keeps growing across waits of one outage; a success resets it.
            var interval = Backoff.ceiling(attempt: recoveryLevel, base: timing.probeBase, cap: timing.probeCap)
            recoveryLevel += 1
            if let deadline {
                let left = clock.now.duration(to: deadline)
                if left <= .zero { return false }
                interval = min(interval, .milliseconds(left.wholeMilliseconds + 1))
            }
            let woken: Bool
            if let connectivity {
                woken = await connectivity.waitForUp(timeout: interval, clock: clock)
            } else {
                try? await clock.sleep(for: interval)
                woken = false
            }
            if Task.isCancelled { return false }
            if woken {
                logger.info("connectivity reported back; resuming the session")
                recoveryLevel = 0
                return true
            }
            if let deadline, clock.now >= deadline { return false }
            // Timer fallback: with a health-check URL, resume only once it answers; else try the server.
            if classifier.healthCheckURL == nil { return true }
            if await classifier.probe() { return true }
        }
        return false
    }

    private func poison(_ item: OutboxItem, status: Int, answer: String, holding: [OutboxItem],
                        releaseAll: ([OutboxItem]) async -> Void) async throws {
        let words = "HTTP \(status): \(answer)"
        if settings.errorBypass {
            do {
                try await store.quarantine(item.id, answer: words)
            } catch {
                await releaseAll([item] + holding)
                throw Stop.end(.deferred(code: status, message: "cannot quarantine a refused reading"))
            }
            counters.quarantined += 1
            logger.warning("a reading refused by \(destination.origin) (\(words)) was quarantined; the others continue")
            return
        }
        await releaseAll([item] + holding)
        let message = "a reading is refused by \(destination.origin) (\(words)); uploads to it are blocked (error_bypass is off)"
        await report(state: .blocked, code: status, message: message)
        throw Stop.end(.blocked(code: status, message: message))
    }

    /// Credential checks get the longer of the credential timeout and the network timeout.
    var credentialTimeoutMs: Int {
        max(Int(timing.credentialTimeout.wholeMilliseconds), settings.networkTimeoutMs)
    }

    static func halves(_ items: [OutboxItem]) -> [[OutboxItem]] {
        let mid = items.count / 2
        return [Array(items[..<mid]), Array(items[mid...])].filter { !$0.isEmpty }
    }

    // MARK: - State and alerts

    /// While a backlog drains, a state that differs from the saved one only in the time of the last
    /// success is written at most this often, counted from the session's start (and when the session
    /// ends), so an acknowledged batch costs one commit, its acknowledgement (not synced), instead of two;
    /// a session that drains within this time writes its state once, and that commit is the one sync of
    /// all its acknowledgements.
    static let successSaveInterval: Duration = .seconds(1)

    private func reportSuccess(sessionEnds: Bool = false) async {
        let now = SystemClock.now()
        let changed = persisted.state != .ok || persisted.lastErrorCode != nil
        let before = persisted
        persisted.state = .ok
        persisted.lastErrorCode = nil
        persisted.lastErrorMessage = nil
        persisted.lastErrorAt = nil
        if counters.uploaded > 0 { persisted.lastSuccessAt = now }
        if changed, lastReported != nil {
            logger.notice("uploads to \(destination.origin) work again")
        }
        lastReported = nil
        var onlyTimeMoved = before
        onlyTimeMoved.lastSuccessAt = persisted.lastSuccessAt
        if !sessionEnds, onlyTimeMoved == persisted, let since = successSavedAt ?? sessionStartedAt,
           clock.now - since < Self.successSaveInterval {
            successUnsaved = true
            return
        }
        await save()
    }

    /// When a success was last written (nil: not in this process).
    private var successSavedAt: ContinuousClock.Instant?
    /// A success time waits to be written (see `successSaveInterval`).
    private var successUnsaved = false

    /// Acknowledgements were committed without a sync of their own (`acknowledge(synced: false)`), and no
    /// synced commit followed yet: the session ends with one, the state's, even when the state is unchanged.
    /// One sync per session then holds them all, instead of one per batch.
    private var acknowledgedUnsynced = false

    /// Writes the state unless the store already holds exactly this one (and no acknowledgement waits
    /// for a synced commit).
    private func save() async {
        successUnsaved = false
        guard persisted != saved || acknowledgedUnsynced else { return }
        successSavedAt = clock.now
        do {
            try await store.saveDestinationState(persisted)
            acknowledgedUnsynced = false
            saved = persisted
        } catch {
            logger.debug("cannot save the upload state: \(error)")
        }
    }

    /// Records an error state; logs it and runs the alert command once per change of state or code.
    private func report(state: UploadState, code: Int, message: String) async {
        persisted.state = state
        persisted.lastErrorCode = code
        persisted.lastErrorMessage = message
        persisted.lastErrorAt = SystemClock.now()
        await save()
        if let last = lastReported, last.state == state, last.code == code { return }
        lastReported = (state, code)
        let label = code >= 1000 ? "\(code) \(NetworkErrorCode.name(code))" : "\(code)"
        switch state {
        case .retrying: logger.warning("error \(label): \(message); retrying")
        case .recovering: logger.warning("error \(label): \(message); waiting for the network")
        default: logger.error("error \(label): \(message)")
        }
        if let command = settings.onNetworkError {
            let counts = try? await store.unsentCounts(name)
            let pending = (counts?.pending ?? 0) + (counts?.inFlight ?? 0)
            AlertCommand(command: command).run(code: code, message: message, pending: pending)
        }
    }
}

