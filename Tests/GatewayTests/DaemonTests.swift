#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import GlucoseProfile
import SQLiteStore
import Support
import Synchronization
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// What the run command's services make of the daemon's snapshots, recorded as the tests read it: the
/// service manager's status lines (`ServiceManagerNotes`) and the alerts raised, each once.
enum SnapshotLog {
    static func recorder(statuses: StatusLog, alerts: StatusLog, meterAlerts: StatusLog) -> @Sendable (DaemonSnapshot) -> Void {
        let seen = Mutex((notes: ServiceManagerNotes(), alert: 0))
        return { snapshot in
            let (notes, raised) = seen.withLock { state -> ([ServiceManagerNotes.Note], [RaisedAlert]) in
                let raised = snapshot.alerts.filter { $0.number > state.alert }
                state.alert = snapshot.alerts.last?.number ?? state.alert
                return (state.notes.notes(for: snapshot), raised)
            }
            for note in notes { if case .status(let line) = note { statuses.append(line) } }
            for a in raised {
                if let meter = a.meter { meterAlerts.append("\(a.code) \(meter) \(a.message)") } else { alerts.append("\(a.code) \(a.message)") }
            }
        }
    }
}

final class StatusLog: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var last: String? { lines.withLock { $0.last } }
    var all: [String] { lines.withLock { $0 } }
}

/// Uploads that only count what the daemon asks of them.
final class CountingUploads: DaemonUploads {
    let counts = Mutex((prepared: 0, running: 0, nudges: 0))
    func prepare() async { counts.withLock { $0.prepared += 1 } }
    func run() async {
        counts.withLock { $0.running += 1 }
        while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
        counts.withLock { $0.running -= 1 }
    }
    func readingsStored() { counts.withLock { $0.nudges += 1 } }
}

@Suite("Daemon", .timeLimit(.minutes(1)))
struct DaemonTests {
    static let zone = "Europe/Berlin"

    struct Fixture {
        let directory: String
        let store: SQLiteStore
        let radio: FakeMeterRadio
        let uploads = CountingUploads()
        let daemon: GatewayDaemon
        let statuses = StatusLog()
        let alerts = StatusLog()
        let meterAlerts = StatusLog()
        let runner: Task<GatewayDaemon.End, Never>

        init(meters: [FakeMeter], paired: [FakeMeter]? = nil, settings: DaemonSettings = Fixture.settings,
             clock: any SessionClock = ContinuousClock(), directory existing: String? = nil,
             radio existingRadio: FakeMeterRadio? = nil) async throws {
            var template = Array("/tmp/gg-daemon-XXXXXX".utf8CString)
            let made = existing ?? template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) } }
            directory = try #require(made)
            store = try SQLiteStore(path: directory + "/gateway.sqlite3")
            for m in existing == nil ? (paired ?? meters) : [] {
                var info = MeterInfo(address: m.address, timeZone: DaemonTests.zone)
                info.pairedAt = 1
                try await store.saveMeter(info)
            }
            radio = existingRadio ?? FakeMeterRadio(meters: meters)
            let statuses = self.statuses
            let alerts = self.alerts
            let meterAlerts = self.meterAlerts
            daemon = GatewayDaemon(radio: radio, store: store, uploads: uploads, settings: settings, logger: .silent,
                                   snapshots: SnapshotLog.recorder(statuses: statuses, alerts: alerts, meterAlerts: meterAlerts),
                                   clock: clock)
            let daemon = self.daemon
            runner = Task { await daemon.run() }
            // Ready once it watches.
            try await Fixture.until("watching") { radio.calls.contains { $0.hasPrefix("watch") } }
        }

        static var settings: DaemonSettings {
            var s = DaemonSettings(download: DownloadOptions(inactivityTimeout: .seconds(2), commitInterval: .milliseconds(50)),
                                   destinations: [.nightscout])
            s.quietAfterDownload = .milliseconds(300)
            s.retryDelay = .milliseconds(100)
            s.stopGrace = .seconds(2)
            return s
        }

        func sequences(_ address: String) async throws -> [Int] {
            try await store.readings(ReadingFilter(meterAddress: address)).map(\.reading.sequence).sorted()
        }

        func finish() async {
            await daemon.stop()
            _ = await runner.value
            await store.close()
        }

        /// Polls `condition` every 10 ms for up to `seconds`.
        static func until(_ what: String, seconds: Double = 10, _ condition: () async throws -> Bool) async throws {
            let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
            while ContinuousClock.now < deadline {
                if try await condition() { return }
                try await Task.sleep(for: .milliseconds(10))
            }
            Issue.record("timed out waiting for \(what)")
            throw CancellationError()
        }
    }

    static func records(_ range: ClosedRange<UInt16>) -> [FakeRecord] {
        range.map { FakeRecord.glucose($0, mgdl: 80 + Int($0 % 100)) }
    }

    @Test("a paired meter that shows up is downloaded, once per appearance; an unknown one is left alone")
    func downloadsOnAppearance() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: Self.records(1...5)))
        let stranger = FakeMeter(address: "AA:BB:CC:DD:EE:09", script: FakeMeterScript(records: Self.records(1...2)))
        let clock = ManualClock()
        let f = try await Fixture(meters: [meter, stranger], paired: [meter], clock: clock)
        // Many advertisements while the download runs: one session.
        for _ in 0..<20 { f.radio.send(.meterSeen(address: meter.address, connected: false)) }
        f.radio.send(.meterSeen(address: stranger.address, connected: false))
        try await Fixture.until("5 readings") { try await f.sequences(meter.address) == [1, 2, 3, 4, 5] }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        #expect(f.radio.calls.filter { $0 == "connect \(meter.address)" }.count == 1)
        #expect(!f.radio.calls.contains("connect \(stranger.address)"))
        #expect(f.uploads.counts.withLock { $0.nudges } == 1)

        // Still advertising right after: left alone during the quiet period, then downloaded again.
        meter.update { $0.records += Self.records(6...7) }
        // Handled directly rather than through the event stream, so the test knows when each was looked at.
        await f.daemon.handle(.meterSeen(address: meter.address, connected: false))
        #expect(f.radio.calls.filter { $0 == "connect \(meter.address)" }.count == 1)
        clock.advance(by: Fixture.settings.quietAfterDownload - .milliseconds(1))
        await f.daemon.handle(.meterSeen(address: meter.address, connected: false))
        #expect(f.radio.calls.filter { $0 == "connect \(meter.address)" }.count == 1)
        clock.advance(by: .milliseconds(1))
        await f.daemon.handle(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("7 readings") { try await f.sequences(meter.address) == Array(1...7) }
        try await Fixture.until("second session end") { await f.daemon.currentSnapshot().counters.downloads == 2 }
        let snapshot = await f.daemon.currentSnapshot()
        #expect(snapshot.counters.connects == 2)
        #expect(snapshot.counters.readingsStored == 7)
        #expect(snapshot.pairedMeters == 1)
        #expect(f.statuses.last?.hasPrefix("1 meter, ") == true)
        await f.finish()
    }

    @Test("another process's commit (a manual sync, a pairing) is uploaded and shown; the daemon's own writes are not")
    func anotherProcessWrites() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: Self.records(1...3)))
        let f = try await Fixture(meters: [meter])
        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("3 readings") { try await f.sequences(meter.address) == [1, 2, 3] }
        try await Fixture.until("session end") { await f.daemon.currentSnapshot().activeSessions.isEmpty }
        let nudges = f.uploads.counts.withLock { $0.nudges }
        await f.daemon.databaseWritten()
        #expect(f.uploads.counts.withLock { $0.nudges } == nudges)

        let other = try SQLiteStore(path: f.directory + "/gateway.sqlite3")
        var second = MeterInfo(address: "AA:BB:CC:DD:EE:02", timeZone: Self.zone)
        second.pairedAt = 2
        try await other.saveMeter(second)
        await other.close()
        await f.daemon.databaseWritten()
        #expect(f.uploads.counts.withLock { $0.nudges } == nudges + 1)
        #expect(await f.daemon.currentSnapshot().pairedMeters == 2)
        await f.finish()
    }

    @Test("a damaged database: the alert is logged, passed to the hook, shown in the state file and status; READY still goes out")
    func alertHeldUntilStopped() async throws {
        let events = Mutex<[String]>([])
        let snapshots = Mutex<[DaemonSnapshot]>([])
        // The service manager's notes, then the alerts raised, as the run command's services see them.
        let seen = Mutex((notes: ServiceManagerNotes(), alert: 0))
        let publish: @Sendable (DaemonSnapshot) -> Void = { s in
            snapshots.withLock { $0.append(s) }
            let (notes, raised) = seen.withLock { state in
                (state.notes.notes(for: s), s.alerts.filter { $0.number > state.alert })
            }
            seen.withLock { $0.alert = s.alerts.last?.number ?? $0.alert }
            for note in notes {
                switch note {
                case .ready(let line): events.withLock { $0.append("ready " + line) }
                case .stopping: events.withLock { $0.append("stopping") }
                case .status: break
                }
            }
            for a in raised { events.withLock { $0.append("alert \(a.code)") } }
        }
        let alert = HeldAlert(code: DaemonAlert.databaseDamaged, message: "database /x is damaged")
        await GatewayDaemon.holdAlert(alert, snapshots: publish, logger: .silent, pid: 42, now: { 1000 }) {
            events.withLock { $0.append("waiting") }
        }
        #expect(events.withLock { $0 } == ["ready ALERT 2002 DATABASE_DAMAGED: database /x is damaged", "alert 2002", "waiting", "stopping"])
        let written = snapshots.withLock { $0 }
        #expect(written.map(\.phase) == [.alert, .stopped])
        let state = DaemonStateFile.json(try #require(written.first)).compactText
        #expect(state.contains(#""alert":{"code":2002,"name":"DATABASE_DAMAGED","message":"database /x is damaged"}"#))
        #expect(state.contains(#""pid":42"#))
        #expect(DaemonStateFile.json(DaemonSnapshot()).compactText.contains(#""alert":null"#))
    }

    @Test("two meters download at the same time, each in its own session")
    func twoMeters() async throws {
        let a = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: Self.records(1...30)))
        let b = FakeMeter(address: "AA:BB:CC:DD:EE:02", script: FakeMeterScript(records: Self.records(100...120)))
        let f = try await Fixture(meters: [a, b])
        // Neither connect finishes until both are pending: the two sessions are active at the same time.
        let connects = TestEvent()
        f.radio.set { $0.connectGate = connects }
        f.radio.send(.meterSeen(address: a.address, connected: false))
        f.radio.send(.meterSeen(address: b.address, connected: true))
        try await Fixture.until("both connects pending") {
            Set(f.radio.calls.filter { $0.hasPrefix("connect ") }) == ["connect \(a.address)", "connect \(b.address)"]
        }
        #expect(await f.daemon.currentSnapshot().activeSessions == [a.address, b.address])
        connects.signal()
        try await Fixture.until("all readings") {
            let first = try await f.sequences(a.address).count
            let second = try await f.sequences(b.address).count
            return first == 30 && second == 21
        }
        await f.finish()
    }

    @Test("SIGTERM during a download: the procedure is aborted, what arrived is committed, run returns promptly")
    func stopMidDownload() async throws {
        var script = FakeMeterScript(records: Self.records(1...10))
        script.silentAfterRecords = 4
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: script)
        var settings = Fixture.settings
        settings.download.inactivityTimeout = .seconds(30)
        // The daemon's clock never moves: run can return only if the session ends by itself, not by the
        // stop grace running out.
        let clock = ManualClock()
        let f = try await Fixture(meters: [meter], settings: settings, clock: clock)
        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("4 received") { meter.callLog.contains { $0.hasPrefix("write 01") } }
        try await Fixture.until("the 4 records taken in") { try await f.sequences(meter.address).count == 4 }
        await f.daemon.stop()
        let end = await f.runner.value
        #expect(end == .stopped)
        #expect(meter.callLog.contains("write 03 00"))
        #expect(meter.callLog.contains("disconnect"))
        let stored = try await f.sequences(meter.address)
        #expect(stored == [1, 2, 3, 4])
        #expect(f.radio.calls.last == "close")
        await f.store.close()
    }

    /// A daemon on a manual clock with one meter (3 records) whose connect waits for `gate`; returned once
    /// that connect is pending.
    static func connectPending(gate: TestEvent = TestEvent()) async throws -> (FakeMeter, ManualClock, Fixture) {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: records(1...3)))
        let clock = ManualClock()
        let f = try await Fixture(meters: [meter], clock: clock)
        f.radio.set { $0.connectGate = gate }
        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("connecting") { f.radio.calls.contains("connect \(meter.address)") }
        return (meter, clock, f)
    }

    @Test("SIGTERM while a connect is still pending: run returns after the stop grace, not when the connect ends")
    func stopDuringConnect() async throws {
        // bluetoothd takes its time to connect (seen under emulation: 9 s); the unit allows 5 s for a stop.
        // This connect finishes only when the session is cancelled.
        let (_, clock, f) = try await Self.connectPending()
        let returned = Mutex(false)
        let runner = f.runner
        let watcher = Task {
            let end = await runner.value
            returned.withLock { $0 = true }
            return end
        }
        await f.daemon.stop()
        // run waits for the session until the stop grace (2 s in the fixture) has passed on the daemon's clock.
        let graceEnds = clock.now + Fixture.settings.stopGrace
        try await Fixture.until("the stop grace") { clock.deadlines.contains(graceEnds) }
        #expect(!returned.withLock { $0 })
        clock.advance(by: Fixture.settings.stopGrace)
        let end = await watcher.value
        #expect(end == .stopped)
        #expect(f.radio.calls.last == "close")
        await f.store.close()
    }

    @Test("SIGTERM while a connect is pending: the link that comes up starts no download and is disconnected")
    func linkUpWhileStoppingIsDisconnected() async throws {
        let gate = TestEvent()
        let (meter, _, f) = try await Self.connectPending(gate: gate)
        await f.daemon.stop()
        // The connection comes up within the stop grace (the manual clock does not move).
        gate.signal()
        let end = await f.runner.value
        #expect(end == .stopped)
        #expect(meter.callLog == ["disconnect"])
        await f.store.close()
    }

    @Test("SIGTERM: a meter whose session outlived the stop grace is disconnected before the daemon exits")
    func stopDisconnectsLeftoverLinks() async throws {
        // The session's connect never returns in time; meanwhile bluetoothd brought the link up (its
        // Connect went on although ours was cancelled), so the session's own disconnect never comes.
        let (meter, clock, f) = try await Self.connectPending()
        f.radio.set { $0.connected = [meter.address] }
        await f.daemon.stop()
        let graceEnds = clock.now + Fixture.settings.stopGrace
        try await Fixture.until("the stop grace") { clock.deadlines.contains(graceEnds) }
        clock.advance(by: Fixture.settings.stopGrace)
        let end = await f.runner.value
        #expect(end == .stopped)
        let calls = f.radio.calls
        let closed = calls.firstIndex(of: "closeStale \(meter.address)")
        #expect(closed != nil)
        #expect(closed.map { $0 < calls.count - 1 } == true && calls.last == "close")
        #expect(!(await f.radio.isConnected(address: meter.address)))
        await f.store.close()
    }

    @Test("bluetoothd restart and adapter hot-plug: watching resumes; stale links are closed first")
    func radioLifecycle() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: Self.records(1...3)))
        let f = try await Fixture(meters: [meter])
        #expect(f.radio.calls.prefix(2) == ["closeStale ", "watch hci0"])

        f.radio.set { $0.radio = .absent }
        f.radio.send(.bluetoothdStopped)
        try await Fixture.until("stopped") { await f.daemon.currentSnapshot().watching == nil }
        let line = await f.daemon.currentSnapshot().statusLine
        #expect(line.hasPrefix("waiting for bluetoothd"))
        f.radio.set {
            $0.radio = RadioState(bluetoothdRunning: true, adapter: "hci0", adapterPowered: true)
            $0.connected = [meter.address]
        }
        f.radio.send(.bluetoothdStarted)
        try await Fixture.until("watching again") { f.radio.calls.filter { $0 == "watch hci0" }.count == 2 }
        #expect(f.radio.calls.contains("closeStale \(meter.address)"))
        let restarts = await f.daemon.currentSnapshot().counters.bluetoothdRestarts
        #expect(restarts == 1)

        // Adapter unplugged, then a new one plugged in (powered off at first).
        f.radio.set { $0.radio = RadioState(bluetoothdRunning: true, adapter: nil, adapterPowered: false) }
        f.radio.send(.adaptersChanged)
        try await Fixture.until("no adapter") { await f.daemon.currentSnapshot().watching == nil }
        let waiting = await f.daemon.currentSnapshot().statusLine
        #expect(waiting.hasPrefix("waiting for an adapter"))
        f.radio.set { $0.radio = RadioState(bluetoothdRunning: true, adapter: "hci1", adapterPowered: false) }
        f.radio.send(.adaptersChanged)
        try await Fixture.until("power on asked") { f.radio.calls.contains("powerOn") }
        f.radio.set { $0.radio.adapterPowered = true }
        f.radio.send(.adaptersChanged)
        try await Fixture.until("watching hci1") { f.radio.calls.contains("watch hci1") }

        f.radio.send(.meterSeen(address: meter.address, connected: false))
        try await Fixture.until("readings") { try await f.sequences(meter.address) == [1, 2, 3] }
        await f.finish()
    }

    @Test("reload: a bad configuration is reported and kept out; a good one replaces the upload side")
    func reload() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: []))
        let f = try await Fixture(meters: [meter])
        await f.daemon.reloadFailed("glucose-gateway.toml:3: unknown key 'nope'")
        let reloadError = await f.daemon.currentSnapshot().lastReloadError
        #expect(reloadError?.contains("unknown key") == true)
        let second = CountingUploads()
        await f.daemon.reload(settings: Fixture.settings, uploads: second)
        try await Fixture.until("old uploads stopped") { f.uploads.counts.withLock { $0.running } == 0 }
        #expect(second.counts.withLock { $0.prepared } == 1)
        try await Fixture.until("new uploads running") { second.counts.withLock { $0.running } == 1 }
        let snapshot = await f.daemon.currentSnapshot()
        #expect(snapshot.lastReloadError == nil)
        #expect(snapshot.counters.reloads == 1)
        await f.finish()
    }

    @Test("a bluetoothd that keeps its name but answers nothing: reported, alerted once, the watchdog still fed; then recovered")
    func bluetoothdNotAnswering() async throws {
        let clock = ManualClock()
        let f = try await Fixture(meters: [], clock: clock)
        let interval = Fixture.settings.healthInterval
        f.radio.set { $0.answering = false }
        try await Fixture.until("reported") {
            if clock.sleeping > 0 { clock.advance(by: interval) }
            return f.statuses.last?.hasPrefix("bluetoothd not answering") == true
        }
        #expect(await !f.daemon.currentSnapshot().bluetoothdAnswering)
        #expect(await f.daemon.currentSnapshot().statusLine.hasPrefix("bluetoothd not answering"))
        // More checks while it stays silent: one alert per change, not per check.
        let probes = f.radio.calls.filter { $0 == "probe" }.count
        try await Fixture.until("probed again") {
            if clock.sleeping > 0 { clock.advance(by: interval) }
            return f.radio.calls.filter { $0 == "probe" }.count >= probes + 2
        }
        #expect(f.alerts.all.count == 1)
        #expect(f.alerts.all.first?.hasPrefix("\(DaemonAlert.bluetoothdNotAnswering) bluetoothd holds org.bluez but did not answer") == true)
        // The daemon's own loop runs: the watchdog keeps being fed (a restart of the gateway would not help).
        #expect(f.daemon.isResponsive(within: interval * 2))
        f.radio.set { $0.answering = true }
        try await Fixture.until("recovered") {
            if clock.sleeping > 0 { clock.advance(by: interval) }
            return f.statuses.last.map { !$0.contains("not answering") } ?? false
        }
        #expect(await !f.daemon.currentSnapshot().statusLine.contains("not answering"))
        #expect(f.alerts.all.count == 1)
        await f.finish()
    }

    @Test("the bus going away ends run() with busLost, so the service manager restarts the gateway")
    func busLost() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: []))
        let f = try await Fixture(meters: [meter])
        f.radio.continuation.finish()
        let end = await f.runner.value
        #expect(end == .busLost)
        let snapshot = await f.daemon.currentSnapshot()
        #expect(snapshot.phase == .stopped)
        await f.store.close()
    }

    @Test("status line, run-state JSON and Prometheus text")
    func statusTexts() throws {
        var s = DaemonSnapshot()
        s.radio = RadioState(bluetoothdRunning: true, adapter: "hci0", adapterPowered: true)
        s.pairedMeters = 2
        var state = DestinationState(destination: .nightscout, state: .recovering)
        state.lastErrorCode = 1001
        s.destinations = [DestinationSnapshot(name: .nightscout, counts: OutboxCounts(pending: 3, inFlight: 1, acknowledged: 9, quarantined: 0, oldestUnsent: 10_000), state: state)]
        s.counters.failures = ["timeout": 2]
        s.readingsTotal = 13
        #expect(s.statusLine == "2 meters, 4 pending, last error 1001")
        let metrics = PrometheusTextfile.render(s.metrics(now: 70_000))
        #expect(metrics.contains("glucose_gateway_pending{destination=\"nightscout\"} 4\n"))
        #expect(metrics.contains("glucose_gateway_oldest_unsent_age_seconds{destination=\"nightscout\"} 60\n"))
        #expect(metrics.contains("glucose_gateway_network_state 1001\n"))
        #expect(metrics.contains("glucose_gateway_meter_connect_failures_total{reason=\"timeout\"} 2\n"))
        #expect(metrics.contains("glucose_gateway_readings_stored_total 13\n"))
        let json = DaemonStateFile.json(s).compactText
        #expect(json.contains("\"adapter\":\"hci0\""))

        let path = "/tmp/gg-daemon-metrics-\(getpid()).prom"
        try AtomicFile.write(metrics, to: path)
        defer { unlink(path) }
        var st = stat()
        #expect(stat(path, &st) == 0)
        #expect(Int(st.st_size) == metrics.utf8.count)
    }
}
