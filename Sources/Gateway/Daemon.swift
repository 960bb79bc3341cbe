import GatewayCore
import GlucoseProfile
import Meters
import Support
import Synchronization

/// `glucose-gateway run`: keeps the adapter looking for meters, downloads from each paired meter as soon
/// as it shows up (one session per meter at a time), uploads continuously, and follows bluetoothd and the
/// adapter through restarts and hot-plugs. Event-driven: between events it sleeps.
public actor GatewayDaemon {
    private let radio: any MeterRadio
    private let store: any DaemonStore
    private var uploads: any DaemonUploads
    private var settings: DaemonSettings
    private let logger: Logger
    /// Where each snapshot goes: the run command's `SnapshotFeed`, which every service follows.
    private let publishSnapshot: @Sendable (DaemonSnapshot) -> Void
    private let now: @Sendable () -> UnixMillis
    /// Monotonic time for every wait and period of the daemon (quiet period, retry delay, stop grace, health
    /// checks, rechecks): `ContinuousClock` in the product, a `ManualClock` in tests. A download keeps its
    /// own clock (`MeterDownload`).
    private let clock: any SessionClock

    private struct Session {
        let task: Task<Void, Never>
        var link: StoppableLink?
    }

    private var snapshot = DaemonSnapshot()
    private var paired: [String: MeterInfo] = [:]
    /// When to try which meter next.
    private var schedule: MeterSchedule
    private var sessions: [String: Session] = [:]
    private var watchingAdapter: String?
    private var uploadTask: Task<Void, Never>?
    private var stopRequested = false
    private var pendingConnected: Set<String> = []
    private var watchRetryScheduled = false
    private var recheckScheduled: Set<String> = []
    /// Meters another process (a manual `sync`) was downloading from when they appeared: they are tried again
    /// after `retryDelay` for as long as that process holds the meter's lock, since the meter is present and
    /// may advertise no more once that download ends.
    private var busyRetry: Set<String> = []
    /// Refusals of the stored key not yet taken for a lost bond.
    private var bondLoss = BondLossConfirmation()
    public static let bondLossConfirmation = BondLossConfirmation.period
    private var busLost = false
    private var stopWaiters: [CheckedContinuation<Void, Never>] = []
    private var publishScheduled = false
    private var ready = false
    private var healthTask: Task<Void, Never>?
    private var checkingBluetoothd = false
    /// When the daemon's own loop last ran its health check: the watchdog is fed only while it does.
    private nonisolated let lastBeat: Mutex<ContinuousClock.Instant>

    public init(radio: any MeterRadio, store: any DaemonStore, uploads: any DaemonUploads, settings: DaemonSettings,
                logger: Logger, snapshots: @escaping @Sendable (DaemonSnapshot) -> Void = { _ in }, pid: Int32 = 0,
                now: @escaping @Sendable () -> UnixMillis = SystemClock.now, clock: any SessionClock = ContinuousClock()) {
        self.clock = clock
        self.lastBeat = Mutex(clock.now)
        self.radio = radio
        self.store = store
        self.uploads = uploads
        self.settings = settings
        self.schedule = MeterSchedule(settings)
        self.logger = logger
        self.publishSnapshot = snapshots
        self.now = now
        snapshot.pid = pid
        snapshot.startedAt = now()
    }

    // MARK: - Lifecycle

    /// Why `run()` returned.
    public enum End: Sendable, Equatable {
        /// `stop()` was called (a signal).
        case stopped
        /// The bus connection was lost; the service manager should start the gateway again.
        case busLost
    }

    /// Runs until `stop()`; then aborts running downloads cleanly (RACP abort, commit, disconnect) and
    /// returns within `stopGrace` plus a little.
    @discardableResult
    public func run() async -> End {
        let events = await radio.events()
        await loadPaired(force: true)
        await prepareUploads()
        startUploads()
        await ensureWatching()
        snapshot.phase = .running
        await publish()
        ready = true
        logger.notice("running: \(snapshot.statusLine)")

        let pump = Task { [weak self] in
            for await event in events {
                guard let self else { return }
                await self.handle(event)
            }
            await self?.radioEnded()
        }
        startHealthChecks()
        await waitForStop()
        pump.cancel()
        healthTask?.cancel()
        await shutdown()
        return busLost ? .busLost : .stopped
    }

    /// Asks `run()` to finish (SIGTERM, SIGINT).
    public func stop() {
        guard !stopRequested else { return }
        stopRequested = true
        for waiter in stopWaiters { waiter.resume() }
        stopWaiters.removeAll()
    }

    private func waitForStop() async {
        if stopRequested { return }
        await withCheckedContinuation { stopWaiters.append($0) }
    }

    private func radioEnded() {
        guard !stopRequested else { return }
        busLost = true
        logger.error("the connection to the system bus was lost; stopping so the service manager restarts the gateway")
        stop()
    }

    private func shutdown() async {
        snapshot.phase = .stopping
        snapshot.updatedAt = now()
        publishSnapshot(snapshot)
        logger.notice("stopping: \(sessions.count) download(s) to end")
        let running = sessions
        // Abort every running procedure first (the meter stops sending), then end the sessions: each
        // commits what it received, stops notifications and disconnects.
        await withTaskGroup(of: Void.self) { group in
            for (_, session) in running {
                if let link = session.link {
                    group.addTask { [clock] in await link.abortProcedure(timeout: .milliseconds(800), clock: clock) }
                }
            }
        }
        for (_, session) in running { session.link?.end(reason: "gateway stopping") }
        let deadline = clock.now.advanced(by: settings.stopGrace)
        var leftUp: [String] = []
        for (address, session) in running {
            let finished = await Self.wait(for: session.task, until: deadline, on: clock)
            if !finished {
                logger.warning("meter \(address): the download did not end in time; leaving it")
                session.task.cancel()
                leftUp.append(address)
            }
        }
        if await !LeftoverLinks.disconnect(leftUp, radio: radio, clock: clock, within: settings.stopDisconnectWait) {
            logger.warning("disconnecting \(leftUp.joined(separator: ", ")) did not end in time; leaving it")
        }
        uploadTask?.cancel()
        if let uploadTask { _ = await Self.wait(for: uploadTask, until: clock.now.advanced(by: .milliseconds(800)), on: clock) }
        await radio.close()
        snapshot.phase = .stopped
        snapshot.activeSessions = []
        await refreshUploadState()
        snapshot.updatedAt = now()
        publishSnapshot(snapshot)
        logger.notice("stopped")
    }

    // MARK: - Health

    /// Every `healthInterval`: notes that the daemon's loop runs (for the watchdog) and asks bluetoothd
    /// for a sign of life. The check runs in its own task and is bounded by `bluetoothdAnswerTimeout`, so
    /// a hung bluetoothd never blocks the daemon.
    private func startHealthChecks() {
        let clock = self.clock
        healthTask = Task { [weak self] in
            while !Task.isCancelled {
                guard let interval = await self?.settings.healthInterval else { return }
                do { try await clock.sleep(until: clock.now + interval) } catch { return }
                await self?.checkHealth()
            }
        }
    }

    /// Whether the daemon's loop ran its health check within `window` (the watchdog's `alive`).
    ///
    /// The watchdog follows the gateway itself, not bluetoothd: while bluetoothd hangs the daemon still
    /// uploads what it stored and reports the condition, and a restart of the gateway would not revive
    /// bluetoothd, so the pings go on; they stop only when the daemon's own loop no longer runs.
    public nonisolated func isResponsive(within window: Duration) -> Bool {
        let last = lastBeat.withLock { $0 }
        return clock.now - last <= window
    }

    func checkHealth() async {
        let beat = clock.now
        lastBeat.withLock { $0 = beat }
        guard !stopRequested, !checkingBluetoothd else { return }
        guard snapshot.radio.bluetoothdRunning else {
            if !snapshot.bluetoothdAnswering {
                snapshot.bluetoothdAnswering = true
                await publish()
            }
            return
        }
        checkingBluetoothd = true
        let timeout = settings.bluetoothdAnswerTimeout
        let answers = await radio.bluetoothdAnswers(timeout: timeout)
        checkingBluetoothd = false
        guard answers != snapshot.bluetoothdAnswering, !stopRequested else { return }
        snapshot.bluetoothdAnswering = answers
        if answers {
            logger.notice("bluetoothd answers again")
        } else {
            let message = "bluetoothd holds org.bluez but did not answer within \(timeout); meters cannot be reached until it is restarted (systemctl restart bluetooth; a kernel Bluetooth bug can cause this)"
            logger.error(message)
            raise(DaemonAlert.bluetoothdNotAnswering, message)
        }
        await publish()
    }

    // MARK: - Reload

    /// SIGHUP with a valid new configuration: new settings and a new upload side; the adapter is looked
    /// at again. Running downloads finish under the settings they started with.
    public func reload(settings newSettings: DaemonSettings, uploads newUploads: any DaemonUploads) async {
        let adapterChanged = newSettings.adapter != settings.adapter || newSettings.scanMode != settings.scanMode
        settings = newSettings
        schedule.update(newSettings)
        snapshot.counters.reloads += 1
        snapshot.lastReloadError = nil
        if let uploadTask {
            uploadTask.cancel()
            _ = await Self.wait(for: uploadTask, until: clock.now.advanced(by: .seconds(2)), on: clock)
        }
        uploads = newUploads
        await prepareUploads()
        startUploads()
        if adapterChanged { watchingAdapter = nil }
        await loadPaired(force: true)
        await ensureWatching()
        logger.notice("configuration reloaded")
        await publish()
    }

    /// SIGHUP with a configuration that does not load: reported, the running one kept.
    public func reloadFailed(_ message: String) async {
        snapshot.lastReloadError = message
        logger.error("configuration not reloaded, keeping the running one: \(message)")
        await publish()
    }

    private func startUploads() {
        let current = uploads
        uploadTask = Task { await current.run() }
    }

    /// Reports a queue that cannot be prepared; the uploads run anyway.
    private func prepareUploads() async {
        do {
            try await uploads.prepare()
        } catch {
            logger.error("upload queue: \(error)")
        }
    }

    // MARK: - Events

    func handle(_ event: RadioEvent) async {
        guard !stopRequested else { return }
        switch event {
        case .bluetoothdStopped:
            logger.warning("bluetoothd stopped; waiting for it to return")
            watchingAdapter = nil
            snapshot.watching = nil
            snapshot.radio = await radio.state(adapter: settings.adapter)
            await publish()
        case .bluetoothdStarted:
            if snapshot.radio.bluetoothdRunning == false && ready {
                snapshot.counters.bluetoothdRestarts += 1
            }
            logger.notice("bluetoothd is running")
            watchingAdapter = nil
            await ensureWatching()
            await publish()
        case .adaptersChanged:
            await ensureWatching()
            await publish()
        case .meterSeen(let address, let connected):
            await meterSeen(address.uppercased(), connected: connected)
        }
    }

    /// Makes sure the adapter is looking for meters; a no-op when it already is.
    private func ensureWatching() async {
        var state = await radio.state(adapter: settings.adapter)
        if state.bluetoothdRunning, state.adapter != nil, !state.adapterPowered, state.powerState != "off-blocked" {
            await radio.powerOn(adapter: settings.adapter)
            state = await radio.state(adapter: settings.adapter)
        }
        let previous = snapshot.radio
        snapshot.radio = state
        guard state.bluetoothdRunning else {
            if previous.bluetoothdRunning || !ready { logger.warning("bluetoothd is not running; waiting for it") }
            watchingAdapter = nil
            snapshot.watching = nil
            return
        }
        guard let adapter = state.adapter, state.adapterPowered else {
            if previous.adapter != nil || !ready {
                let what = settings.adapter.map { "adapter \($0)" } ?? "Bluetooth adapter"
                let why = state.powerState == "off-blocked" ? " (blocked by rfkill)" : ""
                logger.warning("no powered \(what)\(why); waiting for one to be plugged in or powered")
            }
            watchingAdapter = nil
            snapshot.watching = nil
            return
        }
        guard watchingAdapter != adapter else { return }
        let stale = await radio.closeStale(addresses: Array(paired.keys).sorted())
        for address in stale { logger.notice("meter \(address): closed a connection left from before") }
        do {
            let mode = try await radio.startWatching(adapter: adapter, mode: settings.scanMode)
            watchingAdapter = adapter
            snapshot.watching = mode
            snapshot.radio = await radio.state(adapter: settings.adapter)
            logger.notice("watching for meters on \(adapter) (\(mode.rawValue))")
        } catch {
            logger.warning("cannot watch for meters on \(adapter): \(error.message); trying again in \(settings.retryDelay)")
            watchingAdapter = nil
            snapshot.watching = nil
            scheduleWatchRetry()
        }
    }

    /// After a failed attempt to watch (the adapter vanished meanwhile, bluetoothd busy), one more look
    /// after `retryDelay`, as long as attempts keep failing.
    private func scheduleWatchRetry() {
        guard !watchRetryScheduled else { return }
        watchRetryScheduled = true
        let delay = settings.retryDelay
        Task { [weak self, clock] in
            try? await clock.sleep(for: delay)
            await self?.watchRetry()
        }
    }

    private func watchRetry() async {
        watchRetryScheduled = false
        guard !stopRequested, watchingAdapter == nil else { return }
        await ensureWatching()
        await publish()
    }

    private func loadPaired(force: Bool) async {
        if !force, !schedule.pairedListIsStale(at: clock.now) { return }
        do {
            let list = try await store.pairedMeters()
            var map: [String: MeterInfo] = [:]
            for m in list { map[m.address.uppercased()] = m }
            paired = map
            schedule.pairedListRead(at: clock.now)
            snapshot.pairedMeters = map.count
            snapshot.repairNeeded = map.values.filter { $0.bondLostAt != nil }.map(\.address).sorted()
        } catch {
            logger.error("cannot read the paired meters: \(error)")
        }
    }

    private func meterSeen(_ address: String, connected: Bool) async {
        let seenAt = clock.now
        guard sessions[address] == nil else {
            // bluetoothd (profile mode) may connect the meter again while our session is still closing.
            if connected { pendingConnected.insert(address) }
            return
        }
        if paired[address] == nil {
            // Perhaps paired since the list was read; look again, but not on every advertisement.
            guard schedule.shouldLookUp(unknown: address, at: seenAt) else { return }
            await loadPaired(force: true)
            guard paired[address] != nil, sessions[address] == nil else { return }
        }
        guard let meter = paired[address] else { return }
        // A meter that lost its bond refuses every connection until it is paired again: left alone.
        guard meter.bondLostAt == nil else { return }
        if let wait = schedule.waitsUntil(address, at: clock.now) {
            // A link bluetoothd brought up during the quiet period is looked at when the period ends, once.
            if connected { scheduleRecheck(address, at: wait) }
            return
        }
        startSession(meter, seenAt: seenAt)
    }

    // MARK: - Sessions

    private func startSession(_ meter: MeterInfo, seenAt: ContinuousClock.Instant) {
        let address = meter.address.uppercased()
        let settings = self.settings
        let logger = self.logger.with(label: "meter")
        let clock = self.clock
        // Held until the session ends: another process (a manual `sync`) downloading from the same meter
        // would have its procedure aborted by ours.
        var session = MeterSession(radio: radio, download: MeterDownload(store: store, options: settings.download, logger: logger, now: now),
                                   connectTimeout: settings.connectTimeout, lockDatabase: settings.sessionLockDatabase)
        session.recordsBondLoss = false
        let task = Task { [weak self] in
            let reaction = seenAt.duration(to: clock.now)
            await self?.noteReaction(reaction)
            let outcome = await session.run(meter, ifLockFails: .proceed(warn: { error in
                logger.warning("\(address): cannot take the meter's lock file (\(error)); downloading anyway")
            }), connected: { [weak self] link in
                let stoppable = StoppableLink(link)
                guard await self?.attach(stoppable, to: address) == true else { return nil }
                logger.info("\(address): connected \(reaction.wholeMilliseconds) ms after it was seen; downloading")
                return stoppable
            })
            switch outcome {
            case .busy:
                logger.info("\(address): another glucose-gateway process is downloading from this meter; trying again later")
                await self?.sessionEnded(address, failure: .busy, complete: false, stored: 0)
            case .lockFailed, .declined:
                return
            case .notSeen(let error):
                logger.warning("\(address): cannot connect: \(error.message)")
                await self?.sessionEnded(address, failure: .timeout, complete: false, stored: 0)
            case .unreachable(let error) where error.kind == .bondLost || error.keyRefusals > 0:
                // A connection refused at the key and then run into the meter's pause (it advertises in
                // bursts) is evidence too: a failed connect is no working connection.
                if error.kind != .bondLost { logger.warning("\(address): cannot connect: \(error.message)") }
                if await self?.bondLossConfirmed(address) == true {
                    let message = error.kind == .bondLost ? error.message : BondLossConfirmation.message(address)
                    await session.recordBondLost(meter, address: address, message)
                    await self?.bondLost(address, message: message)
                }
                await self?.sessionEnded(address, failure: .bondLost, complete: false, stored: 0)
            case .unreachable(let error):
                logger.warning("\(address): cannot connect: \(error.message)")
                await self?.sessionEnded(address, failure: SessionFailure(error.kind), complete: false, stored: 0)
            case .downloaded(let report):
                var line = "\(address): \(report.outcome); \(report.received) received, \(report.stored) new"
                if report.duplicates > 0 { line += ", \(report.duplicates) already stored" }
                if report.conflicts > 0 { line += ", \(report.conflicts) conflicting with a stored reading (kept, not uploaded)" }
                logger.notice(line)
                let failure: SessionFailure? = report.outcome.isComplete ? nil : .interrupted
                await self?.sessionEnded(address, failure: failure, complete: report.outcome.isComplete, stored: report.stored)
            case .failed(let error):
                // A store failure (a full disk) loses nothing: the meter keeps its records.
                let kept = error.kind == .store ? "; the meter keeps its records, and they are downloaded at its next connection" : ""
                logger.warning("\(address): download failed: \(error.message)\(kept)")
                await self?.sessionEnded(address, failure: error.kind == .store ? .store : .meter, complete: false, stored: error.stored)
            }
        }
        sessions[address] = Session(task: task, link: nil)
        snapshot.activeSessions = sessions.keys.sorted()
    }

    private func bondLossConfirmed(_ address: String) -> Bool {
        let confirmed = bondLoss.refused(address, at: clock.now)
        if !confirmed { logger.warning("\(address): the meter refused this gateway's key; trying again before calling the bond lost") }
        return confirmed
    }

    /// The meter lost its bond: state `re-pair needed`, kept in the store (so a restart does not try it
    /// again, nor alert again), an error line and the meter alert, once. The daemon does not
    /// connect to it again until `pair` clears the state.
    private func bondLost(_ address: String, message: String) async {
        // The session stored the state and the event (`MeterSession`); the daemon keeps it in its list too.
        let at = now()
        let known = paired[address]?.bondLostAt != nil
        if !known { paired[address]?.bondLostAt = at }
        paired[address]?.bondLostMessage = message
        snapshot.repairNeeded = paired.values.filter { $0.bondLostAt != nil }.map(\.address).sorted()
        let line = "\(address): re-pair needed: \(message); not connecting to it until it is paired again: glucose-gateway pair \(address) --pin PIN"
        logger.error(line)
        if !known { raise(DaemonAlert.meterBondLost, line, meter: address) }
    }

    private func noteReaction(_ reaction: Duration) {
        snapshot.lastReactionMs = Int(reaction.wholeMilliseconds)
    }

    private func attach(_ link: StoppableLink, to address: String) -> Bool {
        // A link that comes up while the daemon stops starts no download: the session disconnects it at
        // once, while its own bus calls still run (the stop grace would cancel them).
        guard !stopRequested, var session = sessions[address] else { return false }
        session.link = link
        sessions[address] = session
        bondLoss.worked(address)
        snapshot.counters.connects += 1
        return true
    }

    private func sessionEnded(_ address: String, failure: SessionFailure?, complete: Bool, stored: Int) async {
        sessions[address] = nil
        snapshot.activeSessions = sessions.keys.sorted()
        if let failure { snapshot.counters.failures[failure.rawValue, default: 0] += 1 }
        if complete { snapshot.counters.downloads += 1 }
        snapshot.counters.readingsStored += stored
        let next = schedule.sessionEnded(address, complete: complete, at: clock.now)
        if pendingConnected.remove(address) != nil { scheduleRecheck(address, at: next) }
        if failure == .busy {
            busyRetry.insert(address)
            scheduleRecheck(address, at: next)
        }
        if stored > 0 { uploads.readingsStored() }
        await loadPaired(force: true)
        await publish()
    }

    private func scheduleRecheck(_ address: String, at instant: ContinuousClock.Instant) {
        guard recheckScheduled.insert(address).inserted else { return }
        Task { [weak self, clock] in
            try? await clock.sleep(until: instant)
            await self?.recheck(address)
        }
    }

    private func recheck(_ address: String) async {
        recheckScheduled.remove(address)
        guard !stopRequested, sessions[address] == nil else { return }
        if busyRetry.remove(address) != nil {
            await meterSeen(address, connected: false)
            return
        }
        if await radio.isConnected(address: address) { await meterSeen(address, connected: true) }
    }

    // MARK: - Other writers

    /// Some process wrote to the database (the run command's file watch; the daemon's own writes too).
    /// When another process committed (a manual `sync` stored readings while the daemon holds the upload
    /// lock, `pair` added a meter), what it queued is uploaded now and the paired meters and status are
    /// read again.
    public func databaseWritten() async {
        guard !stopRequested else { return }
        let changed: Bool
        do {
            changed = try await store.changedByOtherProcesses()
        } catch {
            logger.warning("cannot tell whether another process wrote to the database: \(error)")
            return
        }
        guard changed else { return }
        snapshot.counters.otherWrites += 1
        logger.info("another process wrote to the database; uploading what it queued")
        uploads.readingsStored()
        await loadPaired(force: true)
        await publish()
    }

    // MARK: - Status

    /// Something changed in the upload queue: publish a new snapshot soon (changes coalesce).
    public func uploadStateChanged() {
        guard !publishScheduled else { return }
        publishScheduled = true
        Task { [weak self, clock] in
            try? await clock.sleep(for: .milliseconds(200))
            await self?.publishScheduledNow()
        }
    }

    private func publishScheduledNow() async {
        publishScheduled = false
        await publish()
    }

    public func currentSnapshot() -> DaemonSnapshot { snapshot }

    private func refreshUploadState() async {
        var list: [DestinationSnapshot] = []
        for name in settings.destinations {
            let counts = (try? await store.counts(name)) ?? OutboxCounts()
            let state = try? await store.destinationState(name)
            list.append(DestinationSnapshot(name: name, counts: counts, state: state ?? nil))
        }
        snapshot.destinations = list
        if let totals = try? await store.readingTotals() {
            snapshot.readingsTotal = totals.stored
            snapshot.readingsExcluded = totals.excluded
        }
    }

    private func publish() async {
        await refreshUploadState()
        snapshot.updatedAt = now()
        publishSnapshot(snapshot)
    }

    /// A condition that needs a person: carried by the snapshots from now on (see `RaisedAlert`), and
    /// published at once, so the alert command runs when the condition is found, not at the next snapshot.
    private func raise(_ code: Int, _ message: String, meter: String? = nil) {
        snapshot.raise(code, message, meter: meter)
        snapshot.updatedAt = now()
        publishSnapshot(snapshot)
    }
}
