import GatewayCore
import Support

/// One session with one meter, the same in `run` and `sync`: the meter's session lock (two processes never
/// run procedures on one meter at once), waiting for it to advertise when asked, the connection, an event
/// log entry for it, and the download. What to say about the outcome is the caller's.
public struct MeterSession: Sendable {
    public var radio: any MeterRadio
    public var download: MeterDownload
    public var connectTimeout: Duration
    /// The database whose per-meter lock files the session holds (`MeterSessionLock`); nil: no lock (tests
    /// with a fake store).
    public var lockDatabase: String?
    /// Whether a `bondLost` connection failure is stored at once as `re-pair needed` (`sync`); the
    /// daemon stores it itself once a later session confirms it (`GatewayDaemon.bondLossConfirmation`).
    public var recordsBondLoss = true

    /// What to do when the lock file cannot be opened (not: when another process holds it).
    public enum LockFailure: Sendable {
        /// Leave the meter alone (`sync`: the user sees why and can run it again).
        case skip
        /// Download without the lock, after a warning (`run`: a meter seen now may advertise no more).
        case proceed(warn: @Sendable (LockFileError) -> Void)
    }

    public enum Outcome: Sendable {
        /// Another process holds the meter's session lock.
        case busy
        /// The lock file cannot be opened (`LockFailure.skip`).
        case lockFailed(LockFileError)
        /// The meter did not advertise within the wait.
        case notSeen(MeterAccessError)
        /// The connection failed.
        case unreachable(MeterLinkError)
        /// `connected` declined the link (the daemon is stopping); it was disconnected.
        case declined
        case downloaded(DownloadReport)
        /// The download failed (the meter refused the procedure, the store failed).
        case failed(DownloadError)
    }

    /// The code of a meter that lost its bond (`METER_BOND_LOST`): in the event the session logs and in the
    /// daemon's meter alert (`DaemonAlert.meterBondLost`).
    public static let bondLostCode = 2003

    public init(radio: any MeterRadio, download: MeterDownload, connectTimeout: Duration = .seconds(20), lockDatabase: String? = nil) {
        self.radio = radio
        self.download = download
        self.connectTimeout = connectTimeout
        self.lockDatabase = lockDatabase
    }

    /// Runs the session. `wait`: how long to wait for the meter to advertise first (zero: connect at once).
    /// `connected` sees the link before the download and may wrap it (the daemon's stoppable link) or
    /// decline it with nil.
    public func run(
        _ meter: MeterInfo, wait: Duration = .zero, ifLockFails lockFailure: LockFailure,
        connected: @Sendable (any MeterLink) async -> (any MeterLink)? = { $0 },
        progress: @escaping @Sendable (DownloadProgress) -> Void = { _ in }
    ) async -> Outcome {
        guard let lockDatabase else { return await unlocked(meter, wait: wait, connected: connected, progress: progress) }
        let attempt = await MeterSessionLock.withLock(database: lockDatabase, address: meter.address) {
            await unlocked(meter, wait: wait, connected: connected, progress: progress)
        }
        switch attempt {
        case .ran(let outcome):
            return outcome
        case .held:
            return .busy
        case .unavailable(let error):
            switch lockFailure {
            case .skip:
                return .lockFailed(error)
            case .proceed(let warn):
                warn(error)
                return await unlocked(meter, wait: wait, connected: connected, progress: progress)
            }
        }
    }

    private func unlocked(
        _ meter: MeterInfo, wait: Duration, connected: @Sendable (any MeterLink) async -> (any MeterLink)?,
        progress: @escaping @Sendable (DownloadProgress) -> Void
    ) async -> Outcome {
        // BlueZ spells addresses in capitals (the object path); the meter's row keeps its own spelling.
        let address = meter.address.uppercased()
        if wait > .zero {
            do {
                _ = try await radio.waitForMeter(address: address, timeout: wait)
            } catch {
                return .notSeen(error)
            }
        }
        let plain: any MeterLink
        do {
            plain = try await radio.connect(address: address, timeout: max(connectTimeout, wait))
        } catch {
            if error.kind == .bondLost, recordsBondLoss { await recordBondLost(meter, address: address, error.message) }
            return .unreachable(error)
        }
        if meter.bondLostAt != nil {
            // The meter took the stored key after all (it came back, or the finding was wrong): clear it.
            _ = try? await download.store.setBondLost(meter.address, at: nil, message: nil)
            try? await download.store.log(GatewayEvent(at: download.now(), kind: .bondLost, meterAddress: address,
                                                       message: "the bond works again; re-pair needed cleared"))
        }
        guard let link = await connected(plain) else {
            await plain.disconnect()
            return .declined
        }
        // Without a sync of its own: the first batch of readings, or the bookkeeping at the end, makes it
        // durable; a power cut before them loses only this line, and nothing of the connection was stored.
        try? await download.store.logWithoutSync(GatewayEvent(at: download.now(), kind: .connected, meterAddress: address,
                                                              message: "connected for download"))
        do {
            return .downloaded(try await download.run(link: link, meter: meter, progress: progress))
        } catch {
            return .failed(error)
        }
    }

    /// The meter refused the stored key (`bondLost`): state `re-pair needed` in the store, with an event,
    /// unless it is in that state already (the first finding is kept).
    public func recordBondLost(_ meter: MeterInfo, address: String, _ message: String) async {
        guard meter.bondLostAt == nil else { return }
        let at = download.now()
        _ = try? await download.store.setBondLost(meter.address, at: at, message: message)
        try? await download.store.log(GatewayEvent(at: at, kind: .bondLost, meterAddress: address, code: Self.bondLostCode,
                                                   message: "re-pair needed: \(message)"))
    }
}
