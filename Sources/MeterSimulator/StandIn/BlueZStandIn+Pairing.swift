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
        // bluetoothd asks the agent of the caller, else the default agent; with none, the adapter pairs
        // as NoInputNoOutput.
        let agent = agents[call.sender] ?? defaultAgentSender.flatMap { agents[$0] }
        if devices[address]?.connected != true {
            try await establishLink(address, run)
        }
        if m.description.pairing.startsPairing {
            // The Security Request comes as the link is up; the pairing Pair starts answers it.
            logger.info("\(address) sent an SMP Security Request; the pairing under way answers it")
        }
        try await runPairing(address, agent: agent, byPair: true, caller: call.sender)
        try run.check()
        // Pair also resolves services before it returns.
        await resolveServices(address, run)
    }

    /// The SMP exchange between the adapter (the agent's IO capability) and the meter, as bluetoothd and
    /// the kernel run it, with the errors `Pair` gets (`new_authentication_return` in `src/device.c`).
    /// `byPair`: bluetoothd accepts Just Works itself when `Pair` started the bonding; a pairing the
    /// meter started asks the default agent (`RequestAuthorization`). On success the meter is bonded.
    func runPairing(_ address: String, agent: Agent?, byPair: Bool, caller: String?) async throws {
        guard let m = meters[address], let c = connection else { throw bluezError("Failed", "Not connected") }
        let behaviour = m.description.pairing
        let passkey = m.description.passkey
        let devPath = devicePath(address)
        let stalls = quirks[address]?.contains(.pairingStalls) == true
        let exchange = behaviour.exchange(gateway: agent?.capability ?? "NoInputNoOutput")
        let clock = options.clock
        logger.info("\(address): pairing by \(behaviour.method.rawValue) with \(agent?.capability ?? "no agent"): \(exchange)")
        @Sendable func ask(_ member: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
            guard let agent else { throw bluezError("AuthenticationFailed", "Authentication Failed") }
            do {
                return try await c.call(destination: agent.sender, path: agent.path, interface: "org.bluez.Agent1",
                                        member: member, arguments: arguments, timeout: .seconds(60))
            } catch {
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
            }
        }
        let task = Task { () throws -> Void in
            switch behaviour.answer {
            case .neverAnswers:
                // No Pairing Response: SMP gives up after 30 s and the kernel drops the link.
                try await clock.sleep(seconds: 30)
                throw bluezError("AuthenticationCanceled", "Authentication Canceled")
            case .cancels where behaviour.method != .numericComparison:
                // Pairing Failed instead of a Pairing Response: no question reaches the agent.
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            default:
                break
            }
            switch exchange {
            case .justWorks:
                // A meter with a display insists on MITM protection (Authentication Requirements).
                guard !behaviour.requiresMITM else { throw bluezError("AuthenticationFailed", "Authentication Failed") }
                if !byPair { _ = try await ask("RequestAuthorization", [.objectPath(devPath)]) }
            case .gatewayTypes, .bothType:
                let reply = try await ask("RequestPasskey", [.objectPath(devPath)])
                guard let given = reply.first?.uint32 else { throw bluezError("AuthenticationFailed", "Authentication Failed") }
                if stalls { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
                guard given == passkey else { throw bluezError("AuthenticationFailed", "Authentication Failed") }
            case .gatewayShows:
                // The meter's user types what the gateway shows (here: always right).
                _ = try? await ask("DisplayPasskey", [.objectPath(devPath), .uint32(passkey), .uint16(0)])
            case .numericComparison:
                // Both screens show the same digits (the meter's PIN stands for them here).
                _ = try await ask("RequestConfirmation", [.objectPath(devPath), .uint32(passkey)])
                if behaviour.answer == .cancels {
                    // No pressed on the meter: Pairing Failed (Numeric Comparison Failed).
                    throw bluezError("AuthenticationFailed", "Authentication Failed")
                }
            }
        }
        devices[address]?.pairTask = task
        devices[address]?.pairAgent = agent.map { ($0.sender, $0.path) }
        devices[address]?.pairCaller = caller
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
        meters[address]?.paired = true
        meters[address]?.forgotBond = false
        meters[address]?.bondRefusals = 0
        saveState()
        await setDevice(address, ["Paired": .bool(true), "Bonded": .bool(true)])
    }

    /// A meter that starts pairing itself (SMP Security Request) on a link that `Connect` brought up:
    /// bluetoothd has no bonding of its own then, so the default agent is asked. A failure drops the link.
    func pairingStartedByMeter(_ address: String, _ run: BluetoothdRun) {
        guard let m = meters[address], !m.paired, m.description.pairing.startsPairing, devices[address]?.pairTask == nil else { return }
        let agent = defaultAgentSender.flatMap { agents[$0] }
        logger.info("\(address) sent an SMP Security Request; pairing with the default agent")
        Task { [weak self] in
            guard let self, !run.isOver else { return }
            do {
                try await self.runPairing(address, agent: agent, byPair: false, caller: nil)
            } catch {
                await self.logPairingFailure(address, error)
            }
        }
    }

    private func logPairingFailure(_ address: String, _ error: any Error) {
        logger.info("\(address): the pairing the meter started failed: \(error)")
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
