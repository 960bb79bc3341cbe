#if canImport(Glibc)
import Glibc
#endif
import DBusKit
import Gateway
import GatewayCore
import GlucoseProfile
import SQLiteStore
import SyncEngine

enum StatusCommand: GatewayCommand {
    static let name = "status"
    static let abstract = "Show the daemon, Bluetooth, meters and upload queues (--json for machines)"
    static let help = """
    usage: glucose-gateway status [--json]

    Reads the database (while the daemon runs, too: SQLite WAL readers never block it), the daemon's
    run-state file beside it (<database>.daemon.json) and asks bluetoothd on the system bus. Shows:
      daemon        running or not, pid, what it is doing, connections and failures since it started
      bluetooth     bluetoothd on the bus or not, answering or not (3 s), the adapter, powered, rfkill,
                    discovering
      meters        last seen, last sync, highest sequence, clock skew, and a warning for meters that keep
                    one bond only (pairing a phone with such a meter unpairs the gateway)
      destinations  state, last error code (1001 NETWORK_NOT_CONNECTED, 1002 NETWORK_TIMEOUT, or HTTP) and
                    message, pending, quarantined, age of the oldest unsent reading, last success

    Options:
      --json    one JSON object on stdout (times as Unix milliseconds, null when unknown)

    Exit status: 0 the status was shown (also when bluetoothd or the daemon is not running: that is part
    of the report); 78 configuration error; 1 the database cannot be read (a damaged one: the rest of
    the report is still shown). On a full disk or a read-only file system the database is read read-only,
    with a note on stderr.
    """
    static let options = OptionTable(flags: ["--json"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let json = arguments.flag("--json")
        try arguments.finish()
        let config = try context.loadConfig(forMeterCommand: name)
        let now = SystemClock.now()
        let report = StatusReport(
            generatedAt: now,
            daemon: DaemonStatusReader.read(database: config.gateway.database),
            bluetooth: await BluetoothStatusReader.read(adapter: config.gateway.adapter),
            store: try await StoreStatusReader.read(config: config, now: now)
        )
        StandardStream.writeOutput(json ? report.json.prettyText + "\n" : report.text)
        return report.store.error == nil ? .ok : .failure
    }
}

// MARK: - Parts

struct DaemonStatus {
    var running = false
    var pid: Int32?
    var phase: String?
    var startedAt: UnixMillis?
    var updatedAt: UnixMillis?
    var watching: String?
    var activeSessions: [String] = []
    /// Plain counters (`connects`) and counters by reason (`failures`), as the daemon wrote them.
    var counters: [String: Int] = [:]
    var countersByReason: [String: [String: Int]] = [:]
    var lastReloadError: String?
    var lastReactionMs: Int?
    /// What keeps the daemon from working (phase `alert`): code, name, message.
    var alert: (code: Int, name: String, message: String)?
}

enum DaemonStatusReader {
    static func read(database: String) -> DaemonStatus {
        var status = DaemonStatus()
        let path = DaemonStateFile.path(database: database)
        guard let bytes = FileContents.read(path, limit: 1 << 20),
              let object = try? JSONParser.parse(bytes), case .object = object else { return status }
        let pid = object["pid"]?.int64Value.flatMap { Int32(exactly: $0) }
        status.pid = pid
        status.phase = object["phase"]?.stringValue
        status.startedAt = object["started_at"]?.int64Value
        status.updatedAt = object["updated_at"]?.int64Value
        status.watching = object["radio"]?["watching"]?.stringValue
        status.activeSessions = object["active_sessions"]?.arrayValue?.compactMap(\.stringValue) ?? []
        if case let .object(members)? = object["counters"] {
            for member in members {
                let (key, value) = (member.key, member.value)
                if let n = value.int64Value.flatMap({ Int(exactly: $0) }) {
                    status.counters[key] = n
                } else if case let .object(inner) = value {
                    var map: [String: Int] = [:]
                    for m in inner { map[m.key] = m.value.int64Value.flatMap { Int(exactly: $0) } ?? 0 }
                    status.countersByReason[key] = map
                }
            }
        }
        status.lastReloadError = object["last_reload_error"]?.stringValue
        status.lastReactionMs = object["last_reaction_ms"]?.int64Value.flatMap { Int(exactly: $0) }
        if let alert = object["alert"], let code = alert["code"]?.int64Value.flatMap({ Int(exactly: $0) }) {
            status.alert = (code, alert["name"]?.stringValue ?? DaemonSnapshot.codeName(code), alert["message"]?.stringValue ?? "")
        }
        if let pid, pid > 0, status.phase != "stopped" {
            status.running = kill(pid, 0) == 0 || errno == EPERM
        }
        return status
    }
}

struct BluetoothStatus {
    /// Nil when the system bus itself cannot be reached.
    var busReachable = false
    var bluetoothdRunning = false
    /// False when bluetoothd holds org.bluez but gave no reply in time.
    var bluetoothdAnswering = true
    var adapter: String?
    var address: String?
    var powered = false
    var powerState: String?
    var discovering = false
    var error: String?
}

enum BluetoothStatusReader {
    static func read(adapter wanted: String?) async -> BluetoothStatus {
        var status = BluetoothStatus()
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.system()
        } catch {
            status.error = "system bus not reachable: \(error.message)"
            return status
        }
        status.busReachable = true
        await query(connection, wanted: wanted, into: &status)
        await connection.close()
        return status
    }

    /// How long bluetoothd gets to answer.
    static let answerSeconds = 3

    private static func query(_ connection: DBusConnection, wanted: String?, into status: inout BluetoothStatus) async {
        do {
            guard let owner = try await connection.nameOwner(of: "org.bluez", timeout: .seconds(3)) else {
                status.error = "bluetoothd is not running"
                return
            }
            status.bluetoothdRunning = true
            let reply = try await connection.call(destination: owner, path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                                                  member: "GetManagedObjects", timeout: .seconds(answerSeconds))
            let tree = reply.first?.managedObjects ?? [:]
            var adapters: [(name: String, properties: [String: DBusValue])] = []
            for path in tree.keys.sorted() {
                guard let properties = tree[path]?["org.bluez.Adapter1"] else { continue }
                adapters.append((String(path.split(separator: "/").last ?? ""), properties))
            }
            let candidates = wanted.map { w in adapters.filter { $0.name == w || $0.properties["Address"]?.string == w } } ?? adapters
            let chosen = candidates.first { $0.properties["Powered"]?.bool == true } ?? candidates.first
            if let chosen {
                status.adapter = chosen.name
                status.address = chosen.properties["Address"]?.string
                status.powered = chosen.properties["Powered"]?.bool ?? false
                status.powerState = chosen.properties["PowerState"]?.string
                status.discovering = chosen.properties["Discovering"]?.bool ?? false
            } else {
                status.error = wanted.map { "no adapter \($0)" } ?? "no Bluetooth adapter"
            }
        } catch where status.bluetoothdRunning && error.isTimeout {
            status.bluetoothdAnswering = false
            status.error = "bluetoothd not answering (it holds org.bluez but gave no reply within \(answerSeconds) s; restart it: systemctl restart bluetooth)"
        } catch {
            status.error = "bluetoothd did not answer: \(error.message)"
        }
    }
}

struct MeterStatus {
    var info: MeterInfo
    var readings: Int
}

struct DestinationStatusLine {
    var name: DestinationName
    var enabled: Bool
    var counts: OutboxCounts
    var state: DestinationState?
    var oldestUnsentAgeSeconds: Int64?
}

struct StoreStatus {
    var database: String
    var exists: Bool
    var readings = 0
    var excluded = 0
    var meters: [MeterStatus] = []
    var destinations: [DestinationStatusLine] = []
    /// Why the database was opened read-only (`disk full`, or why it cannot be written); nil: read-write.
    var readOnly: String?
    /// Why the database could not be read when it is damaged; the rest of the report is still shown
    /// (the daemon's alert above all).
    var error: String?
}

enum StoreStatusReader {
    static func read(config: GatewayConfig, now: UnixMillis) async throws(GatewayFailure) -> StoreStatus {
        let path = config.gateway.database
        // A directory or a link to nothing is an error here as in every other command, not "not created yet".
        do {
            try SQLiteStore.checkPath(path)
        } catch {
            throw GatewayFailure(.failure, MeterCommandSupport.pathProblem(error) ?? error.description)
        }
        var status = StoreStatus(database: path, exists: access(path, F_OK) == 0)
        let enabled = config.uploadSettings.destinations
        guard status.exists else {
            status.destinations = enabled.map { DestinationStatusLine(name: $0, enabled: true, counts: OutboxCounts()) }
            return status
        }
        let store = try MeterCommandSupport.openStoreForReading(path, command: "status")
        if case let .readOnly(reason) = store.readAccess {
            status.readOnly = reason.isFull ? "disk full" : (reason.systemErrorText ?? "cannot be written")
        }
        do {
            do {
                let metrics = try await store.metrics()
                status.readings = metrics.readings
                status.excluded = metrics.excludedReadings
                for record in try await store.meters() {
                    status.meters.append(MeterStatus(info: record.info, readings: try await store.readingCount(meterAddress: record.info.address)))
                }
                var names = enabled
                for name in try await store.destinations() where !names.contains(name) { names.append(name) }
                for name in names {
                    let counts = try await store.counts(name)
                    status.destinations.append(DestinationStatusLine(
                        name: name, enabled: enabled.contains(name), counts: counts, state: try await store.destinationState(name),
                        oldestUnsentAgeSeconds: counts.oldestUnsent.map { max(0, (now - $0) / 1000) }
                    ))
                }
                await store.close()
            } catch {
                await store.close()
                throw error
            }
        } catch let error as SQLiteError where error.isCorrupt {
            status.error = "\(error)"
            return status
        } catch {
            throw MeterCommandSupport.storeFailure(error, database: path, use: .reading)
        }
        return status
    }
}

// MARK: - Report

struct StatusReport {
    var generatedAt: UnixMillis
    var daemon: DaemonStatus
    var bluetooth: BluetoothStatus
    var store: StoreStatus

    /// The Glucose Feature bit "Multiple Bond Supported".
    static let multipleBond = 1 << 10

    static func singleBond(_ info: MeterInfo) -> Bool {
        guard let features = info.features else { return false }
        return features & multipleBond == 0
    }

    static func time(_ ms: UnixMillis?) -> JSONValue { ms.map { JSONValue.int($0) } ?? .null }
    static func int(_ v: Int?) -> JSONValue { v.map { JSONValue.int($0) } ?? .null }
    static func string(_ v: String?) -> JSONValue { v.map(JSONValue.string) ?? .null }

    var json: JSONValue {
        var root = JSONObjectBuilder()
        root.add("generated_at", Int(generatedAt))

        var d = JSONObjectBuilder()
        d.add("running", daemon.running)
        d.add("pid", daemon.pid.map { JSONValue.int($0) } ?? .null)
        d.add("phase", Self.string(daemon.phase))
        d.add("started_at", Self.time(daemon.startedAt))
        d.add("updated_at", Self.time(daemon.updatedAt))
        d.add("watching", Self.string(daemon.watching))
        d.add("active_sessions", daemon.activeSessions)
        var counters = JSONObjectBuilder()
        for key in Set(daemon.counters.keys).union(daemon.countersByReason.keys).sorted() {
            if let n = daemon.counters[key] {
                counters.add(key, n)
            } else if let map = daemon.countersByReason[key] {
                var inner = JSONObjectBuilder()
                for k in map.keys.sorted() { inner.add(k, map[k] ?? 0) }
                counters.add(key, inner.value)
            }
        }
        d.add("counters", counters.value)
        d.add("last_reaction_ms", Self.int(daemon.lastReactionMs))
        d.add("last_reload_error", Self.string(daemon.lastReloadError))
        if let alert = daemon.alert {
            var a = JSONObjectBuilder()
            a.add("code", alert.code)
            a.add("name", alert.name)
            a.add("message", alert.message)
            d.add("alert", a.value)
        } else {
            d.add("alert", JSONValue.null)
        }
        root.add("daemon", d.value)

        var b = JSONObjectBuilder()
        b.add("bus_reachable", bluetooth.busReachable)
        b.add("bluetoothd_running", bluetooth.bluetoothdRunning)
        b.add("bluetoothd_answering", bluetooth.bluetoothdRunning && bluetooth.bluetoothdAnswering)
        b.add("adapter", Self.string(bluetooth.adapter))
        b.add("adapter_address", Self.string(bluetooth.address))
        b.add("powered", bluetooth.powered)
        b.add("power_state", Self.string(bluetooth.powerState))
        b.add("discovering", bluetooth.discovering)
        b.add("error", Self.string(bluetooth.error))
        root.add("bluetooth", b.value)

        var s = JSONObjectBuilder()
        s.add("database", store.database)
        s.add("exists", store.exists)
        s.add("readings", store.readings)
        s.add("excluded_readings", store.excluded)
        s.add("error", Self.string(store.error))
        s.add("read_only", Self.string(store.readOnly))
        root.add("store", s.value)

        root.add("meters", .array(store.meters.map { m in
            var o = JSONObjectBuilder()
            o.add("address", m.info.address)
            o.add("name", Self.string(m.info.name))
            o.add("model", Self.string(m.info.model))
            o.add("serial", Self.string(m.info.serial))
            o.add("time_zone", m.info.timeZone)
            o.add("paired_at", Self.time(m.info.pairedAt))
            o.add("last_seen", Self.time(m.info.lastSeen))
            o.add("last_sync", Self.time(m.info.lastSync))
            o.add("highest_sequence", Self.int(m.info.highestSequence))
            o.add("clock_skew_seconds", Self.int(m.info.lastClockSkewSeconds))
            o.add("readings", m.readings)
            o.add("single_bond", Self.singleBond(m.info))
            return o.value
        }))

        root.add("destinations", .array(store.destinations.map { dest in
            var o = JSONObjectBuilder()
            o.add("name", dest.name.rawValue)
            o.add("enabled", dest.enabled)
            o.add("state", dest.state?.state ?? "ok")
            var e = JSONObjectBuilder()
            if let state = dest.state, let code = state.lastErrorCode {
                e.add("code", code)
                e.add("name", DaemonSnapshot.codeName(code))
                e.add("message", Self.string(state.lastErrorMessage))
                e.add("at", Self.time(state.lastErrorAt))
                o.add("last_error", e.value)
            } else {
                o.add("last_error", JSONValue.null)
            }
            o.add("pending", dest.counts.pending + dest.counts.inFlight)
            o.add("quarantined", dest.counts.quarantined)
            o.add("uploaded", dest.counts.acknowledged)
            o.add("oldest_unsent_age_seconds", dest.oldestUnsentAgeSeconds.map { JSONValue.int($0) } ?? .null)
            o.add("last_success_at", Self.time(dest.state?.lastSuccessAt))
            return o.value
        }))
        return root.value
    }

    static func iso(_ ms: UnixMillis?) -> String {
        guard let ms else { return "never" }
        return CivilCalendar.isoUTC(millis: ms)
    }

    static func age(_ seconds: Int64) -> String {
        if seconds < 120 { return "\(seconds) s" }
        if seconds < 7200 { return "\(seconds / 60) min" }
        if seconds < 172_800 { return "\(seconds / 3600) h" }
        return "\(seconds / 86_400) days"
    }

    /// The report for a terminal. Text from outside (meter names, a server's error body, a config
    /// error, the daemon's state file) is escaped, so it cannot break a line or drive the terminal.
    var text: String {
        let e = TerminalText.escaped as (String) -> String
        var out = ""
        if daemon.running, let pid = daemon.pid {
            out += "daemon: running (pid \(pid)), \(e(daemon.phase ?? "?"))"
            if let w = daemon.watching { out += ", watching by \(e(w))" }
            if !daemon.activeSessions.isEmpty { out += ", downloading from \(e(daemon.activeSessions.joined(separator: ", ")))" }
            out += "\n"
            let connects = daemon.counters["connects"] ?? 0
            let failures = daemon.countersByReason["failures"] ?? [:]
            var line = "  since \(Self.iso(daemon.startedAt)): \(connects) meter connection\(connects == 1 ? "" : "s")"
            if !failures.isEmpty {
                line += ", failures " + failures.keys.sorted().map { "\(e($0)) \(failures[$0] ?? 0)" }.joined(separator: ", ")
            }
            out += line + "\n"
            if let reason = daemon.lastReloadError { out += "  last reload refused: \(e(reason))\n" }
            if let alert = daemon.alert { out += "  ALERT \(alert.code) \(e(alert.name)): \(e(alert.message))\n" }
        } else {
            out += "daemon: not running\n"
        }
        if !bluetooth.busReachable {
            out += "bluetooth: \(e(bluetooth.error ?? "system bus not reachable"))\n"
        } else if !bluetooth.bluetoothdRunning {
            out += "bluetooth: bluetoothd is not running\n"
        } else if !bluetooth.bluetoothdAnswering {
            out += "bluetooth: \(bluetooth.error ?? "bluetoothd not answering")\n"
        } else if let adapter = bluetooth.adapter {
            var line = "bluetooth: bluetoothd running, adapter \(e(adapter))"
            if let a = bluetooth.address { line += " (\(e(a)))" }
            line += bluetooth.powered ? ", powered" : ", not powered"
            if bluetooth.powerState == "off-blocked" { line += " (blocked by rfkill)" }
            if bluetooth.discovering { line += ", discovering" }
            out += line + "\n"
        } else {
            out += "bluetooth: bluetoothd running, \(e(bluetooth.error ?? "no adapter"))\n"
        }
        if let error = store.error {
            out += "database: \(e(store.database)): cannot be read: \(e(error))\n"
        } else {
            out += "database: \(e(store.database))" + (store.readOnly.map { " (read-only: \(e($0)))" } ?? "")
                + (store.exists ? ", \(store.readings) readings (\(store.excluded) kept out of upload)\n" : " (not created yet)\n")
        }
        if store.meters.isEmpty {
            out += "meters: none paired (glucose-gateway pair ADDRESS --pin PIN)\n"
        }
        for m in store.meters {
            var line = "meter \(m.info.address)"
            if let n = m.info.name ?? m.info.model { line += " \(e(n))" }
            line += ": last seen \(Self.iso(m.info.lastSeen)), last sync \(Self.iso(m.info.lastSync))"
            line += ", highest sequence \(m.info.highestSequence.map(String.init) ?? "none"), \(m.readings) readings"
            if let skew = m.info.lastClockSkewSeconds { line += ", clock skew \(skew) s" }
            out += line + "\n"
            if Self.singleBond(m.info) {
                out += "  warning: this meter keeps one bond only; pairing it with a phone unpairs the gateway\n"
            }
        }
        if store.destinations.isEmpty { out += "uploads: no destination configured\n" }
        for dest in store.destinations {
            var line = "\(dest.name): \(e(dest.state?.state ?? "ok"))"
            if !dest.enabled { line += " (not enabled in the config)" }
            line += ", \(dest.counts.pending + dest.counts.inFlight) pending, \(dest.counts.quarantined) quarantined, \(dest.counts.acknowledged) uploaded"
            if let age = dest.oldestUnsentAgeSeconds { line += ", oldest unsent \(Self.age(age))" }
            line += ", last success \(Self.iso(dest.state?.lastSuccessAt))"
            out += line + "\n"
            if let state = dest.state, let code = state.lastErrorCode {
                out += "  last error \(code) \(DaemonSnapshot.codeName(code))"
                if let m = state.lastErrorMessage { out += ": \(e(m))" }
                if let at = state.lastErrorAt { out += " (\(Self.iso(at)))" }
                out += "\n"
            }
        }
        return out
    }
}
