import CMosquitto
import Dispatch
import Support
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An MQTT 3.1.1 client over libmosquitto, loaded at run time on the first `start()`.
///
/// One dedicated thread runs the connection (`mosquitto_loop`), connects, reconnects with backoff, and
/// receives the broker's acknowledgements; libmosquitto is put in threaded mode, so `publish` may be
/// called from any task. Every publish is QoS 1 and `publish(_:timeoutMs:)` returns only when the broker
/// acknowledged it (PUBACK), or with the reason it did not.
///
/// The *retained set* is what the broker should hold whatever happens to it: on every (re)connection the
/// client publishes it again (a broker restarted without persistence has lost its retained messages),
/// followed by the birth message (availability "online"). The last will (availability "offline") is set
/// before connecting; a clean `stop()` publishes it itself, since a clean disconnect does not send it.
public final class MQTTClient: Sendable {
    public let settings: MQTTBrokerSettings
    /// The retained birth message and, with payload `offlinePayload`, the last will; nil: none.
    public let availabilityTopic: String?
    public static let onlinePayload = "online"
    public static let offlinePayload = "offline"

    private let core: Core
    private static let libraryLoaded: Bool = gg_mosq_load() == 1

    public init(settings: MQTTBrokerSettings, availabilityTopic: String?, logger: Logger) {
        self.settings = settings
        self.availabilityTopic = availabilityTopic
        self.core = Core(settings: settings, availabilityTopic: availabilityTopic, logger: logger.with(label: "mqtt"))
    }

    /// `action` runs on the connection thread after each successful connection (the uploader resumes
    /// the queue from there); it must not block.
    public func whenConnected(_ action: @escaping @Sendable () -> Void) {
        core.onConnected.withLock { $0 = action }
    }

    deinit {
        core.shutdownNow()
    }

    public var state: MQTTConnectionState { core.state.withLock { $0.connection } }
    public var isConnected: Bool { state == .connected }

    /// Starts the connection thread (once; later calls do nothing). False when libmosquitto cannot be loaded.
    @discardableResult
    public func start() -> Bool {
        guard Self.libraryLoaded else {
            core.state.withLock { $0.connection = .disconnected(Self.missingLibrary) }
            return false
        }
        return core.start()
    }

    /// Cuts a reconnection wait short: a publisher needs the broker now (the dispatcher's own backoff
    /// decides how often that is).
    public func reconnectNow() { core.kick() }

    /// The system's trusted certificate authorities, hashed (ca-certificates).
    static let systemCertificates = "/etc/ssl/certs"

    static let missingLibrary = "libmosquitto is not installed (Debian package libmosquitto1)"

    /// Connection attempts that failed and connections that broke, since the client was made.
    public var failureCount: Int { core.failures.load(ordering: .acquiring) }

    /// Waits until connected, refused, or `timeoutMs` passed; returns the state then. With `failuresBefore`
    /// (a `failureCount` read before), also until a later attempt failed.
    public func waitForConnection(timeoutMs: Int, failuresBefore: Int? = nil) async -> MQTTConnectionState {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .milliseconds(timeoutMs))
        while true {
            let s = state
            switch s {
            case .connected, .refused: return s
            case .disconnected where failuresBefore.map { failureCount > $0 } ?? false: return s
            default: break
            }
            if clock.now >= deadline || Task.isCancelled { return s }
            let woken = await core.connectSignal.wait(timeoutMs: min(timeoutMs, 200))
            _ = woken
        }
    }

    /// Publishes with QoS 1 and waits for the broker's PUBACK, at most `timeoutMs`.
    public func publish(_ message: MQTTMessage, timeoutMs: Int) async -> Result<Void, MQTTPublishError> {
        switch state {
        case .connected: break
        case .refused(let code, let text): return .failure(.refused(code: code, text))
        case .disconnected(let why): return .failure(.notConnected(why))
        case .idle, .connecting: return .failure(.notConnected("connecting"))
        }
        let mid: Int32
        switch core.send(message) {
        case .failure(let error): return .failure(error)
        case .success(let m): mid = m
        }
        let waiter = Waiter()
        let timeout = Task {
            try? await Task.sleep(for: .milliseconds(max(1, timeoutMs)))
            self.core.expire(mid, waiter: waiter)
        }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, MQTTPublishError>, Never>) in
            core.await(mid, waiter: waiter, continuation: continuation)
        }
        timeout.cancel()
        return result
    }

    /// Keeps `message` (retained) in the set published on every connection, and publishes it now when
    /// connected and it changed. Returns without waiting for the acknowledgement.
    public func setRetained(_ message: MQTTMessage) {
        var retained = message
        retained.retain = true
        let changed = core.state.withLock { s -> Bool in
            if let i = s.retained.firstIndex(where: { $0.topic == retained.topic }) {
                if s.retained[i] == retained { return false }
                s.retained[i] = retained
            } else {
                s.retained.append(retained)
            }
            return s.connection == .connected
        }
        if changed, case .success(let mid) = core.send(retained) { core.forget(mid) }
    }

    /// Drops `topic` from the set published on every connection (its clearing is the caller's).
    public func removeRetained(_ topic: String) {
        core.state.withLock { s in s.retained.removeAll { $0.topic == topic } }
    }

    /// Publishes the availability "offline" (when connected), disconnects and ends the connection thread.
    public func stop() async {
        if isConnected, let topic = availabilityTopic {
            _ = await publish(MQTTMessage(topic: topic, text: Self.offlinePayload, retain: true), timeoutMs: 2000)
        }
        await core.stop()
    }
}

/// The libmosquitto handle and everything the connection thread and the publishers share.
///
/// The handle is used from the connection thread (connect, loop, callbacks, with the pointer libmosquitto
/// passes them) and from publishers and `stop()` under `handleLock`, which `release()` also takes, so
/// nobody calls into a destroyed handle. The loop thread ends before `release()` runs.
/// (`mosquitto_publish`, `mosquitto_disconnect`): libmosquitto in threaded mode guards those with its
/// own mutexes. The Swift state is behind one Mutex, never held across a libmosquitto call.
private final class Core: @unchecked Sendable {
    struct State {
        var connection: MQTTConnectionState = .idle
        var started = false
        var stopping = false
        var retained: [MQTTMessage] = []
        /// Publishes waiting for their PUBACK, by message id.
        var waiting: [Int32: (waiter: Waiter, continuation: CheckedContinuation<Result<Void, MQTTPublishError>, Never>)] = [:]
        /// PUBACKs that came before their publisher started waiting.
        var early: Set<Int32> = []
        /// Message ids nobody waits for (timed out, or retained messages sent without waiting).
        var abandoned: Set<Int32> = []
        var loopEnded: CheckedContinuation<Void, Never>?
        var loopDone = false
        var backoff = ReconnectBackoff()
        /// The failure last logged; the same one is not logged again while the broker flaps.
        var lastLoggedFailure: String?
        /// Why the current attempt's TLS handshake failed, when libmosquitto's log said.
        var tlsCause: String?
    }

    let state = Mutex(State())
    let settings: MQTTBrokerSettings
    let availabilityTopic: String?
    let logger: Logger
    let onConnected = Mutex<(@Sendable () -> Void)?>(nil)
    let connectSignal = Signal()
    let failures = Atomic<Int>(0)
    /// Wakes the connection thread out of its reconnect wait when stopping.
    private let wake = DispatchSemaphore(value: 0)
    /// Wakes the connection thread's poll when a publisher queued a message.
    private let publishWake = WakePipe()
    private struct Handle: @unchecked Sendable {
        // @unchecked: libmosquitto in threaded mode serialises its own use of the handle.
        let pointer: OpaquePointer
    }
    private let handleLock = Mutex<Handle?>(nil)
    /// The handle, for the connection thread: set before the thread starts, destroyed after it ended.
    private var loopHandle: OpaquePointer? { handleLock.withLock { $0?.pointer } }
    private var retainedSelf: Unmanaged<Core>?

    init(settings: MQTTBrokerSettings, availabilityTopic: String?, logger: Logger) {
        self.settings = settings
        self.availabilityTopic = availabilityTopic
        self.logger = logger
    }

    func start() -> Bool {
        let first = state.withLock { s -> Bool in
            if s.started { return false }
            s.started = true
            s.connection = .connecting
            return true
        }
        guard first else { return loopHandle != nil }
        let me = Unmanaged.passRetained(self)
        guard let m = gg_mosq_new(settings.clientID, me.toOpaque()) else {
            me.release()
            state.withLock { $0.connection = .disconnected("cannot create an MQTT client") }
            return false
        }
        retainedSelf = me
        handleLock.withLock { $0 = Handle(pointer: m) }
        configure(m)
        let thread = DispatchQueue(label: "glucose-gateway.mqtt")
        thread.async { self.run() }
        return true
    }

    /// Sets every option on a new (or reinitialised) handle.
    private func configure(_ m: OpaquePointer) {
        _ = gg_mosq_protocol_v311(m)
        _ = gg_mosq_threaded_set(m)
        gg_mosq_callbacks_set(m, mqttOnConnect, mqttOnDisconnect, mqttOnPublish)
        gg_mosq_log_callback_set(m, mqttOnLog)
        if let user = settings.username {
            _ = gg_mosq_username_pw_set(m, user, settings.password?.value)
        }
        if settings.tls {
            // Peer and host name are always verified: against `ca_file`, else Debian's system store.
            if let ca = settings.caFile {
                if gg_mosq_tls_set(m, ca, nil) != MOSQ_ERR_SUCCESS.rawValue {
                    state.withLock { $0.tlsCause = "the CA file (ca_file) cannot be read" }
                }
            } else {
                _ = gg_mosq_tls_set(m, nil, MQTTClient.systemCertificates)
                _ = gg_mosq_use_os_certs(m)
            }
        }
        if let topic = availabilityTopic {
            let payload = Array(MQTTClient.offlinePayload.utf8)
            _ = payload.withUnsafeBytes { gg_mosq_will_set(m, topic, Int32($0.count), $0.baseAddress, 1, true) }
        }
    }

    /// The connection thread: connect, loop until the connection ends, wait, reconnect.
    ///
    /// Each attempt after the first starts from a reinitialised handle: libmosquitto keeps every
    /// unacknowledged QoS 1 message of a broken connection to send it again, without limit, while the
    /// client republishes its retained set itself on each connection and the dispatcher sends reading
    /// events again from the outbox. So what is queued for the broker is at most one connection's worth.
    private func run() {
        guard let m = loopHandle else { return }
        let clock = ContinuousClock()
        var firstAttempt = true
        while !state.withLock({ $0.stopping }) {
            if !firstAttempt {
                handleLock.withLock { _ in
                    _ = gg_mosq_reinitialise(m, settings.clientID, Unmanaged.passUnretained(self).toOpaque())
                }
                state.withLock { s in
                    s.early.removeAll()
                    s.abandoned.removeAll()
                }
                configure(m)
            }
            firstAttempt = false
            state.withLock { $0.tlsCause = nil }
            let rc = gg_mosq_connect_async(m, settings.host, Int32(settings.port), Int32(settings.keepAliveSeconds))
            if rc == MOSQ_ERR_SUCCESS.rawValue {
                let started = clock.now
                while !state.withLock({ $0.stopping }) {
                    let loopRC = loopOnce(m, timeoutMs: 1000)
                    let connected = state.withLock { $0.connection == .connected }
                    if loopRC != MOSQ_ERR_SUCCESS.rawValue {
                        noteFailure(describe(loopRC))
                        break
                    }
                    if connected {
                        let regained = state.withLock { s -> Bool in
                            let wasFlapping = s.backoff.flapping
                            return s.backoff.holds(at: clock.now) && wasFlapping
                        }
                        if regained { logger.notice("the connection to \(settings.origin) has held for a minute again") }
                    } else if clock.now - started > .seconds(max(5, settings.keepAliveSeconds)) {
                        noteFailure("no answer from the broker (connect timed out)")
                        _ = gg_mosq_disconnect(m)
                        _ = gg_mosq_loop(m, 10)
                        break
                    }
                }
            } else {
                noteFailure(describe(rc))
            }
            failWaiters(.connectionLost)
            if state.withLock({ $0.stopping }) { break }
            let (wait, startsFlapping, count) = state.withLock { s -> (Duration, Bool, Int) in
                let before = s.backoff.flapping
                var refused = false
                if case .refused = s.connection { refused = true }
                let wait = s.backoff.ended(at: clock.now, refused: refused)
                return (wait, !before && s.backoff.flapping, s.backoff.shortLived)
            }
            if startsFlapping {
                logger.warning("\(settings.origin) closed \(count) connections in a row soon after accepting them; "
                               + "connecting again with growing waits (up to \(ReconnectBackoff.longest))")
            }
            let ms = Int(wait.components.seconds) * 1000 + Int(wait.components.attoseconds / 1_000_000_000_000_000)
            _ = wake.wait(timeout: .now() + .milliseconds(ms))
        }
        let resume = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.loopDone = true
            let c = s.loopEnded
            s.loopEnded = nil
            return c
        }
        resume?.resume()
    }

    /// One turn of the connection: waits (at most `timeoutMs`) for the socket or a publisher, refuses
    /// unsolicited inbound packets on a plain TCP connection, then lets libmosquitto read, write and ping.
    private func loopOnce(_ m: OpaquePointer, timeoutMs: Int32) -> Int32 {
        let fd = gg_mosq_socket(m)
        guard fd >= 0, !settings.tls else { return gg_mosq_loop(m, timeoutMs) }
        var fds = [pollfd(fd: fd, events: Int16(POLLIN) | (gg_mosq_want_write(m) ? Int16(POLLOUT) : 0), revents: 0),
                   pollfd(fd: publishWake.readEnd, events: Int16(POLLIN), revents: 0)]
        let n = poll(&fds, 2, timeoutMs)
        if n > 0, fds[1].revents != 0 { publishWake.drain() }
        if n > 0, fds[0].revents & Int16(POLLIN) != 0 {
            var peeked = [UInt8](repeating: 0, count: 64)
            let got = peeked.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) }
            if got > 0, let problem = InboundGuard.problem(Array(peeked.prefix(got))) {
                logger.warning("\(settings.origin): \(problem); the gateway subscribes to nothing, connection closed")
                _ = shutdown(fd, Int32(SHUT_RDWR))
                _ = gg_mosq_disconnect(m)
                return MOSQ_ERR_PROTOCOL.rawValue
            }
        }
        return gg_mosq_loop(m, 0)
    }

    private func noteFailure(_ why: String) {
        let (changed, quiet) = state.withLock { s -> (Bool, Bool) in
            if case .refused = s.connection { return (false, true) }
            let before = s.connection
            s.connection = .disconnected(why)
            return (before != s.connection, s.backoff.flapping && s.lastLoggedFailure == why)
        }
        failures.add(1, ordering: .releasing)
        if changed, !quiet {
            state.withLock { $0.lastLoggedFailure = why }
            logger.warning("\(settings.origin): \(why); connecting again")
        }
        connectSignal.signal()
    }

    /// libmosquitto's text for `rc`, with the cause of a TLS failure where its log named one.
    func describe(_ rc: Int32) -> String {
        if rc == MOSQ_ERR_TLS.rawValue, let cause = state.withLock({ $0.tlsCause }) { return "TLS: \(cause)" }
        return Self.describe(rc)
    }

    static func describe(_ rc: Int32) -> String {
        if rc == MOSQ_ERR_ERRNO.rawValue {
            let e = errno
            switch e {
            case ECONNREFUSED: return "connection refused"
            case ENETUNREACH, EHOSTUNREACH: return "network unreachable"
            case ETIMEDOUT: return "connect timed out"
            default: return String(cString: strerror(e))
            }
        }
        if rc == MOSQ_ERR_EAI.rawValue { return "host name not resolved" }
        if rc == MOSQ_ERR_CONN_LOST.rawValue { return "connection lost" }
        if rc == MOSQ_ERR_NO_CONN.rawValue { return "not connected" }
        return String(cString: gg_mosq_strerror(rc))
    }

    // MARK: callbacks (connection thread)

    func connected(rc: Int32, _ m: OpaquePointer) {
        guard rc == 0 else {
            let text = String(cString: gg_mosq_connack_string(rc))
            state.withLock { $0.connection = .refused(code: Int(rc), text) }
            logger.error("\(settings.origin) refused the connection: \(text) (CONNACK \(rc))")
            connectSignal.signal()
            return
        }
        let (retained, quiet) = state.withLock { s -> ([MQTTMessage], Bool) in
            s.connection = .connected
            s.backoff.connected(at: ContinuousClock.now)
            if !s.backoff.flapping { s.lastLoggedFailure = nil }
            return (s.retained, s.backoff.flapping)
        }
        if quiet {
            logger.debug("connected to \(settings.origin)")
        } else {
            logger.notice("connected to \(settings.origin)")
        }
        for message in retained {
            if case .success(let mid) = Self.publish(m, message) { forget(mid) }
        }
        if let topic = availabilityTopic,
           case .success(let mid) = Self.publish(m, MQTTMessage(topic: topic, text: MQTTClient.onlinePayload, retain: true)) {
            forget(mid)
        }
        connectSignal.signal()
        onConnected.withLock { $0 }?()
    }

    /// libmosquitto's log: only the lines that name why a TLS handshake failed are kept.
    func logged(level: Int32, line: String, _ m: OpaquePointer) {
        guard settings.tls, level == MOSQ_LOG_ERR else { return }
        let verify = Int(gg_mosq_verify_result(m))
        guard let cause = TLSFailure.cause(logLine: line, verifyResult: verify) else { return }
        state.withLock { s in if s.tlsCause == nil { s.tlsCause = cause } }
    }

    func disconnected(rc: Int32) {
        let stopping = state.withLock { $0.stopping }
        if !stopping { noteFailure(rc == 0 ? "disconnected" : "connection lost") }
    }

    func acknowledged(_ mid: Int32) {
        let c = state.withLock { s -> CheckedContinuation<Result<Void, MQTTPublishError>, Never>? in
            if let w = s.waiting.removeValue(forKey: mid) { return w.continuation }
            if s.abandoned.remove(mid) == nil {
                if s.early.count > 4096 { s.early.removeAll() }
                s.early.insert(mid)
            }
            return nil
        }
        c?.resume(returning: .success(()))
    }

    // MARK: publishers

    func send(_ message: MQTTMessage) -> Result<Int32, MQTTPublishError> {
        let result = handleLock.withLock { h -> Result<Int32, MQTTPublishError> in
            guard let m = h?.pointer else { return .failure(.notConnected("not started")) }
            return Self.publish(m, message)
        }
        publishWake.signal()
        return result
    }

    static func publish(_ m: OpaquePointer, _ message: MQTTMessage) -> Result<Int32, MQTTPublishError> {
        var mid: Int32 = 0
        let rc = message.payload.withUnsafeBytes {
            gg_mosq_publish(m, &mid, message.topic, Int32($0.count), $0.baseAddress, 1, message.retain)
        }
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { return .failure(.notConnected(Self.describe(rc))) }
        return .success(mid)
    }

    func await(_ mid: Int32, waiter: Waiter, continuation: CheckedContinuation<Result<Void, MQTTPublishError>, Never>) {
        let now: Result<Void, MQTTPublishError>? = state.withLock { s in
            if s.early.remove(mid) != nil { return .success(()) }
            if waiter.expired.load(ordering: .relaxed) {
                s.abandoned.insert(mid)
                return .failure(.timedOut)
            }
            if s.connection != .connected { return .failure(.connectionLost) }
            s.waiting[mid] = (waiter, continuation)
            return nil
        }
        if let now { continuation.resume(returning: now) }
    }

    /// The publisher's timeout: if it still waits, it stops waiting; a late PUBACK is ignored.
    func expire(_ mid: Int32, waiter: Waiter) {
        let c = state.withLock { s -> CheckedContinuation<Result<Void, MQTTPublishError>, Never>? in
            // Under the lock, so a publisher not yet waiting sees it when it starts to.
            waiter.expired.store(true, ordering: .relaxed)
            guard let w = s.waiting[mid], w.waiter === waiter else { return nil }
            s.waiting.removeValue(forKey: mid)
            if s.abandoned.count > 4096 { s.abandoned.removeAll() }
            s.abandoned.insert(mid)
            return w.continuation
        }
        c?.resume(returning: .failure(.timedOut))
    }

    /// Nobody waits for this message's PUBACK.
    func forget(_ mid: Int32) {
        state.withLock { s in
            if s.early.remove(mid) == nil {
                if s.abandoned.count > 4096 { s.abandoned.removeAll() }
                s.abandoned.insert(mid)
            }
        }
    }

    private func failWaiters(_ error: MQTTPublishError) {
        let all = state.withLock { s -> [CheckedContinuation<Result<Void, MQTTPublishError>, Never>] in
            let list = s.waiting.values.map(\.continuation)
            for mid in s.waiting.keys { s.abandoned.insert(mid) }
            s.waiting.removeAll()
            return list
        }
        for c in all { c.resume(returning: .failure(error)) }
    }

    // MARK: stopping

    func stop() async {
        let running = state.withLock { s -> Bool in
            s.stopping = true
            return s.started && !s.loopDone
        }
        handleLock.withLock { h in if let m = h?.pointer { _ = gg_mosq_disconnect(m) } }
        wake.signal()
        if running {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let done = state.withLock { s -> Bool in
                    if s.loopDone { return true }
                    s.loopEnded = c
                    return false
                }
                if done { c.resume() }
            }
        }
        failWaiters(.connectionLost)
        state.withLock { $0.connection = .disconnected("stopped") }
        release()
    }

    func kick() {
        let waiting = state.withLock { s -> Bool in
            switch s.connection {
            case .disconnected, .refused: return s.started && !s.stopping
            default: return false
            }
        }
        if waiting { wake.signal() }
    }

    /// From deinit: a client dropped without `stop()` ends its thread without waiting for it.
    func shutdownNow() {
        let running = state.withLock { s -> Bool in
            s.stopping = true
            return s.started && !s.loopDone
        }
        if running {
            handleLock.withLock { h in if let m = h?.pointer { _ = gg_mosq_disconnect(m) } }
            wake.signal()
        }
    }

    private func release() {
        let taken = handleLock.withLock { h -> Handle? in
            let old = h
            h = nil
            if let old { gg_mosq_destroy(old.pointer) }
            return old
        }
        guard taken != nil else { return }
        retainedSelf?.release()
        retainedSelf = nil
    }
}

private func core(_ obj: UnsafeMutableRawPointer?) -> Core? {
    guard let obj else { return nil }
    return Unmanaged<Core>.fromOpaque(obj).takeUnretainedValue()
}

private let mqttOnConnect: gg_mosq_event_fn = { mosq, obj, rc in
    guard let mosq else { return }
    core(obj)?.connected(rc: rc, mosq)
}
private let mqttOnDisconnect: gg_mosq_event_fn = { _, obj, rc in core(obj)?.disconnected(rc: rc) }
private let mqttOnPublish: gg_mosq_event_fn = { _, obj, mid in core(obj)?.acknowledged(mid) }
private let mqttOnLog: gg_mosq_log_fn = { mosq, obj, level, text in
    guard let mosq, let text else { return }
    core(obj)?.logged(level: level, line: String(cString: text), mosq)
}
