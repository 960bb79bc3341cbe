import GatewayCore
import Support

/// The links of sessions the daemon cancelled when it stopped.
///
/// A session cancelled at the stop grace has its own bus calls cancelled too, its `Disconnect` among them,
/// and bluetoothd keeps a link no client asks it to drop: the meter would stay connected (it does not
/// advertise meanwhile, and its battery drains). Each such meter still connected is disconnected before the
/// daemon exits.
enum LeftoverLinks {
    /// Disconnects those of `addresses` still connected; false when that took longer than `wait` on `clock`
    /// (the daemon exits anyway).
    static func disconnect(_ addresses: [String], radio: any MeterRadio, clock: any SessionClock, within wait: Duration) async -> Bool {
        guard !addresses.isEmpty else { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { _ = await radio.closeStale(addresses: addresses.sorted()); return true }
            group.addTask {
                try? await clock.sleep(for: wait)
                return false
            }
            let done = await group.next() ?? false
            group.cancelAll()
            return done
        }
    }
}
