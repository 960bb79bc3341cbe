import Dispatch

/// A serial executor over a private dispatch queue. The store's actor runs on it, so SQLite's blocking
/// calls (fsync, waiting out a busy lock) occupy this queue's thread, never the cooperative pool.
final class DispatchQueueExecutor: SerialExecutor {
    let queue: DispatchQueue

    /// A private queue, on `target` when one is given (a command's one queue, see `SQLiteStore.queueTarget`).
    init(label: String, target: DispatchQueue? = nil) {
        queue = DispatchQueue(label: label, target: target)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
