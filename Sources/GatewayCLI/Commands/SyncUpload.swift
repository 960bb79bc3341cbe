import Gateway
import GatewayCore
import SQLiteStore
import SyncEngine

/// The upload half of `sync`.
enum SyncUpload {
    /// The body builders of the enabled destinations, so that downloaded readings are queued for upload
    /// in the transaction that stores them.
    static func builders(_ config: GatewayConfig) -> [any OutboxBodyBuilder] {
        config.uploadSettings.bodyBuilders
    }

    /// Uploads what is pending, one line per destination; the exit status of the upload part.
    static func run(config: GatewayConfig, store: SQLiteStore, logger: Logger, wait: Duration = .seconds(30)) async -> ExitStatus {
        let settings = config.uploadSettings
        guard !settings.destinations.isEmpty else { return .ok }
        let uploader = Uploader(settings: settings, store: store, logger: logger.with(label: "upload"))
        do {
            try await uploader.prepare()
        } catch {
            StandardStream.writeError("glucose-gateway sync: upload queue: \(error)\n")
            return .tempFail
        }
        let outcome = await uploader.drain(deadline: ContinuousClock.now.advanced(by: wait))
        for r in outcome.reports {
            var line = "\(r.destination): \(r.uploaded) uploaded"
            switch r.end {
            case .drained: break
            case let .deferred(code, message), let .paused(code, message), let .blocked(code, message):
                line += "; deferred (\(code)): \(message)"
            }
            StandardStream.writeOutput(line + "\n")
        }
        if outcome.pending > 0 { StandardStream.writeOutput("\(outcome.pending) upload(s) pending\n") }
        return outcome.exitStatus(errorBypass: settings.recovery.errorBypass)
    }
}
