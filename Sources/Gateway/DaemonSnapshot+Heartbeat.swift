import GatewayCore

extension DaemonSnapshot {
    /// The daemon's health as the heartbeat judges it, with the ages measured at `now` (Unix ms).
    /// nil while the daemon is not running its loop (starting, stopping, stopped, holding an alert):
    /// the heartbeat decides nothing on such a snapshot.
    public func heartbeatHealth(now: UnixMillis) -> HeartbeatHealth? {
        guard phase == .running else { return nil }
        let blocked = destinations.compactMap { d -> (name: String, state: String)? in
            guard let state = d.state?.state, state == .paused || state == .blocked else { return nil }
            return (d.name.rawValue, state.rawValue)
        }
        let oldest = destinations.compactMap(\.counts.oldestUnsent).min()
        return HeartbeatHealth(
            bluetoothdReachable: radio.bluetoothdRunning && bluetoothdAnswering,
            adapterPowered: radio.adapter != nil && radio.adapterPowered,
            blockedDestinations: blocked,
            oldestUnsentAge: oldest.map { .milliseconds(max(0, now - $0)) }
        )
    }
}
