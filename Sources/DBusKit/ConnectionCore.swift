internal import CDBus
import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Carries a value that belongs to a connection's queue across a `@Sendable` boundary.
///
/// Safe because every use dereferences it on that serial queue only: C callbacks from libdbus run there
/// (every libdbus call for the connection is made there), and so do the Dispatch sources and the blocks
/// the public ``DBusConnection`` enqueues.
struct QueueConfined<Value>: @unchecked Sendable {
    let value: Value
}

/// Identifiers for pending calls, subscriptions and deferred replies.
enum Keys {
    private static let counter = Atomic<Int>(0)
    static func next() -> Int { counter.wrappingAdd(1, ordering: .relaxed).newValue }
}

/// The libdbus connection and everything attached to it. Confined to `queue`; never `Sendable`.
///
/// Main loop: libdbus's watches become Dispatch read/write sources on `queue`, and its timeouts deadlines
/// served by one timerfd watched the same way, armed at the earliest deadline and disarmed when none is
/// left, so an idle connection has no timer running and wakes only when the socket has data. libdbus calls
/// the watch, timeout and dispatch-status callbacks with its connection lock held, so they only create
/// or cancel sources and schedule ``drain()``; they never call back into the connection.
///
/// This file holds the state, opening and closing, the main loop and the dispatch of incoming messages.
/// Outgoing calls are in `ConnectionCore+Calls.swift`, signal subscriptions and emission in
/// `ConnectionCore+Signals.swift`, exported objects in `ConnectionCore+Exports.swift`.
final class ConnectionCore {
    let raw: OpaquePointer
    let queue: DispatchQueue
    let uniqueName: String
    private(set) var isOpen = true
    private(set) var isConnected = true
    private var dispatching = false

    private final class WatchSources {
        var read: (any DispatchSourceRead)?
        var write: (any DispatchSourceWrite)?
        func cancel() {
            read?.cancel()
            write?.cancel()
            read = nil
            write = nil
        }
    }
    private var watches: [OpaquePointer: WatchSources] = [:]
    /// libdbus's timeouts, all served by one kernel timer (see ``rearmTimer()``).
    private var timeouts = TimeoutSchedule<OpaquePointer>()
    private var timer: TimeoutTimer?

    /// Method calls sent and not answered yet, by ``CallToken`` key.
    var pending: [Int: PendingCall] = [:]

    var subscriptions: [Int: Subscription] = [:]
    /// Subscriptions with an `endOfBatch` that were delivered a message in the current dispatch pass.
    var batched: Set<Int> = []
    /// What the current dispatch pass delivered (see `BurstWait`).
    var pass = PassCount()
    var disconnectWatchers: [Int: AsyncStream<Void>.Continuation] = [:]

    /// Exported objects by path, with their interfaces by name.
    var objects: [String: [String: DBusInterface]] = [:]
    var managerRoots: Set<String> = []
    /// Incoming method calls whose handler has not returned yet (referenced libdbus messages).
    var incoming: [Int: OpaquePointer] = [:]
    /// False while the connection plays a peer that has stopped answering: method calls to exported
    /// objects are read and dropped without a reply, so callers run into their own timeouts. libdbus
    /// itself still answers `org.freedesktop.DBus.Peer` (Ping).
    var answeringCalls = true

    private init(raw: OpaquePointer, queue: DispatchQueue, uniqueName: String) {
        self.raw = raw
        self.queue = queue
        self.uniqueName = uniqueName
    }

    deinit {
        assert(!isOpen, "a D-Bus connection was released without close()")
    }

    // MARK: - Opening and closing

    /// Opens a private connection and registers with the bus. Runs on `queue` (it blocks for the `Hello`).
    static func open(address: String, queue: DispatchQueue) -> Result<ConnectionCore, DBusError> {
        dispatchPrecondition(condition: .onQueue(queue))
        _ = dbus_threads_init_default()
        guard !address.utf8.contains(0) else { return .failure(DBusError(.badAddress, "address contains NUL")) }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let raw = dbus_connection_open_private(address, &error) else {
            return .failure(takeError(&error, fallback: .noServer))
        }
        guard dbus_bus_register(raw, &error) != 0 else {
            dbus_connection_close(raw)
            dbus_connection_unref(raw)
            return .failure(takeError(&error, fallback: .noServer))
        }
        // Loss of the bus must be an event the owner handles, never an exit of the process.
        dbus_connection_set_exit_on_disconnect(raw, 0)
        let unique = dbus_bus_get_unique_name(raw).map { String(cString: $0) } ?? ""
        let core = ConnectionCore(raw: raw, queue: queue, uniqueName: unique)
        core.install()
        return .success(core)
    }

    static func takeError(_ error: inout CDBus.DBusError, fallback: DBusError.Name) -> DBusError {
        defer { dbus_error_free(&error) }
        guard dbus_error_is_set(&error) != 0 else { return DBusError(fallback, "unknown failure") }
        let name = error.name.map { String(cString: $0) } ?? fallback.rawValue
        let message = error.message.map { String(cString: $0) } ?? ""
        return DBusError(name: name, message: message)
    }

    private var context: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    private static func core(_ data: UnsafeMutableRawPointer?) -> ConnectionCore? {
        guard let data else { return nil }
        return Unmanaged<ConnectionCore>.fromOpaque(data).takeUnretainedValue()
    }

    private func install() {
        _ = dbus_connection_set_watch_functions(
            raw,
            { watch, data in
                guard let watch, let core = ConnectionCore.core(data) else { return 0 }
                core.watches[watch] = WatchSources()
                core.updateWatch(watch)
                return 1
            },
            { watch, data in
                guard let watch, let core = ConnectionCore.core(data) else { return }
                core.watches.removeValue(forKey: watch)?.cancel()
            },
            { watch, data in
                guard let watch, let core = ConnectionCore.core(data) else { return }
                core.updateWatch(watch)
            },
            context, nil)
        _ = dbus_connection_set_timeout_functions(
            raw,
            { timeout, data in
                guard let timeout, let core = ConnectionCore.core(data) else { return 0 }
                core.updateTimeout(timeout)
                return 1
            },
            { timeout, data in
                guard let timeout, let core = ConnectionCore.core(data) else { return }
                core.timeouts.remove(timeout)
                core.rearmTimer()
            },
            { timeout, data in
                guard let timeout, let core = ConnectionCore.core(data) else { return }
                core.updateTimeout(timeout)
            },
            context, nil)
        dbus_connection_set_dispatch_status_function(
            raw,
            { _, status, data in
                // Must not dispatch from here (libdbus holds its lock): schedule it.
                guard status == DBUS_DISPATCH_DATA_REMAINS, let core = ConnectionCore.core(data) else { return }
                core.scheduleDrain()
            },
            context, nil)
        _ = dbus_connection_add_filter(
            raw,
            { _, message, data in
                guard let message, let core = ConnectionCore.core(data) else {
                    return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
                }
                return core.handle(message)
            },
            context, nil)
        scheduleDrain()
    }

    /// Closes the connection: pending calls fail, subscriptions end, sources are cancelled.
    func close() {
        guard isOpen else { return }
        markDisconnected(reason: "the connection was closed")
        isOpen = false
        _ = dbus_connection_set_watch_functions(raw, nil, nil, nil, nil, nil)
        _ = dbus_connection_set_timeout_functions(raw, nil, nil, nil, nil, nil)
        dbus_connection_set_dispatch_status_function(raw, nil, nil, nil)
        for sources in watches.values { sources.cancel() }
        watches.removeAll()
        timeouts = TimeoutSchedule()
        timer?.close()
        timer = nil
        objects.removeAll()
        managerRoots.removeAll()
        dbus_connection_close(raw)
        dbus_connection_unref(raw)
    }

    // MARK: - Main loop

    private func updateWatch(_ watch: OpaquePointer) {
        guard let sources = watches[watch] else { return }
        sources.cancel()
        guard dbus_watch_get_enabled(watch) != 0 else { return }
        let fd = dbus_watch_get_unix_fd(watch)
        guard fd >= 0 else { return }
        let flags = dbus_watch_get_flags(watch)
        let me = QueueConfined(value: self)
        let handle = QueueConfined(value: watch)
        if flags & DBUS_WATCH_READABLE.rawValue != 0 {
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { me.value.fire(handle.value, flags: DBUS_WATCH_READABLE.rawValue) }
            source.resume()
            sources.read = source
        }
        if flags & DBUS_WATCH_WRITABLE.rawValue != 0 {
            let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { me.value.fire(handle.value, flags: DBUS_WATCH_WRITABLE.rawValue) }
            source.resume()
            sources.write = source
        }
    }

    private func fire(_ watch: OpaquePointer, flags: UInt32) {
        guard isOpen, watches[watch] != nil else { return }
        _ = dbus_watch_handle(watch, flags)
        guard flags == DBUS_WATCH_READABLE.rawValue else {
            drain()
            return
        }
        pass = PassCount()
        readWaiting(watch)
        dispatchMessages()
        // A pass of signals for subscribers that expect a burst (`awaitsBurst`) is most likely part of one
        // that arrives faster than one per wake-up is worth: each trip through the event loop costs several
        // thread switches (Dispatch's event thread, a worker, the consumer). So when everything the pass
        // dispatched was a signal for subscribers that ask for it (`awaitsBurst`) and no reply of ours is
        // awaited, the queue pauses a fixed short time and then takes in everything that arrived, as one
        // pass, bounded as `BurstWait` says. Anything else (a reply, a method call, a signal for another
        // subscriber, a subscriber that declines) ends the waiting after the pass that read it.
        let burst = BurstWait(start: ContinuousClock.now)
        while isOpen, watches[watch] != nil, dbus_watch_get_enabled(watch) != 0,
              let pause = burst.pause(after: pass, callsPending: !pending.isEmpty, now: ContinuousClock.now,
                                      wanted: { burstWanted() }) {
            Self.sleep(pause)
            guard isOpen, watches[watch] != nil, dbus_watch_get_enabled(watch) != 0,
                  Self.bytesWaiting(dbus_watch_get_unix_fd(watch)) > 0 else { break }
            pass = PassCount()
            _ = dbus_watch_handle(watch, flags)
            readWaiting(watch)
            dispatchMessages()
        }
        pass = PassCount()
        endBatches()
    }

    /// libdbus reads at most 2 KiB per call (a few notifications). Reads on while the socket holds more,
    /// so one wake-up takes in a burst and dispatches it as one pass, instead of coming back through the
    /// event loop for every 2 KiB. Bounded, so a flood cannot starve the queue.
    private func readWaiting(_ watch: OpaquePointer) {
        var rounds = 1
        while rounds < 32, isOpen, watches[watch] != nil, dbus_watch_get_enabled(watch) != 0,
              Self.bytesWaiting(dbus_watch_get_unix_fd(watch)) > 0 {
            _ = dbus_watch_handle(watch, DBUS_WATCH_READABLE.rawValue)
            rounds += 1
        }
    }

    /// Blocks the queue for `duration` (a burst pause; short by `BurstWait`'s bounds).
    private static func sleep(_ duration: Duration) {
        #if canImport(Glibc)
        let (seconds, attoseconds) = duration.components
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0, errno == EINTR { request = remaining }
        #endif
    }

    /// Bytes readable on `fd` without blocking (0 when unknown).
    private static func bytesWaiting(_ fd: Int32) -> Int32 {
        #if canImport(Glibc)
        guard fd >= 0 else { return 0 }
        var count: Int32 = 0
        return ioctl(fd, UInt(FIONREAD), &count) == 0 ? count : 0
        #else
        return 0
        #endif
    }

    private func updateTimeout(_ timeout: OpaquePointer) {
        if dbus_timeout_get_enabled(timeout) != 0 {
            let interval = Int64(max(1, dbus_timeout_get_interval(timeout))) * 1_000_000
            timeouts.set(timeout, intervalNanoseconds: interval, now: TimeoutTimer.now())
        } else {
            timeouts.remove(timeout)
        }
        rearmTimer()
    }

    /// Arms the timer at the earliest deadline, or disarms it when no timeout runs. Setting a timerfd is
    /// one system call on this queue; a Dispatch timer per call would be created, armed and cancelled
    /// through Dispatch's event thread for every call.
    private func rearmTimer() {
        let next = timeouts.earliest
        if next == nil, timer == nil { return }
        if timer == nil {
            let me = QueueConfined(value: self)
            timer = TimeoutTimer(queue: queue) { me.value.fireTimeouts() }
        }
        timer?.arm(at: next)
    }

    private func fireTimeouts() {
        guard isOpen, let timer else { return }
        timer.expired()
        for timeout in timeouts.expired(at: TimeoutTimer.now()) where isOpen && timeouts.contains(timeout) {
            _ = dbus_timeout_handle(timeout)
        }
        drain()
        rearmTimer()
    }

    func scheduleDrain() {
        let me = QueueConfined(value: self)
        queue.async { me.value.drain() }
    }

    /// Dispatches every message libdbus has read. Never re-entered: a filter that ends up here returns at once.
    func drain() {
        guard dispatchMessages() else { return }
        endBatches()
    }

    /// Dispatches every message libdbus has read, without ending the pass; false when the connection is
    /// closed or a dispatch is already running (a filter that ends up here).
    @discardableResult
    private func dispatchMessages() -> Bool {
        guard isOpen, !dispatching else { return false }
        dispatching = true
        defer { dispatching = false }
        while isOpen, let message = dbus_connection_borrow_message(raw) {
            // A signal is taken off the queue and handed to the filter here, in its place in the order
            // of arrival: libdbus's dispatch would only copy its filter list to call it. Everything else
            // (replies, whose pending calls libdbus completes, method calls, the local Disconnected) goes
            // back to the head of the queue for dispatch.
            if dbus_message_get_type(message) == DBUS_MESSAGE_TYPE_SIGNAL,
               dbus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected") == 0 {
                dbus_connection_steal_borrowed_message(raw, message)
                _ = handle(message)
                dbus_message_unref(message)
            } else {
                dbus_connection_return_message(raw, message)
                guard isOpen, dbus_connection_dispatch(raw) == DBUS_DISPATCH_DATA_REMAINS else { break }
            }
        }
        return true
    }

    // MARK: - Incoming messages

    /// The connection's only filter, also called by the drain for the signals it takes off the queue
    /// itself, so what each kind of message does is decided here alone. No object path is registered
    /// with libdbus (exported objects are served here), so for a signal nothing after the filter would
    /// act: answering HANDLED spares libdbus its object-tree dispatch, which splits the message's path
    /// into a freshly allocated array of components and frees it again for every signal. Method calls
    /// are answered here too; other messages (replies nobody waits for) are left to libdbus, which drops
    /// them.
    private func handle(_ message: OpaquePointer) -> DBusHandlerResult {
        switch dbus_message_get_type(message) {
        case DBUS_MESSAGE_TYPE_SIGNAL:
            if dbus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected") != 0 {
                pass.others += 1
                markDisconnected(reason: "the connection to the bus was lost")
                return DBUS_HANDLER_RESULT_HANDLED
            }
            routeSignal(message)
            return DBUS_HANDLER_RESULT_HANDLED
        case DBUS_MESSAGE_TYPE_METHOD_CALL:
            pass.others += 1
            handleMethodCall(message)
            return DBUS_HANDLER_RESULT_HANDLED
        default:
            pass.others += 1
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
    }

    private func markDisconnected(reason: String) {
        guard isConnected else { return }
        isConnected = false
        let calls = pending
        pending.removeAll()
        for (_, call) in calls.sorted(by: { $0.key < $1.key }) {
            dbus_pending_call_cancel(call.pointer)
            dbus_pending_call_unref(call.pointer)
            call.complete(.failure(DBusError(.disconnected, reason)))
        }
        let subs = subscriptions
        subscriptions.removeAll()
        for (_, subscription) in subs { subscription.finish() }
        let watchers = disconnectWatchers
        disconnectWatchers.removeAll()
        for (_, watcher) in watchers {
            watcher.yield(())
            watcher.finish()
        }
        for (_, message) in incoming { dbus_message_unref(message) }
        incoming.removeAll()
    }
}

@available(*, unavailable)
extension ConnectionCore: Sendable {}
