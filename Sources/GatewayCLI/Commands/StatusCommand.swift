#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import Gateway
import GatewayCore
import SQLiteStore
import Support
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
      meters        last seen, last sync, highest sequence, clock skew, a warning for meters that keep
                    one bond only (pairing a phone with such a meter unpairs the gateway), and state:
                    ok, or re-pair needed (the meter lost its bond; a PROBLEM line names the fix)
      heartbeat     the last ping to heartbeat_url's monitor (shown as scheme://host): when, ok or fail
                    with the reason, and whether the monitor answered
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
            daemon: DaemonStateFile.read(database: config.gateway.database),
            bluetooth: await BluetoothStatus.read(adapter: config.gateway.adapter),
            store: try await StoreStatusReader.read(config: config, now: now),
            heartbeat: config.gateway.heartbeatURL == nil ? nil : HeartbeatStateFile.read(database: config.gateway.database)
        )
        StandardStream.writeOutput(json ? report.json.prettyText + "\n" : report.text)
        return report.store.error == nil ? .ok : .failure
    }
}

// MARK: - Report

/// What `status` shows; rendered in StatusReport+JSON.swift and StatusReport+Text.swift.
struct StatusReport {
    var generatedAt: UnixMillis
    var daemon: DaemonStatus
    var bluetooth: BluetoothStatus
    var store: StoreStatus
    /// The heartbeat's last attempt, when `heartbeat_url` is set and the daemon has made one.
    var heartbeat: HeartbeatStateFile.Contents? = nil

    /// What needs a person, one line each (shown first in the text, `problems` in the JSON).
    var problems: [String] {
        store.meters.filter { $0.info.bondLostAt != nil }.map {
            "meter \($0.info.address): re-pair needed (the meter lost its bond with this gateway); run: glucose-gateway pair \($0.info.address) --pin PIN"
        }
    }
}

// MARK: - Database

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
        let enabled = config.upload.destinations
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
