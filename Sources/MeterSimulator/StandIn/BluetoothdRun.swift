import DBusKit
import Synchronization

/// One run of the simulated bluetoothd: from taking `org.bluez` until a restart, a crash or `stop()`
/// drops it. A new run is a new object.
///
/// Method handlers, timers and tasks hold the run they were started in. Once it is over, work that still
/// holds it does nothing, or fails its call as bluetoothd does for an object of a run that is gone. The
/// pause between two runs (and the time before `start()` and after `stop()`) is a run of its own that
/// never owns `org.bluez`, so work begun in a pause is over as soon as bluetoothd is back.
final class BluetoothdRun: Sendable {
    /// Set once, by the stand-in's actor, and read only there: the actor orders every access.
    private let over = Atomic<Bool>(false)

    /// Whether the run has ended.
    var isOver: Bool { over.load(ordering: .relaxed) }

    /// Ends the run; work holding it sees ``isOver``.
    func end() { over.store(true, ordering: .relaxed) }

    /// Throws what a call to a bluetoothd that has restarted gets, once the run is over.
    func check() throws {
        guard !isOver else { throw DBusError(.unknownObject, "bluetoothd restarted") }
    }
}
