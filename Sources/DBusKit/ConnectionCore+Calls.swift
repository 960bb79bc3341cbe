internal import CDBus
import Synchronization

/// Cancellation state shared between an awaiting task and the queue.
final class CallToken: Sendable {
    let key = Keys.next()
    private let state = Mutex(false)
    var isCancelled: Bool { state.withLock { $0 } }
    func cancel() { state.withLock { $0 = true } }
}

extension ConnectionCore {
    struct PendingCall {
        let pointer: OpaquePointer
        /// Runs once, on the queue, with the reply or why there is none.
        let complete: (Result<DBusMessage, DBusError>) -> Void
    }

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
        complete: @escaping (Result<DBusMessage, DBusError>) -> Void
    ) {
        if token.isCancelled {
            complete(.failure(DBusError(.cancelled, "the call was cancelled")))
            return
        }
        guard isConnected else {
            complete(.failure(DBusError(.disconnected, "not connected to the bus")))
            return
        }
        let message: OpaquePointer
        switch makeMethodCall(destination: destination, path: path, interface: interface, member: member,
                              arguments: arguments) {
        case .success(let m): message = m
        case .failure(let e):
            complete(.failure(e))
            return
        }
        defer { dbus_message_unref(message) }
        var pendingCall: OpaquePointer? = nil
        guard dbus_connection_send_with_reply(raw, message, &pendingCall, timeoutMilliseconds) != 0 else {
            complete(.failure(DBusError(.noMemory, "out of memory sending \(member)")))
            return
        }
        guard let pendingCall else {
            complete(.failure(DBusError(.disconnected, "not connected to the bus")))
            return
        }
        pending[token.key] = PendingCall(pointer: pendingCall, complete: complete)
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
            call.complete(.failure(DBusError(.noReply, "no reply")))
            return
        }
        let decoded = Marshalling.decode(reply)
        dbus_message_unref(reply)
        if decoded.kind == .error {
            let text = decoded.body.first?.string ?? ""
            call.complete(.failure(DBusError(name: decoded.errorName ?? DBusError.Name.failed.rawValue, message: text)))
        } else {
            call.complete(.success(decoded))
        }
    }

    /// Starts several calls in one go, in order, and hands all their results to `complete` (in the same
    /// order) once the last one finished.
    func startCalls(_ calls: [(token: CallToken, destination: String?, path: String, interface: String?, member: String,
                               arguments: [DBusValue])],
                    timeoutMilliseconds: Int32, complete: @escaping ([Result<DBusMessage, DBusError>]) -> Void) {
        final class Gathered {
            var results: [Result<DBusMessage, DBusError>?]
            var left: Int
            init(_ count: Int) {
                results = Array(repeating: nil, count: count)
                left = count
            }
        }
        guard !calls.isEmpty else {
            complete([])
            return
        }
        let gathered = Gathered(calls.count)
        for (index, call) in calls.enumerated() {
            startCall(call.token, destination: call.destination, path: call.path, interface: call.interface,
                      member: call.member, arguments: call.arguments, timeoutMilliseconds: timeoutMilliseconds) { result in
                gathered.results[index] = result
                gathered.left -= 1
                guard gathered.left == 0 else { return }
                complete(gathered.results.map { $0 ?? .failure(DBusError(.failed, "no result")) })
            }
        }
    }

    func cancelCall(_ key: Int) {
        guard let call = pending.removeValue(forKey: key) else { return }
        dbus_pending_call_cancel(call.pointer)
        dbus_pending_call_unref(call.pointer)
        call.complete(.failure(DBusError(.cancelled, "the call was cancelled")))
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
}
