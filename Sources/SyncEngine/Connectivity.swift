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
    /// Returns true as soon as connectivity is reported back (an event), false when `timeoutMs` passes
    /// first. Used by recovery mode instead of spending retries while the network is down.
    func waitForUp(timeoutMs: Int) async -> Bool
}

/// A monitor fed by any number of event sources; each `report` wakes the waiters on `.up`.
public final class ConnectivityHub: ConnectivityMonitor {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Bool, Never>
        let timer: Task<Void, Never>
    }
    private struct State {
        /// What each source last said; the first known one in `priority` order wins.
        var sources: [String: Connectivity] = [:]
        var connectivity: Connectivity = .unknown
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        /// Bumped on every `.up` report, so an event between a failure and the wait is not missed.
        var upEvents: UInt64 = 0
    }
    private let state = Mutex(State())

    /// Sources in order of authority: NetworkManager knows about captive portals, netlink only routes.
    public static let priority = ["networkmanager", "netlink", "manual"]

    public init(initial: Connectivity = .unknown) {
        state.withLock { $0.connectivity = initial }
    }

    public func current() -> Connectivity { state.withLock { $0.connectivity } }

    /// The number of `.up` events so far.
    public var upEventCount: UInt64 { state.withLock { $0.upEvents } }

    /// A source's new verdict. `.up` wakes every waiter, even when it was up already: a spurious wake
    /// costs one request, a missed one costs a probe interval.
    public func report(_ connectivity: Connectivity, source: String = "manual") {
        let woken: [Waiter] = state.withLock { s in
            s.sources[source] = connectivity
            let ordered = Self.priority.compactMap { s.sources[$0] } + s.sources.filter { !Self.priority.contains($0.key) }.map(\.value)
            s.connectivity = ordered.first { $0 != .unknown } ?? .unknown
            guard connectivity == .up else { return [] }
            s.upEvents += 1
            let list = s.waiters
            s.waiters.removeAll()
            return list
        }
        for w in woken {
            w.timer.cancel()
            w.continuation.resume(returning: true)
        }
    }

    public func waitForUp(timeoutMs: Int) async -> Bool {
        let id: UInt64 = state.withLock { s in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let timer = Task {
                    try? await Task.sleep(for: .milliseconds(max(0, timeoutMs)))
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
