import GatewayCore
import SyncEngine

/// Runs the configured alert commands for the alerts the daemon raises (each appears in its snapshots,
/// numbered): `on_network_error` for the daemon's own conditions, `on_meter_error` for a meter's, each
/// with the queue's pending count of the snapshot that carried it.
public struct AlertService: Service {
    let snapshots: AsyncStream<DaemonSnapshot>
    let command: String?
    let meterCommand: String?

    public init(feed: SnapshotFeed, command: String?, meterCommand: String?) {
        snapshots = feed.reader(.every)
        self.command = command
        self.meterCommand = meterCommand
    }

    public func run() async {
        var handled = 0
        for await snapshot in snapshots {
            for alert in snapshot.alerts where alert.number > handled {
                handled = alert.number
                if let meter = alert.meter {
                    if let meterCommand {
                        AlertCommand(command: meterCommand).run(code: alert.code, message: alert.message, pending: snapshot.pending, meter: meter)
                    }
                } else if let command {
                    AlertCommand(command: command).run(code: alert.code, message: alert.message, pending: snapshot.pending)
                }
            }
        }
    }
}
