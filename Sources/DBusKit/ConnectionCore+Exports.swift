internal import CDBus
import Dispatch

extension ConnectionCore {
    func handleMethodCall(_ message: OpaquePointer) {
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
        answerWhenDone(message) { try await handler(call) }
    }

    /// Runs `work` in a task and sends its result as the reply to `message` when it finishes.
    private func answerWhenDone(_ message: OpaquePointer, _ work: @escaping @Sendable () async throws -> [DBusValue]) {
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
            answerWhenDone(message) {
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
        for name in invalidated { target.properties[name] = nil }
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
