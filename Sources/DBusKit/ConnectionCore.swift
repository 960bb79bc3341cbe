internal import CDBus
import Dispatch
import Synchronization

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

/// Cancellation state shared between an awaiting task and the queue.
final class CallToken: Sendable {
    let key = Keys.next()
    private let state = Mutex(false)
    var isCancelled: Bool { state.withLock { $0 } }
    func cancel() { state.withLock { $0 = true } }
}

/// The libdbus connection and everything attached to it. Confined to `queue`; never `Sendable`.
///
/// Main loop: libdbus's watches become Dispatch read/write sources and its timeouts Dispatch timers, all
/// on `queue`, so an idle connection has no timer and wakes only when the socket has data. libdbus calls
/// the watch, timeout and dispatch-status callbacks with its connection lock held, so they only create
/// or cancel sources and schedule ``drain()``; they never call back into the connection.
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
    private var timers: [OpaquePointer: any DispatchSourceTimer] = [:]

    private struct PendingCall {
        let pointer: OpaquePointer
        let continuation: CheckedContinuation<Result<DBusMessage, DBusError>, Never>
    }
    private var pending: [Int: PendingCall] = [:]

    /// A subscriber: `deliver` and `finish` run on the queue, in arrival order, and must not block.
    struct Subscription {
        let rules: [MatchRule]
        let deliver: @Sendable (DBusMessage) -> Void
        let finish: @Sendable () -> Void
    }
    private var subscriptions: [Int: Subscription] = [:]
    private var disconnectWatchers: [Int: AsyncStream<Void>.Continuation] = [:]

    /// Exported objects by path, with their interfaces by name.
    var objects: [String: [String: DBusInterface]] = [:]
    var managerRoots: Set<String> = []
    /// Incoming method calls whose handler has not returned yet (referenced libdbus messages).
    private var incoming: [Int: OpaquePointer] = [:]
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
                core.timers.removeValue(forKey: timeout)?.cancel()
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
        for timer in timers.values { timer.cancel() }
        timers.removeAll()
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
        drain()
    }

    private func updateTimeout(_ timeout: OpaquePointer) {
        timers.removeValue(forKey: timeout)?.cancel()
        guard dbus_timeout_get_enabled(timeout) != 0 else { return }
        let interval = max(1, Int(dbus_timeout_get_interval(timeout)))
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let me = QueueConfined(value: self)
        let handle = QueueConfined(value: timeout)
        timer.schedule(deadline: .now() + .milliseconds(interval), repeating: .milliseconds(interval))
        timer.setEventHandler { me.value.fireTimeout(handle.value) }
        timer.resume()
        timers[timeout] = timer
    }

    private func fireTimeout(_ timeout: OpaquePointer) {
        guard isOpen, timers[timeout] != nil else { return }
        _ = dbus_timeout_handle(timeout)
        drain()
    }

    func scheduleDrain() {
        let me = QueueConfined(value: self)
        queue.async { me.value.drain() }
    }

    /// Dispatches every message libdbus has read. Never re-entered: a filter that ends up here returns at once.
    func drain() {
        guard isOpen, !dispatching else { return }
        dispatching = true
        defer { dispatching = false }
        while isOpen && dbus_connection_dispatch(raw) == DBUS_DISPATCH_DATA_REMAINS {}
    }

    // MARK: - Incoming messages

    private func handle(_ message: OpaquePointer) -> DBusHandlerResult {
        switch dbus_message_get_type(message) {
        case DBUS_MESSAGE_TYPE_SIGNAL:
            if dbus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected") != 0 {
                markDisconnected(reason: "the connection to the bus was lost")
                return DBUS_HANDLER_RESULT_HANDLED
            }
            if !subscriptions.isEmpty {
                // Headers first; the body is decoded only when some rule wants the message.
                var decoded = Marshalling.decodeHeader(message)
                var bodyDecoded = false
                for subscription in subscriptions.values {
                    var wanted = false
                    for rule in subscription.rules where rule.matchesHeader(decoded) {
                        if rule.arguments.isEmpty {
                            wanted = true
                            break
                        }
                        if !bodyDecoded {
                            decoded.body = Marshalling.decodeBody(message)
                            bodyDecoded = true
                        }
                        if rule.matches(decoded) {
                            wanted = true
                            break
                        }
                    }
                    guard wanted else { continue }
                    if !bodyDecoded {
                        decoded.body = Marshalling.decodeBody(message)
                        bodyDecoded = true
                    }
                    subscription.deliver(decoded)
                }
            }
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        case DBUS_MESSAGE_TYPE_METHOD_CALL:
            handleMethodCall(message)
            return DBUS_HANDLER_RESULT_HANDLED
        default:
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
            call.continuation.resume(returning: .failure(DBusError(.disconnected, reason)))
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

    // MARK: - Outgoing calls

    private final class PendingContext {
        weak var core: ConnectionCore?
        let key: Int
        init(core: ConnectionCore, key: Int) {
            self.core = core
            self.key = key
        }
    }

    func startCall(
        _ token: CallToken, destination: String?, path: String, interface: String?, member: String,
        arguments: [DBusValue], timeoutMilliseconds: Int32,
        continuation: CheckedContinuation<Result<DBusMessage, DBusError>, Never>
    ) {
        if token.isCancelled {
            continuation.resume(returning: .failure(DBusError(.cancelled, "the call was cancelled")))
            return
        }
        guard isConnected else {
            continuation.resume(returning: .failure(DBusError(.disconnected, "not connected to the bus")))
            return
        }
        let message: OpaquePointer
        switch makeMethodCall(destination: destination, path: path, interface: interface, member: member,
                              arguments: arguments) {
        case .success(let m): message = m
        case .failure(let e):
            continuation.resume(returning: .failure(e))
            return
        }
        defer { dbus_message_unref(message) }
        var pendingCall: OpaquePointer? = nil
        guard dbus_connection_send_with_reply(raw, message, &pendingCall, timeoutMilliseconds) != 0 else {
            continuation.resume(returning: .failure(DBusError(.noMemory, "out of memory sending \(member)")))
            return
        }
        guard let pendingCall else {
            continuation.resume(returning: .failure(DBusError(.disconnected, "not connected to the bus")))
            return
        }
        pending[token.key] = PendingCall(pointer: pendingCall, continuation: continuation)
        let context = Unmanaged.passRetained(PendingContext(core: self, key: token.key)).toOpaque()
        _ = dbus_pending_call_set_notify(
            pendingCall,
            { _, data in
                guard let data else { return }
                let context = Unmanaged<PendingContext>.fromOpaque(data).takeUnretainedValue()
                context.core?.completeCall(context.key)
            },
            context,
            { data in
                guard let data else { return }
                Unmanaged<PendingContext>.fromOpaque(data).release()
            })
        // set_notify does not fire for a call that completed already.
        if dbus_pending_call_get_completed(pendingCall) != 0 { completeCall(token.key) }
    }

    private func completeCall(_ key: Int) {
        guard let call = pending.removeValue(forKey: key) else { return }
        let reply = dbus_pending_call_steal_reply(call.pointer)
        dbus_pending_call_unref(call.pointer)
        guard let reply else {
            call.continuation.resume(returning: .failure(DBusError(.noReply, "no reply")))
            return
        }
        let decoded = Marshalling.decode(reply)
        dbus_message_unref(reply)
        if decoded.kind == .error {
            let text = decoded.body.first?.string ?? ""
            call.continuation.resume(returning: .failure(DBusError(name: decoded.errorName ?? DBusError.Name.failed.rawValue, message: text)))
        } else {
            call.continuation.resume(returning: .success(decoded))
        }
    }

    func cancelCall(_ key: Int) {
        guard let call = pending.removeValue(forKey: key) else { return }
        dbus_pending_call_cancel(call.pointer)
        dbus_pending_call_unref(call.pointer)
        call.continuation.resume(returning: .failure(DBusError(.cancelled, "the call was cancelled")))
    }

    private func makeMethodCall(destination: String?, path: String, interface: String?, member: String,
                                arguments: [DBusValue]) -> Result<OpaquePointer, DBusError> {
        if let destination, !Marshalling.isValidBusName(destination) {
            return .failure(DBusError(.invalidArgs, "invalid bus name \"\(destination)\""))
        }
        guard Marshalling.isValidObjectPath(path) else { return .failure(DBusError(.invalidArgs, "invalid object path \"\(path)\"")) }
        if let interface, !Marshalling.isValidInterface(interface) {
            return .failure(DBusError(.invalidArgs, "invalid interface name \"\(interface)\""))
        }
        guard Marshalling.isValidMember(member) else { return .failure(DBusError(.invalidArgs, "invalid member name \"\(member)\"")) }
        do { try Marshalling.validate(arguments) } catch { return .failure(error) }
        guard let message = dbus_message_new_method_call(destination, path, interface, member) else {
            return .failure(DBusError(.noMemory, "out of memory"))
        }
        guard Marshalling.append(arguments, to: message) else {
            dbus_message_unref(message)
            return .failure(DBusError(.noMemory, "out of memory"))
        }
        return .success(message)
    }

    // MARK: - Signals

    func addSubscription(_ key: Int, _ subscription: Subscription) -> Bool {
        guard isConnected else {
            subscription.finish()
            return false
        }
        subscriptions[key] = subscription
        return true
    }

    func removeSubscription(_ key: Int, removeMatch: Bool) {
        guard let subscription = subscriptions.removeValue(forKey: key) else { return }
        subscription.finish()
        if removeMatch && isConnected {
            // With no error argument this sends RemoveMatch without waiting for the reply.
            for rule in subscription.rules { dbus_bus_remove_match(raw, rule.description, nil) }
        }
    }

    func addDisconnectWatcher(_ key: Int, _ continuation: AsyncStream<Void>.Continuation) {
        guard isConnected else {
            continuation.yield(())
            continuation.finish()
            return
        }
        disconnectWatchers[key] = continuation
    }

    func removeDisconnectWatcher(_ key: Int) {
        disconnectWatchers.removeValue(forKey: key)
    }

    func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue],
                    destination: String?) -> Result<Void, DBusError> {
        guard isConnected else { return .failure(DBusError(.disconnected, "not connected to the bus")) }
        guard Marshalling.isValidObjectPath(path) else { return .failure(DBusError(.invalidArgs, "invalid object path \"\(path)\"")) }
        guard Marshalling.isValidInterface(interface) else { return .failure(DBusError(.invalidArgs, "invalid interface name \"\(interface)\"")) }
        guard Marshalling.isValidMember(member) else { return .failure(DBusError(.invalidArgs, "invalid member name \"\(member)\"")) }
        if let destination, !Marshalling.isValidBusName(destination) {
            return .failure(DBusError(.invalidArgs, "invalid bus name \"\(destination)\""))
        }
        do { try Marshalling.validate(arguments) } catch { return .failure(error) }
        guard let message = dbus_message_new_signal(path, interface, member) else {
            return .failure(DBusError(.noMemory, "out of memory"))
        }
        defer { dbus_message_unref(message) }
        if let destination { _ = dbus_message_set_destination(message, destination) }
        guard Marshalling.append(arguments, to: message), dbus_connection_send(raw, message, nil) != 0 else {
            return .failure(DBusError(.noMemory, "out of memory"))
        }
        return .success(())
    }

    // MARK: - Exported objects

    private func handleMethodCall(_ message: OpaquePointer) {
        guard answeringCalls else { return }
        let decoded = Marshalling.decode(message)
        let path = decoded.path ?? "/"
        let member = decoded.member ?? ""
        let call = DBusMethodCall(sender: decoded.sender ?? "", path: path, interface: decoded.interface,
                                  member: member, arguments: decoded.body)
        switch (decoded.interface, member) {
        case (DBusNames.introspectable?, "Introspect"), (nil, "Introspect"):
            reply(to: message, .success([.string(introspection(of: path))]))
            return
        case (DBusNames.objectManager?, "GetManagedObjects") where managerRoots.contains(path),
             (nil, "GetManagedObjects") where managerRoots.contains(path):
            reply(to: message, .success([.managedObjects(managedObjects(under: path))]))
            return
        default:
            break
        }
        guard let interfaces = objects[path] else {
            reply(to: message, .failure(DBusError(.unknownObject, "No such object path '\(path)'")))
            return
        }
        if decoded.interface == DBusNames.properties {
            handlePropertiesCall(message, call: call, interfaces: interfaces)
            return
        }
        let method: DBusMethod?
        if let name = decoded.interface {
            guard let interface = interfaces[name] else {
                reply(to: message, .failure(DBusError(.unknownInterface, "No such interface '\(name)' at '\(path)'")))
                return
            }
            method = interface.methods[member]
        } else {
            method = interfaces.keys.sorted().lazy.compactMap { interfaces[$0]?.methods[member] }.first
        }
        guard let method else {
            reply(to: message, .failure(DBusError(.unknownMethod, "No such method '\(member)' at '\(path)'")))
            return
        }
        let handler = method.handler
        defer_(message) { try await handler(call) }
    }

    /// Runs `work` in a task and sends its result as the reply to `message` when it finishes.
    private func defer_(_ message: OpaquePointer, _ work: @escaping @Sendable () async throws -> [DBusValue]) {
        let key = Keys.next()
        dbus_message_ref(message)
        incoming[key] = message
        let me = QueueConfined(value: self)
        let queue = self.queue
        Task {
            let result: Result<[DBusValue], DBusError>
            do {
                result = .success(try await work())
            } catch let error as DBusError {
                result = .failure(error)
            } catch {
                result = .failure(DBusError(.failed, String(describing: error)))
            }
            queue.async { me.value.finishIncoming(key, result) }
        }
    }

    private func finishIncoming(_ key: Int, _ result: Result<[DBusValue], DBusError>) {
        guard let message = incoming.removeValue(forKey: key) else { return }
        defer { dbus_message_unref(message) }
        guard answeringCalls else { return }
        reply(to: message, result)
    }

    private func reply(to message: OpaquePointer, _ result: Result<[DBusValue], DBusError>) {
        guard isConnected, dbus_message_get_no_reply(message) == 0 else { return }
        var outcome = result
        if case .success(let values) = outcome {
            do { try Marshalling.validate(values) } catch { outcome = .failure(DBusError(.failed, "invalid reply: \(error.message)")) }
        }
        let reply: OpaquePointer?
        switch outcome {
        case .success(let values):
            reply = dbus_message_new_method_return(message)
            if let reply, !Marshalling.append(values, to: reply) {
                dbus_message_unref(reply)
                return
            }
        case .failure(let error):
            let name = Marshalling.isValidErrorName(error.name.rawValue) ? error.name.rawValue : DBusError.Name.failed.rawValue
            let text = String(error.message.unicodeScalars.filter { $0 != "\0" })
            reply = dbus_message_new_error(message, name, text)
        }
        guard let reply else { return }
        _ = dbus_connection_send(raw, reply, nil)
        dbus_message_unref(reply)
    }

    private func handlePropertiesCall(_ message: OpaquePointer, call: DBusMethodCall, interfaces: [String: DBusInterface]) {
        let args = call.arguments
        switch call.member {
        case "Get":
            guard args.count == 2, let ifaceName = args[0].string, let name = args[1].string else {
                reply(to: message, .failure(DBusError(.invalidArgs, "Get expects (ss)")))
                return
            }
            guard let value = interfaces[ifaceName]?.properties[name] else {
                reply(to: message, .failure(DBusError(.unknownProperty, "No such property '\(name)' on '\(ifaceName)'")))
                return
            }
            reply(to: message, .success([.variant(value)]))
        case "GetAll":
            guard args.count == 1, let ifaceName = args[0].string else {
                reply(to: message, .failure(DBusError(.invalidArgs, "GetAll expects (s)")))
                return
            }
            guard let interface = interfaces[ifaceName] else {
                reply(to: message, .failure(DBusError(.unknownInterface, "No such interface '\(ifaceName)'")))
                return
            }
            reply(to: message, .success([.vardict(interface.properties)]))
        case "Set":
            guard args.count == 3, let ifaceName = args[0].string, let name = args[1].string,
                  case .variant(let value) = args[2] else {
                reply(to: message, .failure(DBusError(.invalidArgs, "Set expects (ssv)")))
                return
            }
            guard let interface = interfaces[ifaceName], let current = interface.properties[name] else {
                reply(to: message, .failure(DBusError(.unknownProperty, "No such property '\(name)' on '\(ifaceName)'")))
                return
            }
            guard interface.writableProperties.contains(name), let setter = interface.setter else {
                reply(to: message, .failure(DBusError(.propertyReadOnly, "Property '\(name)' is read-only")))
                return
            }
            guard current.signature == value.signature else {
                reply(to: message, .failure(DBusError(.invalidArgs, "Property '\(name)' has type \(current.signature)")))
                return
            }
            let path = call.path
            let me = QueueConfined(value: self)
            let queue = self.queue
            defer_(message) {
                try await setter(name, value, call)
                queue.async { me.value.updateProperties(path: path, interface: ifaceName, [name: value], invalidated: [], emit: true) }
                return []
            }
        default:
            reply(to: message, .failure(DBusError(.unknownMethod, "No such method '\(call.member)' on Properties")))
        }
    }

    func export(path: String, interfaces: [DBusInterface]) -> Result<Void, DBusError> {
        guard Marshalling.isValidObjectPath(path) else { return .failure(DBusError(.invalidArgs, "invalid object path \"\(path)\"")) }
        for interface in interfaces {
            guard Marshalling.isValidInterface(interface.name) else {
                return .failure(DBusError(.invalidArgs, "invalid interface name \"\(interface.name)\""))
            }
            do { try Marshalling.validate(Array(interface.properties.values)) } catch { return .failure(error) }
        }
        var existing = objects[path] ?? [:]
        for interface in interfaces { existing[interface.name] = interface }
        objects[path] = existing
        if let root = managerRoot(of: path), !interfaces.isEmpty {
            var added: [String: [String: DBusValue]] = [:]
            for interface in interfaces { added[interface.name] = interface.properties }
            _ = emitSignal(path: root, interface: DBusNames.objectManager, member: "InterfacesAdded",
                           arguments: [.objectPath(path), .interfaces(added)], destination: nil)
        }
        return .success(())
    }

    func unexport(path: String, interfaces names: [String]?) {
        guard var existing = objects[path] else { return }
        let removed = names.map { $0.filter { existing[$0] != nil } } ?? existing.keys.sorted()
        for name in removed { existing.removeValue(forKey: name) }
        objects[path] = existing.isEmpty ? nil : existing
        if let root = managerRoot(of: path), !removed.isEmpty {
            _ = emitSignal(path: root, interface: DBusNames.objectManager, member: "InterfacesRemoved",
                           arguments: [.objectPath(path), .strings(removed)], destination: nil)
        }
    }

    func updateProperties(path: String, interface: String, _ changes: [String: DBusValue], invalidated: [String],
                          emit: Bool) {
        guard var interfaces = objects[path], var target = interfaces[interface] else { return }
        for (name, value) in changes { target.properties[name] = value }
        interfaces[interface] = target
        objects[path] = interfaces
        if emit {
            _ = emitSignal(path: path, interface: DBusNames.properties, member: "PropertiesChanged",
                           arguments: [.string(interface), .vardict(changes), .strings(invalidated)],
                           destination: nil)
        }
    }

    /// The deepest ObjectManager root strictly above `path`.
    private func managerRoot(of path: String) -> String? {
        managerRoots.filter { root in
            root == "/" ? path != "/" : path.hasPrefix(root + "/")
        }.max { $0.count < $1.count }
    }

    private func managedObjects(under root: String) -> [String: [String: [String: DBusValue]]] {
        var out: [String: [String: [String: DBusValue]]] = [:]
        for (path, interfaces) in objects where (root == "/" ? path != "/" : path.hasPrefix(root + "/")) {
            var entry: [String: [String: DBusValue]] = [:]
            for (name, interface) in interfaces { entry[name] = interface.properties }
            out[path] = entry
        }
        return out
    }

    private func introspection(of path: String) -> String {
        var xml = "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n"
        xml += "\"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n"
        xml += "  <interface name=\"\(DBusNames.introspectable)\"><method name=\"Introspect\"><arg name=\"xml\" type=\"s\" direction=\"out\"/></method></interface>\n"
        if objects[path] != nil {
            xml += "  <interface name=\"\(DBusNames.properties)\">"
            xml += "<method name=\"Get\"><arg type=\"s\" direction=\"in\"/><arg type=\"s\" direction=\"in\"/><arg type=\"v\" direction=\"out\"/></method>"
            xml += "<method name=\"GetAll\"><arg type=\"s\" direction=\"in\"/><arg type=\"a{sv}\" direction=\"out\"/></method>"
            xml += "<method name=\"Set\"><arg type=\"s\" direction=\"in\"/><arg type=\"s\" direction=\"in\"/><arg type=\"v\" direction=\"in\"/></method>"
            xml += "<signal name=\"PropertiesChanged\"><arg type=\"s\"/><arg type=\"a{sv}\"/><arg type=\"as\"/></signal></interface>\n"
        }
        if managerRoots.contains(path) {
            xml += "  <interface name=\"\(DBusNames.objectManager)\"><method name=\"GetManagedObjects\"><arg type=\"a{oa{sa{sv}}}\" direction=\"out\"/></method>"
            xml += "<signal name=\"InterfacesAdded\"><arg type=\"o\"/><arg type=\"a{sa{sv}}\"/></signal>"
            xml += "<signal name=\"InterfacesRemoved\"><arg type=\"o\"/><arg type=\"as\"/></signal></interface>\n"
        }
        for (name, interface) in (objects[path] ?? [:]).sorted(by: { $0.key < $1.key }) {
            xml += "  <interface name=\"\(name)\">\n"
            for (methodName, method) in interface.methods.sorted(by: { $0.key < $1.key }) {
                xml += "    <method name=\"\(methodName)\">"
                for type in Self.splitSignature(method.inSignature) { xml += "<arg type=\"\(type)\" direction=\"in\"/>" }
                for type in Self.splitSignature(method.outSignature) { xml += "<arg type=\"\(type)\" direction=\"out\"/>" }
                xml += "</method>\n"
            }
            for (signalName, signature) in interface.signals.sorted(by: { $0.key < $1.key }) {
                xml += "    <signal name=\"\(signalName)\">"
                for type in Self.splitSignature(signature) { xml += "<arg type=\"\(type)\"/>" }
                xml += "</signal>\n"
            }
            for (propertyName, value) in interface.properties.sorted(by: { $0.key < $1.key }) {
                let access = interface.writableProperties.contains(propertyName) ? "readwrite" : "read"
                xml += "    <property name=\"\(propertyName)\" type=\"\(value.signature)\" access=\"\(access)\"/>\n"
            }
            xml += "  </interface>\n"
        }
        let prefix = path == "/" ? "/" : path + "/"
        var children = Set<String>()
        for other in objects.keys where other.hasPrefix(prefix) && other != path {
            if let first = other.dropFirst(prefix.count).split(separator: "/").first { children.insert(String(first)) }
        }
        for child in children.sorted() { xml += "  <node name=\"\(child)\"/>\n" }
        xml += "</node>\n"
        return xml
    }

    /// Splits a signature into its single complete types ("sa{sv}" → ["s", "a{sv}"]).
    static func splitSignature(_ signature: String) -> [String] {
        var out: [String] = []
        var current = ""
        var depth = 0
        for ch in signature {
            current.append(ch)
            switch ch {
            case "(", "{": depth += 1
            case ")", "}": depth -= 1
            case "a": continue
            default: break
            }
            if depth == 0 && ch != "a" {
                out.append(current)
                current = ""
            }
        }
        return out
    }
}

@available(*, unavailable)
extension ConnectionCore: Sendable {}
