import Gateway
import GatewayCore
import SQLiteStore
import Support
import SyncEngine

/// The upload half of `sync`, wired as `upload` wires it.
enum SyncUpload {
    /// The body builders of the enabled destinations, so that downloaded readings are queued for upload
    /// in the transaction that stores them.
    static func builders(_ config: GatewayConfig) -> [any OutboxBodyBuilder] {
        config.upload.bodyBuilders
    }

    /// Uploads what is pending, one line per destination; the exit status of the upload part.
    static func run(config: GatewayConfig, store: SQLiteStore, logger: Logger, wait: Duration = .seconds(30)) async -> ExitStatus {
        let settings = config.upload
        guard !settings.destinations.isEmpty else { return .ok }
        let attempt = await UploadLock.withLock(database: config.gateway.database) { () async -> ExitStatus in
            let logger = logger.with(label: "upload")
            let connectivity = await UploadWiring.startConnectivityIfNeeded(for: settings, logger: logger)
            defer { connectivity?.stop() }
            let uploader = Uploader(settings: settings, store: store, connectivity: connectivity?.hub, logger: logger)
            do {
                try await uploader.prepare()
            } catch {
                StandardStream.writeError("glucose-gateway sync: upload queue: \(TerminalText.escaped(String(describing: error)))\n")
                return .tempFail
            }
            let outcome = await uploader.drain(deadline: ContinuousClock.now.advanced(by: wait))
            for line in UploadWiring.summary(outcome) { StandardStream.writeOutput(line + "\n") }
            return outcome.exitStatus(errorBypass: settings.recovery.errorBypass)
        }
        switch attempt {
        case .ran(let status):
            return status
        case .held:
            StandardStream.writeOutput("uploads are left to the running gateway daemon\n")
            return .ok
        case .unavailable(let error):
            StandardStream.writeError("glucose-gateway sync: \(TerminalText.escaped(error.description))\n")
            return .tempFail
        }
    }
}
