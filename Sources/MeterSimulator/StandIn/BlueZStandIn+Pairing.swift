import DBusKit
import GatewayCore
import GlucoseProfile

/// `Device1.Pair` and `CancelPairing`: the passkey asked from the client's agent.
extension BlueZStandIn {
    // MARK: Pairing

    func pair(_ address: String, _ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard powered else { throw bluezError("NotReady", "Resource Not Ready") }
        guard let m = meters[address], devices[address] != nil else { throw DBusError(.unknownObject, "Device is gone") }
        guard !m.paired else { throw bluezError("AlreadyExists", "Already Paired") }
        guard devices[address]?.pairTask == nil, devices[address]?.connectTask == nil else {
            throw bluezError("InProgress", "In Progress")
        }
        devices[address]?.temporary = false
        let agent = agents[call.sender] ?? defaultAgentSender.flatMap { agents[$0] }
        if devices[address]?.connected != true {
            try await establishLink(address, run)
        }
        guard let agent, ["KeyboardOnly", "KeyboardDisplay"].contains(agent.capability) else {
            // No agent able to type the passkey: SMP fails and the meter drops the link.
            await disconnectLink(address, reason: "org.bluez.Reason.Authentication")
            throw bluezError("AuthenticationFailed", "Authentication Failed")
        }
        guard let c = connection else { throw bluezError("Failed", "Not connected") }
        let devPath = devicePath(address)
        let stalls = quirks[address]?.contains(.pairingStalls) == true
        let task = Task { () throws -> Void in
            let reply: [DBusValue]
            do {
                reply = try await c.call(destination: agent.sender, path: agent.path, interface: "org.bluez.Agent1",
                                         member: "RequestPasskey", arguments: [.objectPath(devPath)], timeout: .seconds(60))
            } catch let error as DBusError {
                if error.isTimeout {
                    _ = try? await c.call(destination: agent.sender, path: agent.path, interface: "org.bluez.Agent1",
                                          member: "Cancel", timeout: .seconds(5))
                    throw bluezError("AuthenticationTimeout", "Authentication Timeout")
                }
                if error.name == .cancelled { throw CancellationError() }
                switch error.name.rawValue {
                case "org.bluez.Error.Canceled": throw bluezError("AuthenticationCanceled", "Authentication Canceled")
                case "org.bluez.Error.Rejected": throw bluezError("AuthenticationRejected", "Authentication Rejected")
                default: throw bluezError("AuthenticationFailed", "Authentication Failed")
                }
            } catch {
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            }
            guard let first = reply.first, let passkey = first.uint32 else {
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            }
            if stalls { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
            guard passkey == m.description.passkey else {
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            }
        }
        devices[address]?.pairTask = task
        devices[address]?.pairAgent = (agent.sender, agent.path)
        devices[address]?.pairCaller = call.sender
        do {
            try await task.value
        } catch {
            devices[address]?.pairTask = nil
            devices[address]?.pairAgent = nil
            await disconnectLink(address, reason: "org.bluez.Reason.Authentication")
            if error is CancellationError { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
            throw error
        }
        devices[address]?.pairTask = nil
        devices[address]?.pairAgent = nil
        try run.check()
        meters[address]?.paired = true
        meters[address]?.forgotBond = false
        meters[address]?.bondRefusals = 0
        saveState()
        await setDevice(address, ["Paired": .bool(true), "Bonded": .bool(true)])
        // Pair also resolves services before it returns.
        await resolveServices(address, run)
    }

    // MARK: A meter that forgot its bond

    /// The meter forgets its bond with the gateway (a reset, or paired with another device) while
    /// bluetoothd keeps the key, as `bluetoothctl remove` on the meter's side does.
    public func forgetBond(_ address: String) throws {
        guard meters[address] != nil else { throw DBusError(.invalidArgs, "no meter \(address)") }
        meters[address]?.forgotBond = true
        meters[address]?.bondRefusals = 0
        logger.info("\(address) forgot its bond; bluetoothd keeps the key")
    }

    /// `Connect` to a meter that forgot its bond, as BlueZ 5.66 and Linux 6.1 do it (the bond-loss
    /// real-stack scenario): the link comes up, the kernel starts encryption with the stored key, the
    /// meter has none (LTK negative reply, Encryption Change 0x06 PIN or Key Missing), and the kernel
    /// disconnects (0x05 Authentication Failure). `Paired`/`Bonded` stay true; `ServicesResolved` never
    /// turns true. bluetoothd answered `Connect` both ways in that scenario: with success (ATT was
    /// attached before security was raised) and with `Failed "le-connection-abort-by-local"` (the link
    /// was gone first); this alternates between the two. The `Disconnected` signal carries
    /// `org.bluez.Reason.Authentication` (BlueZ 5.83+).
    func refuseEncryption(_ address: String, _ run: BluetoothdRun) async throws {
        try await establishLink(address, run)
        let refusals = (meters[address]?.bondRefusals ?? 0) + 1
        meters[address]?.bondRefusals = refusals
        logger.info("\(address) refused the encryption (no key): refusal \(refusals)")
        if refusals % 2 == 1 {
            try? await Task.sleep(for: .milliseconds(20))
            await disconnectLink(address, reason: "org.bluez.Reason.Authentication")
            throw bluezError("Failed", "le-connection-abort-by-local")
        }
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(20))
            await self?.disconnectLink(address, reason: "org.bluez.Reason.Authentication")
        }
    }

    func cancelPairing(_ address: String, _ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard let task = devices[address]?.pairTask else { throw bluezError("DoesNotExist", "Does Not Exist") }
        if let agent = devices[address]?.pairAgent, let c = connection {
            _ = try? await c.call(destination: agent.sender, path: agent.path, interface: "org.bluez.Agent1",
                                  member: "Cancel", timeout: .seconds(5))
        }
        task.cancel()
    }
}
