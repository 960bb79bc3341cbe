import GatewayCore
import SyncEngine

extension DaemonSnapshot {
    /// The daemon's health as the heartbeat judges it, with the ages measured at `now` (Unix ms).
    /// An alert the daemon holds (a damaged database) is a failure of its own. nil while the daemon is
    /// starting or stopping: the heartbeat decides nothing on such a snapshot (and a stopped gateway
    /// stops pinging).
    public func heartbeatHealth(now: UnixMillis) -> HeartbeatHealth? {
        if phase == .alert, let alert {
            return HeartbeatHealth(bluetoothdReachable: true, adapterPowered: true,
                                   heldAlert: "\(alert.code) \(DaemonSnapshot.codeName(alert.code))")
        }
        guard phase == .running else { return nil }
        let blocked = destinations.compactMap { d -> (name: String, state: String)? in
            guard let state = d.state?.state, state == .paused || state == .blocked else { return nil }
            // The upload side pauses a destination the server has turned off with code 404.
            if state == .paused, d.state?.lastErrorCode == 404 { return (d.name.rawValue, "disabled") }
            return (d.name.rawValue, state.rawValue)
        }
        let oldest = destinations.compactMap(\.counts.oldestUnsent).min()
        return HeartbeatHealth(
            bluetoothdReachable: radio.bluetoothdRunning && bluetoothdAnswering,
            adapterPowered: radio.adapter != nil && radio.adapterPowered,
            blockedDestinations: blocked,
            oldestUnsentAge: oldest.map { .milliseconds(max(0, now - $0)) },
            repairNeeded: repairNeeded
        )
    }
}
