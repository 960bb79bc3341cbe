import GatewayCore
import Support

extension GatewayDaemon {
    /// `run` when the database failed its start-up check: nothing is downloaded or uploaded, so nothing is
    /// written to a damaged file (the meters keep their records). The alert is logged, raised (the alert
    /// command runs), shown in the run-state file and the service status (READY=1 still goes out, so the service
    /// manager neither restarts the gateway in a loop nor hides the alert), until `stopped` returns.
    public static func holdAlert(_ alert: HeldAlert, snapshots publish: @Sendable (DaemonSnapshot) -> Void, logger: Logger, pid: Int32,
                                 now: @Sendable () -> UnixMillis = SystemClock.now, until stopped: () async -> Void) async {
        var snapshot = DaemonSnapshot()
        snapshot.pid = pid
        snapshot.startedAt = now()
        snapshot.updatedAt = snapshot.startedAt
        snapshot.phase = .alert
        snapshot.alert = alert
        snapshot.raise(alert.code, alert.message)
        logger.error(snapshot.statusLine)
        publish(snapshot)
        await stopped()
        snapshot.phase = .stopped
        snapshot.updatedAt = now()
        publish(snapshot)
        logger.notice("stopped")
    }

    /// True when `task` finished before `deadline`. Returns at the deadline even when the task does not end
    /// (a connect still waiting for bluetoothd): a task group would wait for its child awaiting `task.value`,
    /// which cancellation cannot end, so the two waits race on a stream and the loser is left behind.
    static func wait(for task: Task<Void, Never>, until deadline: ContinuousClock.Instant, on clock: any SessionClock) async -> Bool {
        let (outcome, continuation) = AsyncStream.makeStream(of: Bool.self, bufferingPolicy: .bufferingNewest(2))
        Task {
            await task.value
            continuation.yield(true)
        }
        let timer = Task {
            try? await clock.sleep(until: deadline)
            continuation.yield(false)
        }
        var first = false
        for await value in outcome {
            first = value
            break
        }
        continuation.finish()
        timer.cancel()
        return first
    }
}
