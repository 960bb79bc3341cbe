import DBusKit
import Gateway
import GatewayCore
import SQLiteStore
import Support
import SyncEngine

enum UploadCommand: GatewayCommand {
    static let name = "upload"
    static let abstract = "Upload pending readings now; --check tests credentials, --redrive re-sends quarantined ones"
    static let help = """
    usage: glucose-gateway upload [--check] [--redrive] [--wait SECONDS]

    Uploads every pending reading now, ignoring any long-term backoff, and reports per destination.
      --check         only check the credentials of each destination (Nightscout /api/v1/verifyauth,
                      or with api = "v3" the token exchange and the permissions in /api/v3/status;
                      and careportalEnabled in /api/v1/status.json when treatments are on;
                      FHIR /metadata), with a long timeout: Nightscout delays every failed attempt
      --redrive       first put quarantined readings back in the queue (after a fix on the server)
      --wait SECONDS  how long a session may wait for the network in recovery mode (default 30)

    Exit status: 0 everything uploaded (or credentials accepted); 75 readings remain pending (network,
    server, credentials or a refused reading; see `status`); 78 configuration error or credentials refused.
    """
    static let options = OptionTable(values: ["--wait"], flags: ["--check", "--redrive"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let check = arguments.flag("--check")
        let redrive = arguments.flag("--redrive")
        let wait = try arguments.secondsOption("--wait", max: 86_400) ?? 30
        try arguments.finish()
        let config = try context.loadConfig()
        let settings = config.upload
        guard !settings.destinations.isEmpty else {
            throw GatewayFailure(.config, "no upload destination is configured ([nightscout] url or [fhir] base_url)")
        }
        let logger = context.logger.with(label: "upload")

        if check {
            var status = ExitStatus.ok
            for (name, verdict) in await Uploader.checkCredentials(settings: settings) {
                switch verdict {
                case .accepted:
                    StandardStream.writeOutput("\(name): credentials accepted\n")
                case .refused(let why):
                    StandardStream.writeOutput("\(name): credentials refused: \(TerminalText.escaped(why))\n")
                    status = .config
                case .disabled(let why):
                    StandardStream.writeOutput("\(name): paused: \(TerminalText.escaped(why))\n")
                    status = .config
                case .unreachable(let why):
                    StandardStream.writeOutput("\(name): not checked: \(TerminalText.escaped(why))\n")
                    if status == .ok { status = .tempFail }
                }
            }
            return status
        }

        let attempt = try await UploadLock.withLock(database: config.gateway.database) { () async throws -> ExitStatus in
            let store: SQLiteStore
            do {
                store = try SQLiteStore(path: config.gateway.database, builders: settings.bodyBuilders)
            } catch {
                throw MeterCommandSupport.storeFailure(error, config: config, use: .upload)
            }
            let connectivity = await UploadWiring.startConnectivityIfNeeded(for: settings, logger: logger)
            defer { connectivity?.stop() }
            let uploader = Uploader(settings: settings, store: store, connectivity: connectivity?.hub, logger: logger)
            do {
                try await uploader.prepare()
                if redrive {
                    let n = try await uploader.redrive()
                    StandardStream.writeOutput("\(n) quarantined reading(s) queued again\n")
                }
            } catch {
                await store.close()
                throw MeterCommandSupport.storeFailure(error, config: config, use: .upload)
            }
            let outcome = await uploader.drain(deadline: ContinuousClock.now.advanced(by: .milliseconds(Int(wait * 1000))))
            for line in UploadWiring.summary(outcome) { StandardStream.writeOutput(line + "\n") }
            await store.close()
            return outcome.deferred ? .tempFail : .ok
        }
        switch attempt {
        case .ran(let status):
            return status
        case .held:
            StandardStream.writeError("glucose-gateway upload: another glucose-gateway process is uploading from this database\n")
            return .tempFail
        case .unavailable(let error):
            throw MeterCommandSupport.storeFailure(error, config: config, use: .upload)
        }
    }
}

/// Shared wiring for the commands that upload (`upload`, `sync`, `run`).
public enum UploadWiring {
    /// Connectivity from NetworkManager (system bus) and netlink routes; whatever is unavailable is
    /// skipped. Call `stop()` when done.
    public static func startConnectivity(logger: Logger) async -> RunningConnectivity {
        let hub = ConnectivityHub()
        let netlink = NetlinkRouteWatcher(hub: hub, logger: logger)
        var task: Task<Void, Never>?
        if let bus = try? await DBusConnection.system() {
            task = Task { await NetworkManagerState.watch(connection: bus, hub: hub, logger: logger) }
        }
        return RunningConnectivity(hub: hub, netlink: netlink, task: task)
    }

    /// For a one-shot upload (`upload`, `sync`): nothing when every destination is on this host, which
    /// system connectivity says nothing about (no system-bus connection, no netlink socket); else as
    /// `startConnectivity`.
    public static func startConnectivityIfNeeded(for settings: UploadSettings, logger: Logger) async -> RunningConnectivity? {
        guard !settings.allDestinationsLocal else { return nil }
        return await startConnectivity(logger: logger)
    }

    /// One line per destination, secret-free; a server's answer in it is escaped.
    public static func summary(_ outcome: UploadOutcome) -> [String] {
        outcome.reports.map { TerminalText.escaped(summaryLine($0)) } + (outcome.pending > 0 ? ["\(outcome.pending) reading upload(s) pending"] : [])
    }

    static func summaryLine(_ r: SessionReport) -> String {
        var line = "\(r.destination): \(r.uploaded) uploaded"
        if r.duplicates > 0 { line += " (\(r.duplicates) already on the server)" }
        if r.quarantined > 0 { line += ", \(r.quarantined) quarantined" }
        switch r.end {
        case .drained: line += ", nothing pending"
        case let .deferred(code, message): line += "; deferred: error \(code) \(NetworkErrorCode.name(code)): \(message)"
        case let .paused(code, message): line += "; paused (\(code)): \(message)"
        case let .blocked(code, message): line += "; blocked (\(code)): \(message)"
        }
        return line
    }
}

public struct RunningConnectivity: Sendable {
    public let hub: ConnectivityHub
    let netlink: NetlinkRouteWatcher?
    let task: Task<Void, Never>?
    public func stop() {
        netlink?.stop()
        task?.cancel()
    }
}
