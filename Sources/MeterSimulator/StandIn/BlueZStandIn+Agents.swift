import DBusKit
import GatewayCore
import GlucoseProfile

/// `AgentManager1` and `ProfileManager1` on `/org/bluez`, and clients leaving the bus.
extension BlueZStandIn {
    // MARK: Agents

    func agentManagerInterface(_ run: BluetoothdRun) -> DBusInterface {
        DBusInterface("org.bluez.AgentManager1", methods: [
            DBusMethod("RegisterAgent", in: "os") { [weak self] call in
                guard let self else { return [] }
                try await self.registerAgent(call, run)
                return []
            },
            DBusMethod("UnregisterAgent", in: "o") { [weak self] call in
                guard let self else { return [] }
                try await self.unregisterAgent(call, run)
                return []
            },
            DBusMethod("RequestDefaultAgent", in: "o") { [weak self] call in
                guard let self else { return [] }
                try await self.requestDefaultAgent(call, run)
                return []
            },
        ])
    }

    func profileManagerInterface() -> DBusInterface {
        DBusInterface("org.bluez.ProfileManager1", methods: [
            DBusMethod("RegisterProfile", in: "osa{sv}") { _ in throw bluezError("NotSupported", "Operation is not supported") },
            DBusMethod("UnregisterProfile", in: "o") { _ in throw bluezError("DoesNotExist", "Does Not Exist") },
        ])
    }

    private func registerAgent(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard call.arguments.count == 2, let path = call.arguments[0].objectPath, let cap = call.arguments[1].string else {
            throw bluezError("InvalidArguments", "Invalid arguments in method call")
        }
        let capability = cap.isEmpty ? "KeyboardDisplay" : cap
        guard ["DisplayOnly", "DisplayYesNo", "KeyboardOnly", "NoInputNoOutput", "KeyboardDisplay"].contains(capability) else {
            throw bluezError("InvalidArguments", "Invalid arguments in method call")
        }
        guard agents[call.sender] == nil else { throw bluezError("AlreadyExists", "Already Exists") }
        agents[call.sender] = Agent(sender: call.sender, path: path, capability: capability)
    }

    private func unregisterAgent(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard let path = call.arguments.first?.objectPath, let a = agents[call.sender], a.path == path else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        agents.removeValue(forKey: call.sender)
        if defaultAgentSender == call.sender { defaultAgentSender = nil }
    }

    private func requestDefaultAgent(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard let path = call.arguments.first?.objectPath, let a = agents[call.sender], a.path == path else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        defaultAgentSender = call.sender
    }

    /// A client left the bus: its agent, discovery session and notify sessions (acquired sockets too) end
    /// with it, and a pairing it started is cancelled. Its discovery ends last, so a client that sees
    /// `Discovering` go false after the last discoverer left knows the rest is done.
    func senderLeft(_ sender: String, _ run: BluetoothdRun) async {
        guard !run.isOver else { return }
        agents.removeValue(forKey: sender)
        profiles.removeValue(forKey: sender)
        if defaultAgentSender == sender { defaultAgentSender = nil }
        filters.removeValue(forKey: sender)
        for (path, var sessions) in notifySessions where sessions.contains(sender) {
            sessions.remove(sender)
            if sessions.isEmpty, let (address, _, ch) = lookupCharacteristic(path) {
                await endNotify(address, ch.uuid, path)
            } else {
                notifySessions[path] = sessions
            }
        }
        for (path, session) in acquired where session.owner == sender { await releaseAcquired(path) }
        for d in devices.values where d.pairAgent?.sender == sender || d.pairCaller == sender {
            d.pairTask?.cancel()
        }
        if discovery.removeValue(forKey: sender) != nil, discovery.isEmpty {
            await discoveryEnded()
        }
    }
}
