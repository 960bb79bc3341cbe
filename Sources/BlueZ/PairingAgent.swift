import DBusKit
import GatewayCore
import Synchronization

/// The pairing agent (`org.bluez.Agent1`).
///
/// Its IO capability decides the pairing method: bluetoothd gives `Pair` the capability of the calling
/// agent, and the kernel looks the method up from both sides' SMP IO capabilities (Core Vol 3 Part H
/// 2.3.5.1, Table 2.8). So the capability follows what the person running `pair` brought:
/// - a PIN (`--pin`): `KeyboardOnly`, as before. Every meter with a display then does passkey entry with
///   the gateway typing the PIN (a meter with a yes/no button too, which shows a passkey instead of
///   asking for numbers to be compared); a meter with a keypad and a fixed PIN types the same digits
///   (as the simulator's real-BlueZ meter and the real-stack scenarios do); a meter with neither pairs
///   Just Works. A PIN in hand is never traded for another method.
/// - no PIN: `KeyboardDisplay`, what phones declare, so each meter gets the method its maker tested
///   with the phone app: numeric comparison for a meter with a display and a yes/no button (LE Secure
///   Connections), Just Works for one with no display, digits shown here for a keypad meter to type,
///   and, for a meter that shows a PIN, a passkey request that is refused (the PIN is never guessed).
///
/// It answers only for the device being paired (``setTarget(device:answers:)``), from what the person
/// running `pair` brought (``Answers``), and rejects everything else (`org.bluez.Error.Rejected`). It is
/// exported and registered on the same connection that calls `Pair`, because bluetoothd asks the agent of
/// the connection that sent `Pair`, and made the default agent so that a pairing the meter starts itself
/// (an SMP Security Request, which bluetoothd hands to the default agent) reaches it too.
public final class PairingAgent: Sendable {
    public let path: String
    /// The capability when a PIN was given, and when none was.
    public static let withPIN = "KeyboardOnly"
    public static let withoutPIN = "KeyboardDisplay"

    /// The capability for what the person brought.
    public static func capability(for answers: Answers) -> String { answers.passkey == nil ? withoutPIN : withPIN }

    /// What the agent has been asked, in order (for logs and tests). Holds no PIN and no digits.
    public enum Request: Sendable, Equatable {
        case passkeyAnswered(device: String)
        case confirmationAnswered(device: String, matched: Bool)
        case passkeyDisplayed(device: String)
        case authorized(device: String)
        case rejected(method: String, device: String?)
        case cancelled
        case released
    }

    /// The last thing the agent did for the device being paired: it tells which method was used and
    /// why a pairing failed.
    public enum Step: Sendable, Equatable {
        /// Gave the passkey (passkey entry).
        case passkeyGiven
        /// Was asked for a passkey and had none (no `--pin`).
        case passkeyMissing
        /// The person confirmed that both screens show the same digits (numeric comparison).
        case numbersConfirmed
        /// The person said the digits differ.
        case numbersDiffer
        /// Numeric comparison, with nobody to ask.
        case numbersUnasked
        /// Showed digits for the person to type on the meter.
        case passkeyShown
        /// Had digits to show and nobody to show them to.
        case passkeyNotShown
        /// Accepted a Just Works pairing the meter started.
        case authorized
    }

    /// Supplies the passkey for a device path (a fixed PIN, or a prompt). Throwing refuses.
    public typealias PasskeyProvider = @Sendable (_ device: String) async throws -> UInt32

    /// How the agent answers each request for the device being paired; a nil answer refuses.
    public struct Answers: Sendable {
        public var passkey: PasskeyProvider?
        public var confirm: (@Sendable (_ digits: UInt32) async -> Bool)?
        public var show: (@Sendable (_ digits: UInt32) -> Void)?
        /// Called when the agent refused something the pairing cannot go on without, and bluetoothd
        /// does not end the pairing by itself (a display request cannot be refused).
        public var stuck: (@Sendable () -> Void)?

        public init(passkey: PasskeyProvider?, confirm: (@Sendable (UInt32) async -> Bool)? = nil,
                    show: (@Sendable (UInt32) -> Void)? = nil, stuck: (@Sendable () -> Void)? = nil) {
            self.passkey = passkey
            self.confirm = confirm
            self.show = show
            self.stuck = stuck
        }
    }

    private struct State {
        var target: (device: String, answers: Answers)?
        var pending: (@Sendable () -> Void)?
        var requests: [Request] = []
        /// The last step for the current target, and when.
        var step: (step: Step, at: ContinuousClock.Instant)?
        /// The capability it is registered with.
        var capability = PairingAgent.withPIN
    }
    private let state = Mutex(State())

    init(path: String) {
        self.path = path
    }

    /// Requests seen so far.
    public var requests: [Request] { state.withLock { $0.requests } }

    /// The IO capability it is (or is to be) registered with.
    public internal(set) var capability: String {
        get { state.withLock { $0.capability } }
        set { state.withLock { $0.capability = newValue } }
    }

    func setTarget(device: String, answers: Answers) {
        state.withLock {
            $0.target = (device, answers)
            $0.step = nil
        }
    }

    /// The last step for the device being paired and how long ago; nil when nothing was asked.
    var lastStep: (step: Step, ago: Duration)? {
        state.withLock { s in s.step.map { ($0.step, ContinuousClock.now - $0.at) } }
    }

    func clearTarget() {
        state.withLock { state in
            state.target = nil
            state.pending?()
            state.pending = nil
        }
    }

    private func record(_ request: Request) { state.withLock { $0.requests.append(request) } }
    private func note(_ step: Step) { state.withLock { $0.step = (step, ContinuousClock.now) } }

    /// The answers for `device` when it is the device being paired.
    private func answers(for device: String?) -> Answers? {
        state.withLock { state in
            guard let target = state.target, let device, device == target.device else { return nil }
            return target.answers
        }
    }

    /// Runs `work` so that `Cancel` (or the end of the pairing) can stop it; nil when it was cancelled or
    /// threw.
    private func cancellable<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) async -> T? {
        let task = Task<T, any Error> { try await work() }
        state.withLock { state in
            state.pending?()
            state.pending = { task.cancel() }
        }
        return try? await task.value
    }

    private func refuse(_ method: String, _ device: String?, _ message: String, name: String = BlueZErrorNames.rejected) -> DBusError {
        record(.rejected(method: method, device: device))
        return DBusError(name: name, message: message)
    }

    var interface: DBusInterface {
        // BR/EDR requests (a meter is LE) and service authorisation: never for a meter.
        let rejecting: [(String, String, String)] = [
            ("RequestPinCode", "o", "s"),
            ("DisplayPinCode", "os", ""),
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
            return [.uint32(try await self.requestPasskey(call.arguments.first?.objectPath))]
        })
        methods.append(DBusMethod("RequestConfirmation", in: "ou") { [weak self] call in
            guard let self else { throw DBusError(name: BlueZErrorNames.rejected, message: "agent gone") }
            try await self.requestConfirmation(call.arguments.first?.objectPath, call.arguments.dropFirst().first?.uint32)
            return []
        })
        methods.append(DBusMethod("DisplayPasskey", in: "ouq") { [weak self] call in
            guard let self else { return [] }
            let arguments = call.arguments
            try self.displayPasskey(arguments.first?.objectPath, arguments.dropFirst().first?.uint32,
                                    entered: arguments.dropFirst(2).first?.uint16)
            return []
        })
        methods.append(DBusMethod("RequestAuthorization", in: "o") { [weak self] call in
            guard let self else { throw DBusError(name: BlueZErrorNames.rejected, message: "agent gone") }
            let device = call.arguments.first?.objectPath
            // Just Works that the meter started (a Pair of ours is accepted by bluetoothd itself): the
            // person asked to pair this very meter, so it is what they wanted.
            guard self.answers(for: device) != nil, let device else {
                throw self.refuse("RequestAuthorization", device, "not pairing with this device")
            }
            self.record(.authorized(device: device))
            self.note(.authorized)
            return []
        })
        methods.append(DBusMethod("Cancel") { [weak self] _ in
            self?.record(.cancelled)
            self?.state.withLock { state in
                state.pending?()
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

    private func requestPasskey(_ device: String?) async throws -> UInt32 {
        guard let answers = answers(for: device), let device else {
            throw refuse("RequestPasskey", device, "not pairing with this device")
        }
        guard let provider = answers.passkey else {
            // The meter shows a PIN and none was given: refused, never guessed.
            note(.passkeyMissing)
            throw refuse("RequestPasskey", device, "no passkey given")
        }
        guard let passkey = await cancellable({ try await provider(device) }) else {
            throw refuse("RequestPasskey", device, "no passkey", name: BlueZErrorNames.canceled)
        }
        guard passkey <= 999_999 else { throw refuse("RequestPasskey", device, "passkey out of range") }
        record(.passkeyAnswered(device: device))
        note(.passkeyGiven)
        return passkey
    }

    private func requestConfirmation(_ device: String?, _ digits: UInt32?) async throws {
        guard let answers = answers(for: device), let device, let digits, digits <= 999_999 else {
            throw refuse("RequestConfirmation", device, "not pairing with this device")
        }
        guard let confirm = answers.confirm else {
            note(.numbersUnasked)
            throw refuse("RequestConfirmation", device, "nobody to compare the numbers")
        }
        guard let matched = await cancellable({ await confirm(digits) }) else {
            throw refuse("RequestConfirmation", device, "not confirmed", name: BlueZErrorNames.canceled)
        }
        record(.confirmationAnswered(device: device, matched: matched))
        note(matched ? .numbersConfirmed : .numbersDiffer)
        guard matched else { throw DBusError(name: BlueZErrorNames.rejected, message: "the numbers differ") }
    }

    private func displayPasskey(_ device: String?, _ digits: UInt32?, entered: UInt16?) throws {
        guard let answers = answers(for: device), let device, let digits, digits <= 999_999 else {
            throw refuse("DisplayPasskey", device, "not pairing with this device")
        }
        // bluetoothd calls again for each key typed on the meter (`entered`); the digits are shown once.
        guard (entered ?? 0) == 0 else { return }
        guard let show = answers.show else {
            note(.passkeyNotShown)
            answers.stuck?()
            throw refuse("DisplayPasskey", device, "nobody to show the passkey to")
        }
        show(digits)
        record(.passkeyDisplayed(device: device))
        note(.passkeyShown)
    }
}

extension BlueZClient {
    static let agentPath = "/glucose_gateway/agent"

    /// Exports and registers the agent if not done yet (kept for the client's lifetime, registered again
    /// after a restart of bluetoothd).
    public func ensureAgent(capability: String = PairingAgent.withPIN) async throws(BlueZError) -> PairingAgent {
        if let agent {
            guard agent.capability != capability else { return agent }
            // Registered with another capability: bluetoothd keeps one per agent, so register anew.
            _ = try? await callBlueZ(path: BlueZNames.root, interface: BlueZNames.agentManager, member: "UnregisterAgent",
                                     arguments: [.objectPath(agent.path)])
            agent.capability = capability
            try await registerAgent(agent)
            return agent
        }
        let created = PairingAgent(path: Self.agentPath)
        created.capability = capability
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
                                    arguments: [.objectPath(agent.path), .string(agent.capability)])
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

    /// Pairs with a meter using the passkey it displays, then marks it trusted. A meter that pairs by
    /// another method is refused, except Just Works. Returns the method used, nil when BlueZ was bonded
    /// with the meter already.
    @discardableResult
    public func pair(address: String, pin: UInt32, timeout: Duration = .seconds(120)) async throws(BlueZError) -> PairingMethod? {
        guard pin <= 999_999 else { throw BlueZError(.permanent, "the PIN must have at most 6 digits") }
        return try await pair(address: address, answers: PairingAgent.Answers(passkey: { _ in pin }), timeout: timeout)
    }

    /// Like ``pair(address:pin:timeout:)`` with the passkey asked for when bluetoothd requests it (a prompt).
    @discardableResult
    public func pair(address: String, timeout: Duration = .seconds(120),
                     passkey: @escaping PairingAgent.PasskeyProvider) async throws(BlueZError) -> PairingMethod? {
        try await pair(address: address, answers: PairingAgent.Answers(passkey: passkey), timeout: timeout)
    }

    /// Pairs with a meter, the agent answering what the meter's method asks from `answers`, then marks
    /// it trusted. Returns the method used (from what the agent was asked), nil when BlueZ was bonded
    /// with the meter already (`AlreadyExists`).
    ///
    /// The device must be known to BlueZ (discovered). `Pair` gets `timeout` (bluetoothd alone gives the
    /// agent 60 s); when it runs out, the pairing is cancelled (`CancelPairing`) and `.timeout` thrown.
    /// Errors keep BlueZ's names, e.g. `org.bluez.Error.AuthenticationFailed` for a wrong PIN, and say
    /// what failed (`pairingFailure`).
    @discardableResult
    public func pair(address: String, answers: PairingAgent.Answers, timeout: Duration = .seconds(120)) async throws(BlueZError) -> PairingMethod? {
        guard let device = device(address: address) else {
            throw BlueZError(.notFound, "device \(address) is not known to BlueZ; scan first")
        }
        let agent = try await ensureAgent(capability: PairingAgent.capability(for: answers))
        var answers = answers
        let path = device.path
        // A passkey to show that nobody can see: bluetoothd does not wait for the agent's answer to
        // DisplayPasskey, so the pairing is cancelled here rather than left to SMP's 30 s timeout.
        answers.stuck = { [weak self] in
            Task { _ = try? await self?.callBlueZ(path: path, interface: BlueZNames.device, member: "CancelPairing", timeout: .seconds(5)) }
        }
        agent.setTarget(device: path, answers: answers)
        defer { agent.clearTarget() }
        do {
            _ = try await callBlueZ(path: path, interface: BlueZNames.device, member: "Pair", timeout: timeout)
        } catch where error.name == BlueZErrorNames.alreadyExists {
            logger.info("bluez: \(address) was already paired")
            return nil
        } catch where error.kind == .timeout {
            _ = try? await callBlueZ(path: path, interface: BlueZNames.device, member: "CancelPairing",
                                     timeout: .seconds(5))
            var failure = BlueZError(.timeout, "pairing with \(address) did not finish in time", name: error.name,
                                     pairingFailure: .noAnswer)
            if let step = agent.lastStep?.step, let asked = PairingFailure.unanswerable(step) { failure.pairingFailure = asked }
            throw failure
        } catch {
            var failure = error
            let last = agent.lastStep
            failure.pairingFailure = PairingFailure.classify(name: error.name, kind: error.kind, lastStep: last)
            logger.debug("bluez: pairing with \(address) failed: \(error) (agent: \(last.map { "\($0.step) \($0.ago) before" } ?? "asked nothing"))")
            throw failure
        }
        try await setProperty(path: path, interface: BlueZNames.device, name: "Trusted", value: .bool(true))
        return PairingFailure.method(after: agent.lastStep?.step)
    }
}
