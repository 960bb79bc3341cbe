import GatewayCore
import Support

/// What a sync did with one meter.
public struct MeterSyncResult: Sendable, Equatable {
    public enum Status: Sendable, Equatable {
        /// Downloaded (completely or not: see the report's outcome).
        case downloaded(DownloadReport)
        /// Not reachable: not advertising, out of range, or the connection failed.
        case unreachable(String)
        /// The meter refused the stored key: it lost its bond and must be paired again.
        case repairNeeded(String)
        /// The download failed (meter refused the procedure, store failed).
        case failed(DownloadError)
        /// Another process (the daemon) is downloading from this meter.
        case busy
        /// The meter's lock file cannot be opened: not downloaded.
        case lockFailed(LockFileError)
    }
    public var address: String
    public var status: Status

    /// One line for the user, without health values.
    public var summary: String {
        switch status {
        case .downloaded(let r):
            var line = "\(address): \(r.stored) new reading\(r.stored == 1 ? "" : "s")"
            if r.duplicates > 0 { line += ", \(r.duplicates) already stored" }
            if r.conflicts > 0 { line += ", \(r.conflicts) conflicting with a stored reading (kept, not uploaded)" }
            if r.undecodable > 0 {
                line += r.undecodable == 1 ? "; 1 record could not be decoded; its bytes are kept"
                    : "; \(r.undecodable) records could not be decoded; their bytes are kept"
            }
            switch r.outcome {
            case .completed, .noRecords: break
            case .interrupted(let reason): line += "; interrupted (\(reason)), the next sync resumes"
            case .timedOut: line += "; the meter stopped answering, the next sync resumes"
            }
            if r.counterReset { line += "; the meter's record counter restarted" }
            if let skew = r.skew, r.skewBeyondThreshold { line += "; meter clock off by \(skew.seconds) s" }
            return line
        case .unreachable(let why):
            return "\(address): not reachable (\(why))"
        case .repairNeeded(let why):
            return "\(address): re-pair needed: \(why); pair it again: glucose-gateway pair \(address) --pin PIN"
        case .failed(let e):
            return "\(address): download failed: \(e.message)"
        case .busy:
            return "\(address): skipped, another glucose-gateway process is downloading it"
        case .lockFailed(let e):
            return "\(address): not downloaded: \(e.description)"
        }
    }

    public var isComplete: Bool {
        if case .downloaded(let r) = status { return r.outcome.isComplete }
        return false
    }
}

/// `sync`: one download session (`MeterSession`) per paired meter that is reachable.
public struct MeterSync: Sendable {
    public var session: MeterSession

    /// `lockDatabase`: the database whose per-meter lock files each session holds; nil: no lock.
    public init(radio: any MeterRadio, download: MeterDownload, connectTimeout: Duration = .seconds(20), lockDatabase: String? = nil) {
        session = MeterSession(radio: radio, download: download, connectTimeout: connectTimeout, lockDatabase: lockDatabase)
    }

    /// Takes the meter's session lock, waits up to `wait` for the meter to be seen (zero: try to connect
    /// right away), connects and downloads.
    public func sync(_ meter: MeterInfo, wait: Duration,
                     progress: @escaping @Sendable (DownloadProgress) -> Void = { _ in }) async -> MeterSyncResult {
        let status: MeterSyncResult.Status
        switch await session.run(meter, wait: wait, ifLockFails: .skip, progress: progress) {
        case .busy: status = .busy
        case .lockFailed(let error): status = .lockFailed(error)
        case .notSeen(let error): status = .unreachable(error.message)
        case .unreachable(let error) where error.kind == .bondLost: status = .repairNeeded(error.message)
        case .unreachable(let error): status = .unreachable(error.message)
        case .declined: status = .unreachable("the connection was declined")
        case .downloaded(let report): status = .downloaded(report)
        case .failed(let error): status = .failed(error)
        }
        return MeterSyncResult(address: meter.address, status: status)
    }
}
