import DBusKit
import GatewayCore
import Synchronization

/// The pairing agent (`org.bluez.Agent1`, capability `KeyboardOnly`): the meter displays a passkey and
/// the gateway "types" the PIN it was given.
///
/// It answers `RequestPasskey` only for the device being paired, with that device's PIN, and rejects every
/// other request (`org.bluez.Error.Rejected`). `Cancel` and `Release` are acknowledged. It is exported and
/// registered on the same connection that calls `Pair`, because bluetoothd asks the agent of the
/// connection that sent `Pair`.
public final class PairingAgent: Sendable {
    public let path: String
    public static let capability = "KeyboardOnly"

    /// What the agent has been asked, in order (for logs and tests). Holds no PINs.
    public enum Request: Sendable, Equatable {
        case passkeyAnswered(device: String)
        case rejected(method: String, device: String?)
        case cancelled
        case released
    }

    /// Supplies the passkey for a device path (a fixed PIN, or a prompt). Throwing refuses.
    public typealias PasskeyProvider = @Sendable (_ device: String) async throws -> UInt32

    private struct State {
        var target: (device: String, passkey: PasskeyProvider)?
        var pending: Task<UInt32, any Error>?
        var requests: [Request] = []
        /// When the passkey was last given for the current target.
        var answeredAt: ContinuousClock.Instant?
    }
    private let state = Mutex(State())

    init(path: String) {
        self.path = path
    }

    /// Requests seen so far.
    public var requests: [Request] { state.withLock { $0.requests } }

    func setTarget(device: String, passkey: @escaping PasskeyProvider) {
        state.withLock {
            $0.target = (device, passkey)
            $0.answeredAt = nil
        }
    }

    /// When the passkey was given for the device being paired; nil when it was not asked for.
    var passkeyAnsweredAt: ContinuousClock.Instant? { state.withLock { $0.answeredAt } }
    func clearTarget() {
        state.withLock { state in
            state.target = nil
            state.pending?.cancel()
            state.pending = nil
        }
    }

    private func record(_ request: Request) { state.withLock { $0.requests.append(request) } }

    var interface: DBusInterface {
        let rejecting: [(String, String, String)] = [
            ("RequestPinCode", "o", "s"),
            ("DisplayPinCode", "os", ""),
            ("DisplayPasskey", "ouq", ""),
            ("RequestConfirmation", "ou", ""),
            ("RequestAuthorization", "o", ""),
            ("AuthorizeService", "os", ""),
        ]
        var methods: [DBusMethod] = rejecting.map { name, input, output in
            DBusMethod(name, in: input, out: output) { [weak self] call in
                self?.record(.rejected(method: name, device: call.arguments.first?.objectPath))
                throw DBusError(name: BlueZErrorNames.rejected, message: "\(name) is not supported")
            }
        }
        methods.append(DBusMethod("RequestPasskey", in: "o", out: "u") { [weak self] call in
            guard let self else { throw DBusError(name: BlueZErrorNames.rejected, message: "agent gone") }
            let device = call.arguments.first?.objectPath
            let task = self.state.withLock { state -> Task<UInt32, any Error>? in
                guard let target = state.target, let device, device == target.device else { return nil }
                let provider = target.passkey
                let task = Task { try await provider(device) }
                state.pending?.cancel()
                state.pending = task
                return task
            }
            guard let task, let device else {
                self.record(.rejected(method: "RequestPasskey", device: device))
                throw DBusError(name: BlueZErrorNames.rejected, message: "not pairing with this device")
            }
            let passkey: UInt32
            do {
                passkey = try await task.value
            } catch {
                self.record(.rejected(method: "RequestPasskey", device: device))
                throw DBusError(name: BlueZErrorNames.canceled, message: "no passkey")
            }
            guard passkey <= 999_999 else {
                self.record(.rejected(method: "RequestPasskey", device: device))
                throw DBusError(name: BlueZErrorNames.rejected, message: "passkey out of range")
            }
            self.record(.passkeyAnswered(device: device))
            self.state.withLock { $0.answeredAt = ContinuousClock.now }
            return [.uint32(passkey)]
        })
        methods.append(DBusMethod("Cancel") { [weak self] _ in
            self?.record(.cancelled)
            self?.state.withLock { state in
                state.pending?.cancel()
                state.pending = nil
            }
            return []
        })
        methods.append(DBusMethod("Release") { [weak self] _ in
            self?.record(.released)
            return []
        })
        return DBusInterface(BlueZNames.agent, methods: methods)
    }
}

extension BlueZClient {
    static let agentPath = "/glucose_gateway/agent"

    /// Exports and registers the agent if not done yet (kept for the client's lifetime, registered again
    /// after a restart of bluetoothd).
    public func ensureAgent() async throws(BlueZError) -> PairingAgent {
        if let agent { return agent }
        let created = PairingAgent(path: Self.agentPath)
        do {
            try await connection.export(path: created.path, interfaces: [created.interface])
        } catch {
            throw BlueZError(error)
        }
        try await registerAgent(created)
        agent = created
        return created
    }

    func registerAgent(_ agent: PairingAgent) async throws(BlueZError) {
        do {
            _ = try await callBlueZ(path: BlueZNames.root, interface: BlueZNames.agentManager, member: "RegisterAgent",
                                    arguments: [.objectPath(agent.path), .string(PairingAgent.capability)])
        } catch where error.name == BlueZErrorNames.alreadyExists {
            // Registered already on this connection.
        }
        // Also the default agent, so that pairing the meter starts itself (security request, ATT
        // insufficient authentication) reaches this agent too. Failure here is not fatal.
        do {
            _ = try await callBlueZ(path: BlueZNames.root, interface: BlueZNames.agentManager,
                                    member: "RequestDefaultAgent", arguments: [.objectPath(agent.path)])
        } catch {
            logger.info("bluez: RequestDefaultAgent failed: \(error)")
        }
    }

    /// Pairs with a meter using the passkey it displays, then marks it trusted.
    ///
    /// The device must be known to BlueZ (discovered). `Pair` gets `timeout` (bluetoothd alone gives the
    /// agent 60 s); when it runs out, the pairing is cancelled (`CancelPairing`) and `.timeout` thrown.
    /// `AlreadyExists` (already paired) counts as success. Errors keep BlueZ's names, e.g.
    /// `org.bluez.Error.AuthenticationFailed` for a wrong PIN.
    public func pair(address: String, pin: UInt32, timeout: Duration = .seconds(120)) async throws(BlueZError) {
        guard pin <= 999_999 else { throw BlueZError(.permanent, "the PIN must have at most 6 digits") }
        try await pair(address: address, timeout: timeout) { _ in pin }
    }

    /// Like ``pair(address:pin:timeout:)`` with the passkey asked for when bluetoothd requests it (a prompt).
    public func pair(address: String, timeout: Duration = .seconds(120),
                     passkey: @escaping PairingAgent.PasskeyProvider) async throws(BlueZError) {
        guard let device = device(address: address) else {
            throw BlueZError(.notFound, "device \(address) is not known to BlueZ; scan first")
        }
        let agent = try await ensureAgent()
        agent.setTarget(device: device.path, passkey: passkey)
        defer { agent.clearTarget() }
        do {
            _ = try await callBlueZ(path: device.path, interface: BlueZNames.device, member: "Pair", timeout: timeout)
        } catch where error.name == BlueZErrorNames.alreadyExists {
            logger.info("bluez: \(address) was already paired")
        } catch where error.kind == .timeout {
            _ = try? await callBlueZ(path: device.path, interface: BlueZNames.device, member: "CancelPairing",
                                     timeout: .seconds(5))
            throw BlueZError(.timeout, "pairing with \(address) did not finish in time", name: error.name,
                             pairingFailure: .noAnswer)
        } catch {
            var failure = error
            let ago = agent.passkeyAnsweredAt.map { ContinuousClock.now - $0 }
            failure.pairingFailure = PairingFailure.classify(name: error.name, kind: error.kind, passkeyAnsweredAgo: ago)
            logger.debug("bluez: pairing with \(address) failed: \(error) (passkey \(ago.map { "given \($0) before" } ?? "never asked for"))")
            throw failure
        }
        try await setProperty(path: device.path, interface: BlueZNames.device, name: "Trusted", value: .bool(true))
    }
}
