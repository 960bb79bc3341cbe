import GatewayCore
import Support
import Synchronization

/// What the system says about the network.
public enum Connectivity: String, Sendable {
    case up
    case down
    case unknown
}

/// A source of connectivity knowledge: NetworkManager on D-Bus, netlink route changes, or nothing.
public protocol ConnectivityMonitor: Sendable {
    /// The current state as last reported; `.unknown` when the source cannot tell.
    func current() -> Connectivity
    /// Returns true as soon as connectivity is reported back (an event), false when `timeout` passes
    /// first on `clock`. Used by recovery mode instead of spending retries while the network is down.
    func waitForUp(timeout: Duration, clock: any SessionClock) async -> Bool
}

/// An event that any number of tasks wait for, each with a timeout on a clock: `fire()` wakes every task
/// waiting at that moment (a fire while nobody waits is not remembered; waiters look at their state again
/// before they wait).
public final class WakeSignal: Sendable {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Bool, Never>
        let timer: Task<Void, Never>
    }
    private struct State {
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
    }
    private let state = Mutex(State())

    public init() {}

    /// Tasks waiting now.
    public var waiting: Int { state.withLock { $0.waiters.count } }

    public func fire() {
        let woken = state.withLock { s in
            let list = s.waiters
            s.waiters.removeAll()
            return list
        }
        for w in woken {
            w.timer.cancel()
            w.continuation.resume(returning: true)
        }
    }

    /// True when woken by `fire()`; false when `timeout` passed on `clock` or the task was cancelled.
    public func wait(timeout: Duration, clock: any SessionClock) async -> Bool {
        let id: UInt64 = state.withLock { s in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let timer = Task {
                    try? await clock.sleep(for: max(.zero, timeout))
                    self.resume(id, with: false)
                }
                state.withLock { $0.waiters.append(Waiter(id: id, continuation: continuation, timer: timer)) }
                // Cancelled before the waiter was registered: the cancellation handler found nothing.
                if Task.isCancelled { self.resume(id, with: false) }
            }
        } onCancel: {
            self.resume(id, with: false)
        }
    }

    private func resume(_ id: UInt64, with value: Bool) {
        let waiter: Waiter? = state.withLock { s in
            guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return s.waiters.remove(at: i)
        }
        waiter?.timer.cancel()
        waiter?.continuation.resume(returning: value)
    }
}

/// A monitor fed by any number of event sources; each `report(.up)` wakes the waiters.
public final class ConnectivityHub: ConnectivityMonitor {
    private struct State {
        /// What each source last said; the first known one in `priority` order wins.
        var sources: [String: Connectivity] = [:]
        var connectivity: Connectivity = .unknown
        /// Bumped on every `.up` report, so an event between a failure and the wait is not missed.
        var upEvents: UInt64 = 0
    }
    private let state = Mutex(State())
    private let up = WakeSignal()

    /// Sources in order of authority: NetworkManager knows about captive portals, netlink only routes.
    public static let priority = ["networkmanager", "netlink", "manual"]

    public init(initial: Connectivity = .unknown) {
        state.withLock { $0.connectivity = initial }
    }

    public func current() -> Connectivity { state.withLock { $0.connectivity } }

    /// The number of `.up` events so far.
    public var upEventCount: UInt64 { state.withLock { $0.upEvents } }

    /// Tasks waiting for connectivity now.
    public var waiting: Int { up.waiting }

    /// A source's new verdict. `.up` wakes every waiter, even when it was up already: a spurious wake
    /// costs one request, a missed one costs a probe interval.
    public func report(_ connectivity: Connectivity, source: String = "manual") {
        let wake: Bool = state.withLock { s in
            s.sources[source] = connectivity
            let ordered = Self.priority.compactMap { s.sources[$0] } + s.sources.filter { !Self.priority.contains($0.key) }.map(\.value)
            s.connectivity = ordered.first { $0 != .unknown } ?? .unknown
            guard connectivity == .up else { return false }
            s.upEvents += 1
            return true
        }
        if wake { up.fire() }
    }

    public func waitForUp(timeout: Duration, clock: any SessionClock) async -> Bool {
        await up.wait(timeout: timeout, clock: clock)
    }
}
