import GatewayCore

/// What a sync did with one meter: the session's outcome, and the one line `sync` says about it.
public struct MeterSyncResult: Sendable {
    public var address: String
    public var outcome: MeterSession.Outcome

    /// One line for the user, without health values.
    public var summary: String {
        switch outcome {
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
        case .unreachable(let e) where e.kind == .bondLost:
            return "\(address): re-pair needed: \(e.message); pair it again: glucose-gateway pair \(address) --pin PIN"
        case .unreachable(let e):
            return "\(address): not reachable (\(e.message))"
        case .notSeen(let e):
            return "\(address): not reachable (\(e.message))"
        case .declined:
            return "\(address): not reachable (the connection was declined)"
        case .failed(let e):
            return "\(address): download failed: \(e.message)"
        case .busy:
            return "\(address): skipped, another glucose-gateway process is downloading it"
        case .lockFailed(let e):
            return "\(address): not downloaded: \(e.description)"
        }
    }

    public var isComplete: Bool {
        if case .downloaded(let r) = outcome { return r.outcome.isComplete }
        return false
    }
}

extension MeterSession {
    /// `sync`: takes the meter's session lock (skipping the meter when the lock file cannot be opened), waits
    /// up to `wait` for the meter to be seen (zero: try to connect right away), connects and downloads.
    public func sync(_ meter: MeterInfo, wait: Duration,
                     progress: @escaping @Sendable (DownloadProgress) -> Void = { _ in }) async -> MeterSyncResult {
        var outcome = await run(meter, wait: wait, ifLockFails: .skip, progress: progress)
        // A meter in state re-pair needed that could not be reached otherwise (a meter advertising in
        // bursts: the connection ran into its pause) is still in that state: no working connection
        // cleared it, and what the user needs to hear is the fix, not the last connection's failure.
        if meter.bondLostAt != nil {
            switch outcome {
            case .unreachable(let error) where error.kind != .bondLost:
                outcome = .unreachable(Self.stillLost(meter))
            case .notSeen:
                outcome = .unreachable(Self.stillLost(meter))
            default:
                break
            }
        }
        return MeterSyncResult(address: meter.address, outcome: outcome)
    }

    static func stillLost(_ meter: MeterInfo) -> MeterLinkError {
        MeterLinkError(.bondLost, meter.bondLostMessage ?? "\(meter.address.uppercased()) refused this gateway's key: the meter no longer has the bond")
    }
}
