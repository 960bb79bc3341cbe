import Dispatch
import DBusKit
import GatewayCore
import SQLiteStore
import Support

/// One serial queue for everything a command does: its tasks run on it (as their executor), and the
/// queues of the D-Bus connections and the store it opens run on it as their target. A command such as
/// `sync` does one thing at a time (download, then commit, then upload), so spreading that over
/// Dispatch's threads bought no parallelism, only hand-offs: every message handed from the connection's
/// queue to the waiting task, and every commit handed to the store and back, woke another thread. On
/// one queue each hand-off is the next item in the same drain. A blocking call (an `fsync`, a busy
/// database) holds up the command's other work, which would wait for it anyway; the daemon, whose
/// meters and uploads must go on beside each other, keeps its parts on their own queues.
struct OneQueue: Sendable {
    let queue = DispatchQueue(label: "glucose-gateway.command")

    func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let executor = QueueTaskExecutor(queue: queue)
        return try await DBusConnection.$queueTarget.withValue(queue) {
            try await SQLiteStore.$queueTarget.withValue(queue) {
                try await CommandExecutor.$preferred.withValue(executor) {
                    try await withTaskExecutorPreference(executor) { try await body() }
                }
            }
        }
    }
}

/// Runs tasks' jobs on a serial dispatch queue.
final class QueueTaskExecutor: TaskExecutor {
    let queue: DispatchQueue

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }
}
