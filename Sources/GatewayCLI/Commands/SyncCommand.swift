import BlueZ
import Gateway
import GatewayCore
import Meters
import SQLiteStore
import Support
import Synchronization

enum SyncCommand: GatewayCommand {
    static let name = "sync"
    static let abstract = "Download new readings from paired meters, then upload"
    static let help = """
    usage: glucose-gateway sync [ADDRESS] [--wait SECONDS] [--adapter hciN]

    Downloads the new readings of each paired meter that is reachable (or only of ADDRESS), stores them,
    then uploads what is pending to the configured destinations. Shows a progress bar on a terminal and
    one summary line per meter otherwise. An interrupted download keeps what it stored; the next sync
    resumes after it. Readings are never deleted from the meter.
      --wait SECONDS   how long to wait for a meter to start advertising (default 0: connect at once,
                       which succeeds while the meter is awake)
      --adapter hciN   the Bluetooth adapter (default: [gateway] adapter, else the first powered one)
    A meter that lost its bond (reset, or paired with another device) is reported as "re-pair needed"
    with the command that fixes it (pairing it again: glucose-gateway pair ADDRESS); status shows it too.
    Exit status: 0 done; 1 a download failed or was interrupted; 64 bad arguments; 69 no meter reachable,
    a meter needs pairing again, or no adapter; 75 readings stored but their upload deferred; 78
    configuration error.
    """
    static let options = OptionTable(values: ["--wait", "--adapter"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let addressText = arguments.positional()
        let wait = try arguments.secondsOption("--wait", max: 3600) ?? 0
        let adapterOption = try arguments.option("--adapter")
        try arguments.finish()
        let only = try addressText.map { text throws(GatewayFailure) in try MeterCommandSupport.address(text, command: "sync") }
        let config = try context.loadConfig()
        let logger = context.logger.with(label: "sync")

        let store = try MeterCommandSupport.openStore(config, builders: SyncUpload.builders(config), use: .download)
        var meters: [MeterInfo]
        do {
            meters = try await store.meters().map(\.info)
        } catch {
            await store.close()
            throw MeterCommandSupport.storeFailure(error, config: config, use: .download)
        }
        if let only {
            meters = meters.filter { $0.address == only }
            if meters.isEmpty {
                await store.close()
                throw GatewayFailure(.failure, "\(only) is not a paired meter (pair it first: glucose-gateway pair \(only) --pin PIN)")
            }
        }

        var status = ExitStatus.ok
        if meters.isEmpty {
            StandardStream.writeOutput("no paired meters (pair one with: glucose-gateway pair ADDRESS --pin PIN)\n")
        } else {
            status = try await download(meters, store: store, config: config, adapter: adapterOption, wait: wait,
                                        single: only != nil, logger: logger)
        }
        let upload = await SyncUpload.run(config: config, store: store, logger: logger)
        await store.close()
        if status == .ok, upload == .tempFail { status = .tempFail }
        return status
    }

    static func download(
        _ meters: [MeterInfo], store: SQLiteStore, config: GatewayConfig, adapter: String?, wait: Double, single: Bool,
        logger: Logger
    ) async throws -> ExitStatus {
        let radio: BlueZMeterRadio
        do {
            radio = try await BlueZMeterRadio.open(waitingForAdapter: adapter ?? config.gateway.adapter, logger: logger)
        } catch {
            StandardStream.writeError("glucose-gateway sync: \(TerminalText.escaped(error.message))\n")
            return .unavailable
        }
        let sync = MeterSession(radio: radio, download: MeterDownload(store: store, options: config.gateway.meters.downloadOptions, logger: logger),
                                lockDatabase: config.gateway.database)
        var reachable = 0
        var incomplete = false
        var repair = false
        for meter in meters {
            let bar = ProgressBar(label: meter.address, enabled: MeterCommandSupport.stdoutIsTerminal)
            let result = await sync.sync(meter, wait: .milliseconds(Int(wait * 1000))) { bar.update($0) }
            bar.clear()
            // A failed download's reason is an error: stderr, as every error (the summaries go to stdout).
            let line = TerminalText.escaped(result.summary) + "\n"
            switch result.outcome {
            case .downloaded(let report):
                StandardStream.writeOutput(line)
                reachable += 1
                if !report.outcome.isComplete { incomplete = true }
            case .busy:
                StandardStream.writeOutput(line)
                reachable += 1
            case .failed:
                StandardStream.writeError("glucose-gateway sync: " + line)
                reachable += 1
                incomplete = true
            case .lockFailed:
                StandardStream.writeError("glucose-gateway sync: " + line)
                incomplete = true
            case .unreachable(let error) where error.kind == .bondLost:
                StandardStream.writeError("glucose-gateway sync: " + line)
                repair = true
            case .unreachable, .notSeen, .declined:
                StandardStream.writeOutput(line)
            }
        }
        await radio.close()
        if incomplete { return .failure }
        if repair || reachable == 0 { return .unavailable }
        return .ok
    }
}

/// A one-line progress bar on a terminal: `AA:BB:.. [#######.......] 312/1000`.
final class ProgressBar: Sendable {
    private struct State {
        var lastDrawn: ContinuousClock.Instant?
        var drawn = false
    }
    private let label: String
    private let enabled: Bool
    private let state = Mutex(State())

    init(label: String, enabled: Bool) {
        self.label = label
        self.enabled = enabled
    }

    func update(_ p: DownloadProgress) {
        guard enabled else { return }
        let now = ContinuousClock.now
        let draw = state.withLock { s -> Bool in
            let finished = p.total.map { p.received >= $0 } ?? false
            if let last = s.lastDrawn, now - last < .milliseconds(100), !finished { return false }
            s.lastDrawn = now
            s.drawn = true
            return true
        }
        guard draw else { return }
        StandardStream.writeOutput("\r" + Self.line(label: label, progress: p) + "\u{1B}[K")
    }

    func clear() {
        guard enabled, state.withLock({ $0.drawn }) else { return }
        StandardStream.writeOutput("\r\u{1B}[K")
    }

    static func line(label: String, progress p: DownloadProgress, width: Int = 30) -> String {
        guard let total = p.total, total > 0 else { return "\(label) \(p.received) records" }
        let done = min(p.received, total)
        let filled = done * width / total
        return "\(label) [" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "] \(p.received)/\(total)"
    }
}
