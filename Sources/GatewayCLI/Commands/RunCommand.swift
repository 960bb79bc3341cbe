#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import Gateway
import GatewayCore
import SQLiteStore
import Support
import Synchronization
import SyncEngine

enum RunCommand: GatewayCommand {
    static let name = "run"
    static let abstract = "Run the gateway daemon (discovery, downloads, uploads, status)"
    static let help = """
    usage: glucose-gateway run [--quiet-after SECONDS] [--connect-timeout SECONDS] [--time-scale X]

    The gateway as a service (systemd Type=notify). It keeps the adapter looking for glucose meters (LE
    discovery filtered to the Glucose Service 0x1808, or with scan_mode = "profile" a GATT profile so
    bluetoothd connects bonded meters itself), connects to a paired meter as soon as it shows up and
    downloads its new records (one session per meter, several meters at once), and uploads continuously
    with recovery mode. It waits for an adapter that is not there yet, follows bluetoothd through
    restarts, and closes connections left behind by an earlier run.

    Signals: SIGTERM or SIGINT abort a running download cleanly (Record Access Control Point abort, what
    arrived is committed) and exit 0 within 5 s. SIGHUP reloads the config file; a config that does not
    load is reported and the running one kept.

    At start the database is checked (PRAGMA quick_check, at most 20 s). A damaged file raises an alert
    instead of being written on: logged, shown by `status` and in systemd's STATUS=, and passed to the
    on_network_error command (GATEWAY_ERROR_CODE=2002, DATABASE_DAMAGED); the daemon then neither downloads
    nor uploads (the meters keep their records) until it is restarted with a sound file. Readings that
    another process stores (a manual `sync`) are uploaded as soon as it commits them.

    A meter that refuses the stored key three times in a row (it lost its bond: reset, or paired with
    another device) is put in state "re-pair needed": logged, shown by `status` and in the metrics, and
    passed once to the on_meter_error command (GATEWAY_ERROR_CODE=2003, METER_BOND_LOST, GATEWAY_METER=its
    address). The daemon does not connect to it again until `pair` pairs it anew.

    Files: the database from the config; <database>.daemon.json (run state for `status`); metrics_file
    (Prometheus textfile) when set. Logs go to stderr with syslog priority prefixes under systemd.

    Options:
      --quiet-after SECONDS      leave a meter alone this long after a complete download (default 20)
      --connect-timeout SECONDS  connect and resolve services within this time (default 20)
      --time-scale X             run the upload side's clock X times as fast, so its retry, backoff and
                                 probe waits take 1/X of their time (demos and tests that compress an
                                 hour of outage into minutes; default 1)
      --health-interval SECONDS  how often to check that bluetoothd answers (default 15); a bluetoothd
                                 that keeps its bus name but answers nothing for 5 s is logged, shown by
                                 status, and runs on_network_error with GATEWAY_ERROR_CODE=2001

    Exit status: 0 stopped by a signal; 1 failure (database, bus lost); 69 no system bus; 75 another
    glucose-gateway process is uploading from this database; 78 configuration error.
    """
    static let options = OptionTable(values: ["--quiet-after", "--connect-timeout", "--time-scale", "--health-interval"])

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        let quietAfter = try arguments.secondsOption("--quiet-after", max: 86_400) ?? 20
        let connectTimeout = try arguments.secondsOption("--connect-timeout", max: 600) ?? 20
        let scale = try arguments.secondsOption("--time-scale", max: 10_000) ?? 1
        let healthInterval = try arguments.secondsOption("--health-interval", max: 3_600) ?? 15
        guard healthInterval >= 0.1 else { throw GatewayFailure(.usage, "--health-interval must be at least 0.1 seconds") }
        guard scale >= 1 else { throw GatewayFailure(.usage, "--time-scale must be 1 or more") }
        // The upload side keeps the product's timings and runs on a clock `scale` times as fast.
        let uploadClock: any SessionClock = scale == 1 ? ContinuousClock() : ScaledClock(rate: scale)
        try arguments.finish()
        // SIGHUP reloads, SIGTERM and SIGINT stop the daemon; their default actions are off, so the process
        // is not killed before it can end its downloads.
        let signals = ProcessSignals([SIGTERM, SIGINT, SIGHUP])
        let config = try context.loadConfig()
        let logger = context.logger.with(label: "gateway")

        let upload = config.upload
        let attempt = try await UploadLock.withLock(database: config.gateway.database) { () async throws -> ExitStatus in
            try await serve(config: config, upload: upload, context: context, logger: logger, signals: signals, quietAfter: quietAfter,
                            connectTimeout: connectTimeout, healthInterval: healthInterval, uploadClock: uploadClock)
        }
        switch attempt {
        case .ran(let status):
            return status
        case .held:
            throw GatewayFailure(.tempFail, "another glucose-gateway process is uploading from \(config.gateway.database)")
        case .unavailable(let error):
            throw MeterCommandSupport.storeFailure(error, config: config, use: .daemon)
        }
    }

    /// The daemon, run while this process holds the upload lock, in a group of the services that follow
    /// its snapshots (started in this order, stopped in the reverse one when the daemon has stopped).
    private static func serve(config: GatewayConfig, upload: UploadSettings, context: CommandContext, logger: Logger, signals: ProcessSignals,
                              quietAfter: Double, connectTimeout: Double, healthInterval: Double,
                              uploadClock: any SessionClock) async throws -> ExitStatus {
        let sqlite: SQLiteStore
        do {
            sqlite = try SQLiteStore(path: config.gateway.database, builders: upload.bodyBuilders)
        } catch {
            throw MeterCommandSupport.storeFailure(error, config: config, use: .daemon)
        }
        let database = config.gateway.database
        let feed = SnapshotFeed()
        let notifier = SystemdNotifier(environment: context.environment)
        let metrics = MetricsService(feed: feed, path: config.gateway.metricsFile, logger: logger)
        let heartbeat = HeartbeatService(feed: feed, config: config, logger: logger)
        let followers: [any Service] = [
            StateFileService(feed: feed, database: database, logger: logger), metrics, ServiceManagerService(feed: feed, notifier: notifier),
            AlertService(feed: feed, command: upload.recovery.onNetworkError, meterCommand: config.gateway.onMeterError.map(ShellWords.command)),
            heartbeat,
        ]
        defer { signals.stop() }

        if let alert = await startupCheck(sqlite, database: database, logger: logger) {
            // Nothing runs but this wait: the watchdog pings as long as the process does.
            await ServiceGroup(followers + [WatchdogService(notifier: notifier)]).run {
                await GatewayDaemon.holdAlert(alert, snapshots: feed.publish, logger: logger, pid: getpid()) {
                    for await signal in signals.stream where signal != SIGHUP {
                        logger.notice("signal \(signal): stopping")
                        return
                    }
                }
                feed.finish()
            }
            await sqlite.close()
            return .ok
        }

        let radio: BlueZMeterRadio
        do {
            radio = try await BlueZMeterRadio.open(logger: logger)
        } catch {
            await sqlite.close()
            throw error
        }
        let connectivity = await UploadWiring.startConnectivity(logger: logger)
        defer { connectivity.stop() }
        let mqtt = MQTTStateService(feed: feed, settings: upload, store: sqlite, database: database, logger: context.logger.with(label: "upload"))
        @Sendable func uploads(_ settings: UploadSettings) -> Uploader {
            Uploader(settings: settings, store: sqlite, connectivity: connectivity.hub, logger: context.logger.with(label: "upload"),
                     clock: uploadClock, mqttClient: mqtt?.client)
        }
        @Sendable func daemonSettings(_ config: GatewayConfig, _ upload: UploadSettings) -> DaemonSettings {
            var s = DaemonSettings(config: config, destinations: upload.destinations)
            s.quietAfterDownload = .milliseconds(Int64(quietAfter * 1000))
            s.connectTimeout = .milliseconds(Int64(connectTimeout * 1000))
            s.sessionLockDatabase = database
            s.healthInterval = .milliseconds(Int64(healthInterval * 1000))
            return s
        }
        let daemon = GatewayDaemon(radio: radio, store: sqlite, uploads: uploads(upload), settings: daemonSettings(config, upload),
                                   logger: logger, snapshots: feed.publish, pid: getpid())

        let reloadSignals = SignalService(signals: signals) { signal in
            switch signal {
            case SIGHUP:
                logger.notice("SIGHUP: reloading \(config.path ?? "the configuration")")
                do {
                    let fresh = try ConfigLoader.load(explicitPath: context.configPath, requireFile: false)
                    let freshUpload = fresh.upload
                    if fresh.gateway.database != database {
                        logger.warning("a new database path takes effect at the next start; keeping \(database)")
                    }
                    if freshUpload.destinations != upload.destinations {
                        logger.warning("readings stored from now on are queued for the destinations enabled at start; restart to change which are enabled")
                    }
                    metrics.setPath(fresh.gateway.metricsFile)
                    await heartbeat.configure(fresh)
                    await daemon.reload(settings: daemonSettings(fresh, freshUpload), uploads: uploads(freshUpload))
                } catch let failure as GatewayFailure {
                    await daemon.reloadFailed(failure.message)
                } catch {
                    await daemon.reloadFailed("\(error)")
                }
            default:
                logger.notice("signal \(signal): stopping")
                await daemon.stop()
            }
        }
        // The watchdog follows the daemon's own loop (see GatewayDaemon.isResponsive), not bluetoothd.
        let aliveWindow = Duration.milliseconds(Int64(healthInterval * 3000)) + .seconds(10)
        let deviceStatus = DeviceStatusService(feed: feed, config: config, settings: upload, store: sqlite, clock: uploadClock,
                                               logger: context.logger.with(label: "upload"))
        let services: [any Service] = followers + [mqtt].compactMap { $0 } + [deviceStatus].compactMap { $0 } + [
            WatchdogService(notifier: notifier, alive: { daemon.isResponsive(within: aliveWindow) }),
            DatabaseWatchService(daemon: daemon, store: sqlite, database: database, logger: logger),
            reloadSignals,
        ]
        let end = await ServiceGroup(services).run {
            let end = await daemon.run()
            feed.finish()
            return end
        }
        await sqlite.close()
        return end == .busLost ? .failure : .ok
    }
}

/// The start-up check of the database (`PRAGMA quick_check`, at most 20 s): an alert when the file is
/// damaged, so that the daemon does not write on into it; nil when it is sound, or when the check could
/// not finish or run (the daemon then works as usual, and says so).
private func startupCheck(_ sqlite: SQLiteStore, database: String, logger: Logger) async -> HeldAlert? {
    let limitMs = 20_000
    do {
        switch try await sqlite.quickCheck(milliseconds: limitMs) {
        case .ok:
            return nil
        case .unfinished:
            logger.warning("the check of \(database) did not finish within \(limitMs / 1000) s; going on without it")
            return nil
        case .damaged(let findings):
            let found = findings.filter { !$0.hasPrefix("*** in database") }.prefix(2)
                .map { SQLiteError.oneLine($0) }.joined(separator: "; ")
            return HeldAlert(code: DaemonAlert.databaseDamaged, message:
                "database \(database) is damaged (\(found.prefix(300))); not downloading or uploading, so nothing more is written to it, "
                + "and the meters keep their records; move the file aside or restore a backup, then restart the gateway")
        }
    } catch {
        logger.warning("cannot check \(database): \(error); going on without the check")
        return nil
    }
}
