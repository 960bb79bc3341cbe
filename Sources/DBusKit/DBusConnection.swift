import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A private connection to a message bus.
///
/// Every libdbus call for the connection runs on one serial queue, driven by libdbus's watches and
/// timeouts (an idle connection never wakes up). Method calls never block that queue, so a handler of an
/// exported object can be called (for example a pairing agent's `RequestPasskey`) while a call of ours
/// (`Pair`) is waiting for its reply. Losing the bus is an event: pending calls fail with
/// ``DBusError/Name/disconnected``, signal streams finish and ``disconnectEvents()`` fires; the process
/// keeps running.
///
/// Call ``close()`` when done.
public final class DBusConnection: Sendable {
    private let queue: DispatchQueue
    private let core: QueueConfined<ConnectionCore>
    /// This connection's unique bus name (`:1.42`).
    public let uniqueName: String

    private init(queue: DispatchQueue, core: ConnectionCore) {
        self.queue = queue
        self.core = QueueConfined(value: core)
        self.uniqueName = core.uniqueName
    }

    deinit {
        let core = self.core
        queue.async { core.value.close() }
    }

    /// The system bus: `DBUS_SYSTEM_BUS_ADDRESS` if set, else the standard socket.
    public static var systemBusAddress: String {
        if let value = getenv("DBUS_SYSTEM_BUS_ADDRESS"), value.pointee != 0 { return String(cString: value) }
        return "unix:path=/var/run/dbus/system_bus_socket"
    }

    /// Connects to the system bus (see ``systemBusAddress``).
    public static func system() async throws(DBusError) -> DBusConnection {
        try await connect(address: systemBusAddress)
    }

    /// Connects to the bus at a D-Bus address (`unix:path=…`) and registers (`Hello`).
    public static func connect(address: String) async throws(DBusError) -> DBusConnection {
        let queue = DispatchQueue(label: "dbus-connection")
        let result: Result<QueueConfined<ConnectionCore>, DBusError> = await withCheckedContinuation { continuation in
            queue.async {
                continuation.resume(returning: ConnectionCore.open(address: address, queue: queue).map { QueueConfined(value: $0) })
            }
        }
        return DBusConnection(queue: queue, core: try result.get().value)
    }

    /// Runs `body` on the connection's queue and returns its result.
    private func perform<T: Sendable>(_ body: @escaping @Sendable (ConnectionCore) -> T) async -> T {
        let core = self.core
        return await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: body(core.value)) }
        }
    }

    /// Closes the connection. Pending calls fail, signal streams finish. Idempotent.
    public func close() async {
        await perform { $0.close() }
    }

    /// Whether the connection is still up.
    public var isConnected: Bool {
        get async { await perform { $0.isConnected } }
    }

    /// A stream that yields once and finishes when the connection is lost or closed (at once if it is
    /// already down).
    public func disconnectEvents() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        let key = Keys.next()
        let core = self.core
        let queue = self.queue
        continuation.onTermination = { _ in queue.async { core.value.removeDisconnectWatcher(key) } }
        queue.async { core.value.addDisconnectWatcher(key, continuation) }
        return stream
    }

    /// Returns when the connection is lost or closed, or when the task is cancelled.
    public func waitForDisconnect() async {
        for await _ in disconnectEvents() { return }
    }

    // MARK: - Method calls

    /// Calls a method and returns the reply's arguments.
    ///
    /// - Parameters:
    ///   - timeout: how long to wait for the reply; then the call fails with
    ///     ``DBusError/Name/noReply`` (``DBusError/isTimeout``).
    /// - Throws: the peer's error with its name and message, ``DBusError/Name/disconnected``, or
    ///   ``DBusError/Name/cancelled`` when the task is cancelled (the call is abandoned).
    public func call(
        destination: String?, path: String, interface: String?, member: String,
        arguments: [DBusValue] = [], timeout: Duration
    ) async throws(DBusError) -> [DBusValue] {
        try await callMessage(destination: destination, path: path, interface: interface, member: member,
                              arguments: arguments, timeout: timeout).body
    }

    /// Like ``call(destination:path:interface:member:arguments:timeout:)`` but returns the whole reply.
    public func callMessage(
        destination: String?, path: String, interface: String?, member: String,
        arguments: [DBusValue] = [], timeout: Duration
    ) async throws(DBusError) -> DBusMessage {
        let token = CallToken()
        let core = self.core
        let queue = self.queue
        let milliseconds = Self.milliseconds(timeout)
        let result: Result<DBusMessage, DBusError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                queue.async {
                    core.value.startCall(token, destination: destination, path: path, interface: interface,
                                         member: member, arguments: arguments, timeoutMilliseconds: milliseconds) {
                        continuation.resume(returning: $0)
                    }
                }
            }
        } onCancel: {
            token.cancel()
            queue.async { core.value.cancelCall(token.key) }
        }
        return try result.get()
    }

    static func milliseconds(_ duration: Duration) -> Int32 {
        let (seconds, attoseconds) = duration.components
        let total = Double(seconds) * 1000 + Double(attoseconds) / 1e15
        // Int32.max is libdbus's "infinite"; stay just below it.
        return Int32(max(1, min(total.rounded(.up), Double(Int32.max - 1))))
    }

    // MARK: - Signals

    /// Subscribes to the messages matching `rule`.
    ///
    /// The rule is installed on the bus before this returns, so a call made afterwards (for example
    /// `GetManagedObjects`) cannot miss a signal sent after its reply. Messages are delivered in arrival
    /// order, none dropped. The stream finishes when the connection is lost or closed; cancelling its
    /// iteration (or dropping it) removes the rule.
    public func subscribe(_ rule: MatchRule, timeout: Duration = .seconds(10)) async throws(DBusError) -> AsyncStream<DBusMessage> {
        try await subscribe([rule], timeout: timeout)
    }

    /// Subscribes to the messages matching any of `rules`, delivered in one stream in arrival order (so
    /// that, say, a notification and the disconnection that follows it cannot swap places).
    ///
    /// - Parameter filter: evaluated on the connection's queue before a message is buffered; messages it
    ///   rejects cost the consumer nothing (for rules that cannot express an exclusion).
    public func subscribe(_ rules: [MatchRule], timeout: Duration = .seconds(10),
                          where filter: (@Sendable (DBusMessage) -> Bool)? = nil)
        async throws(DBusError) -> AsyncStream<DBusMessage> {
        let (stream, continuation) = AsyncStream.makeStream(of: DBusMessage.self, bufferingPolicy: .unbounded)
        let subscription = try await subscribe(ConnectionCore.Subscription(
            rules: rules, deliver: { continuation.yield($0) }, finish: { continuation.finish() }, filter: filter),
            timeout: timeout)
        continuation.onTermination = { _ in subscription.cancel() }
        return stream
    }

    /// Subscribes with a callback instead of a stream: `onMessage` runs on the connection's queue for each
    /// matching message, in arrival order, and must return quickly without blocking (hand work elsewhere).
    /// `onEnd` runs once when the subscription is cancelled or the connection goes down. This saves a task
    /// hop per message for high-rate signals such as GATT notifications. `onBatchEnd`, when given, runs on
    /// the queue after each pass that delivered messages (everything one wake-up read), so a subscriber
    /// can buffer in `onMessage` and wake its consumer once per pass instead of once per message.
    ///
    /// `awaitsBurst`, when given, is asked on the queue after a pass that delivered messages to this
    /// subscription: true (say, while a peer sends a long series of signals) lets the connection pause a
    /// couple of milliseconds and take in what arrived meanwhile as part of the same pass, so a burst costs
    /// one wake-up per many messages. It pauses only while every message of the pass went to such
    /// subscribers and none of them declines, and no reply is awaited; a wake-up pauses a few
    /// milliseconds at most in all.
    public func subscribe(_ rules: [MatchRule], timeout: Duration = .seconds(10),
                          onMessage: @escaping @Sendable (DBusMessage) -> Void,
                          onBatchEnd: (@Sendable () -> Void)? = nil,
                          awaitsBurst: (@Sendable () -> Bool)? = nil,
                          onEnd: @escaping @Sendable () -> Void) async throws(DBusError) -> DBusSubscription {
        try await subscribe(ConnectionCore.Subscription(rules: rules, deliver: onMessage, finish: onEnd,
                                                        endOfBatch: onBatchEnd, awaitsBurst: awaitsBurst),
                            timeout: timeout)
    }

    private func subscribe(_ entry: ConnectionCore.Subscription, timeout: Duration) async throws(DBusError) -> DBusSubscription {
        let rules = entry.rules
        let key = Keys.next()
        let core = self.core
        let queue = self.queue
        let subscription = DBusSubscription { queue.async { core.value.removeSubscription(key, removeMatch: true) } }
        let added = await perform { $0.addSubscription(key, entry) }
        guard added else { throw DBusError(.disconnected, "not connected to the bus") }
        do {
            try await addMatches(rules, timeout: timeout)
        } catch {
            // Rules already added are removed with the subscription.
            await perform { $0.removeSubscription(key, removeMatch: true) }
            throw error
        }
        return subscription
    }

    /// Installs `rules` on the bus: every `AddMatch` is sent at once and their replies awaited together
    /// (one trip through the connection's queue and one wait instead of one of each per rule). Throws the
    /// first refusal, in rule order.
    private func addMatches(_ rules: [MatchRule], timeout: Duration) async throws(DBusError) {
        let calls = rules.map { rule in
            DBusCall(destination: DBusNames.bus, path: DBusNames.busPath, interface: DBusNames.bus, member: "AddMatch",
                     arguments: [.string(rule.description)])
        }
        for result in await callTogether(calls, timeout: timeout) { _ = try result.get() }
    }

    /// Sends every call at once, in order, and awaits their replies together: one trip through the
    /// connection's queue and one wait instead of one round trip per call. The peer receives them in this
    /// order; calls that depend on an earlier one's outcome do not belong in one round. Each result is
    /// what ``call(destination:path:interface:member:arguments:timeout:)`` would return or throw.
    public func callTogether(_ calls: [DBusCall], timeout: Duration) async -> [Result<[DBusValue], DBusError>] {
        let started = calls.map { call in
            (token: CallToken(), destination: call.destination, path: call.path, interface: call.interface,
             member: call.member, arguments: call.arguments)
        }
        let tokens = started.map(\.token)
        let core = self.core
        let queue = self.queue
        let milliseconds = Self.milliseconds(timeout)
        let results: [Result<DBusMessage, DBusError>] = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                queue.async {
                    core.value.startCalls(started, timeoutMilliseconds: milliseconds) { continuation.resume(returning: $0) }
                }
            }
        } onCancel: {
            for token in tokens { token.cancel() }
            queue.async { for token in tokens { core.value.cancelCall(token.key) } }
        }
        return results.map { $0.map(\.body) }
    }

    /// `NameOwnerChanged` for one name: `(name, oldOwner, newOwner)`; an empty owner means none.
    public func nameOwnerChanges(of name: String) async throws(DBusError) -> AsyncStream<(old: String, new: String)> {
        let messages = try await subscribe(MatchRule(
            sender: DBusNames.bus, interface: DBusNames.bus, member: "NameOwnerChanged", path: DBusNames.busPath,
            arguments: [0: name]))
        let (stream, continuation) = AsyncStream.makeStream(of: (old: String, new: String).self)
        let task = Task {
            for await message in messages {
                guard message.body.count == 3, let old = message.body[1].string, let new = message.body[2].string
                else { continue }
                continuation.yield((old: old, new: new))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// The unique name owning `name`, or nil when nobody owns it.
    public func nameOwner(of name: String, timeout: Duration = .seconds(10)) async throws(DBusError) -> String? {
        do {
            let reply = try await call(destination: DBusNames.bus, path: DBusNames.busPath, interface: DBusNames.bus,
                                       member: "GetNameOwner", arguments: [.string(name)], timeout: timeout)
            return reply.first?.string
        } catch where error.name == .nameHasNoOwner {
            return nil
        }
    }

    /// Emits a signal, to one peer (`destination`) or to everyone subscribed (nil).
    public func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue] = [],
                           destination: String? = nil) async throws(DBusError) {
        try await perform {
            $0.emitSignal(path: path, interface: interface, member: member, arguments: arguments, destination: destination)
        }.get()
    }

    // MARK: - Names

    /// Requests a well-known name.
    public func requestName(_ name: String, flags: RequestNameFlags = [.doNotQueue],
                            timeout: Duration = .seconds(10)) async throws(DBusError) -> RequestNameResult {
        let reply = try await call(destination: DBusNames.bus, path: DBusNames.busPath, interface: DBusNames.bus,
                                   member: "RequestName", arguments: [.string(name), .uint32(flags.rawValue)],
                                   timeout: timeout)
        guard let code = reply.first?.uint32, let result = RequestNameResult(rawValue: code) else {
            throw DBusError(.failed, "unexpected RequestName reply")
        }
        return result
    }

    /// Releases a well-known name. Returns the bus's answer (1 released, 2 non-existent, 3 not owner).
    @discardableResult
    public func releaseName(_ name: String, timeout: Duration = .seconds(10)) async throws(DBusError) -> UInt32 {
        let reply = try await call(destination: DBusNames.bus, path: DBusNames.busPath, interface: DBusNames.bus,
                                   member: "ReleaseName", arguments: [.string(name)], timeout: timeout)
        return reply.first?.uint32 ?? 0
    }

    // MARK: - Exported objects

    /// Exports interfaces at `path` (adding to, or replacing same-named, interfaces already there). Under
    /// an ObjectManager root this emits `InterfacesAdded`.
    public func export(path: String, interfaces: [DBusInterface]) async throws(DBusError) {
        try await perform { $0.export(path: path, interfaces: interfaces) }.get()
    }

    /// Removes interfaces (all when nil) from `path`. Under an ObjectManager root this emits
    /// `InterfacesRemoved`.
    public func unexport(path: String, interfaces: [String]? = nil) async {
        await perform { $0.unexport(path: path, interfaces: interfaces) }
    }

    /// Serves `org.freedesktop.DBus.ObjectManager` at `root` for every exported object below it.
    public func exportObjectManager(at root: String) async throws(DBusError) {
        guard Marshalling.isValidObjectPath(root) else { throw DBusError(.invalidArgs, "invalid object path \"\(root)\"") }
        await perform { core in _ = core.managerRoots.insert(root) }
    }

    /// Stops serving the ObjectManager at `root`.
    public func unexportObjectManager(at root: String) async {
        await perform { core in _ = core.managerRoots.remove(root) }
    }

    /// Updates stored properties and, when `emit`, sends one `PropertiesChanged` with all of `changes`
    /// (also values that did not change: BlueZ reports every notification this way).
    public func setProperties(path: String, interface: String, _ changes: [String: DBusValue],
                              invalidated: [String] = [], emit: Bool = true) async {
        await perform { $0.updateProperties(path: path, interface: interface, changes, invalidated: invalidated, emit: emit) }
    }

    /// Stops (false) or resumes (true) answering method calls to exported objects: calls that arrive
    /// meanwhile get no reply at all, as from a peer that holds its bus name but is stuck.
    public func setAnsweringCalls(_ on: Bool) async {
        await perform { $0.answeringCalls = on }
    }

    /// One stored property value.
    public func property(path: String, interface: String, name: String) async -> DBusValue? {
        await perform { $0.objects[path]?[interface]?.properties[name] }
    }

    /// All stored properties of one interface.
    public func properties(path: String, interface: String) async -> [String: DBusValue]? {
        await perform { $0.objects[path]?[interface]?.properties }
    }

    /// Paths of all exported objects.
    public func exportedPaths() async -> [String] {
        await perform { $0.objects.keys.sorted() }
    }
}

/// A callback subscription; ``cancel()`` removes it (and its match rules). Idempotent.
public final class DBusSubscription: Sendable {
    private let action: @Sendable () -> Void
    init(cancel: @escaping @Sendable () -> Void) { action = cancel }
    public func cancel() { action() }
}

/// One method call of ``DBusConnection/callTogether(_:timeout:)``.
public struct DBusCall: Sendable {
    public var destination: String?
    public var path: String
    public var interface: String?
    public var member: String
    public var arguments: [DBusValue]

    public init(destination: String?, path: String, interface: String?, member: String, arguments: [DBusValue] = []) {
        self.destination = destination
        self.path = path
        self.interface = interface
        self.member = member
        self.arguments = arguments
    }
}
