import Testing
import DBusKit
import GatewayCore
import MeterSimulator
import Synchronization
import TestSupport
@testable import BlueZ

/// The gateway's agent against the stand-in playing each pairing method a meter may use.
@Suite(.timeLimit(.minutes(1))) struct PairingMethodTests {
    static let address = "C0:FF:EE:00:00:02"
    static let pin: UInt32 = 246_813

    /// A stand-in with one meter that pairs as `behaviour` says, and a client that has discovered it.
    final class Rig: Sendable {
        let bus: PrivateBus
        let standIn: BlueZStandIn
        let client: BlueZClient

        init(_ behaviour: MeterPairingBehaviour) async throws {
            bus = try await PrivateBus.start()
            var options = StandInOptions(busAddress: bus.address)
            options.clock = SimulationClock(scale: 60)
            let meter = MeterDescription(address: PairingMethodTests.address, name: "GlucoSim", passkey: PairingMethodTests.pin,
                                         pairing: behaviour)
            standIn = BlueZStandIn(meters: [meter], options: options, logger: .silent)
            try await standIn.start()
            client = try await BlueZClient.connect(bus: bus.address)
            _ = try await client.waitForAdapter(timeout: .seconds(5))
            try await client.startDiscovery()
            _ = try await client.waitForDevice(address: PairingMethodTests.address, timeout: .seconds(10))
        }

        var paired: Bool { get async { await client.device(address: PairingMethodTests.address)?.paired == true } }

        func pair(_ answers: PairingAgent.Answers) async throws(BlueZError) -> PairingMethod? {
            try await client.pair(address: PairingMethodTests.address, answers: answers, timeout: .seconds(20))
        }

        func failure(_ answers: PairingAgent.Answers) async -> BlueZError? {
            do {
                _ = try await pair(answers)
                return nil
            } catch {
                return error
            }
        }

        func close() async {
            await client.close()
            await standIn.stop()
            bus.close()
        }
    }

    /// Answers that record what was asked and give the PIN when `pin` is set.
    final class Asked: Sendable {
        let digits = Mutex<[UInt32]>([])
        let shown = Mutex<[UInt32]>([])
        func answers(pin: UInt32? = nil, confirm: Bool? = nil, show: Bool = false) -> PairingAgent.Answers {
            var answers = PairingAgent.Answers(passkey: nil)
            if let pin { answers.passkey = { @Sendable _ in pin } }
            if let confirm {
                answers.confirm = { [self] digits in
                    self.digits.withLock { $0.append(digits) }
                    return confirm
                }
            }
            if show { answers.show = { [self] digits in self.shown.withLock { $0.append(digits) } } }
            return answers
        }
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var meter: MeterPairingBehaviour
        var pin: UInt32?
        var confirm: Bool?
        var method: PairingMethod
        var testDescription: String { "\(meter.method.rawValue)\(meter.startsPairing ? " started by the meter" : "") -> \(method.rawValue)" }
    }

    static let pairs: [Case] = [
        Case(meter: MeterPairingBehaviour(method: .passkeyEntry), pin: pin, method: .passkeyEntry),
        Case(meter: MeterPairingBehaviour(method: .legacyPasskeyEntry), pin: pin, method: .passkeyEntry),
        Case(meter: MeterPairingBehaviour(method: .justWorks), method: .justWorks),
        // A PIN given to a meter that asks for none is not used.
        Case(meter: MeterPairingBehaviour(method: .justWorks), pin: pin, method: .justWorks),
        Case(meter: MeterPairingBehaviour(method: .numericComparison), confirm: true, method: .numericComparison),
        // With a PIN the gateway is a keyboard: the same meter shows a passkey (here: its PIN) instead.
        Case(meter: MeterPairingBehaviour(method: .numericComparison), pin: pin, confirm: true, method: .passkeyEntry),
        Case(meter: MeterPairingBehaviour(method: .passkeyEntry, startsPairing: true), pin: pin, method: .passkeyEntry),
        Case(meter: MeterPairingBehaviour(method: .justWorks, startsPairing: true), method: .justWorks),
    ]

    @Test(arguments: pairs) func eachMethodPairsAndIsNamed(_ c: Case) async throws {
        let rig = try await Rig(c.meter)
        let asked = Asked()
        let method = try await rig.pair(asked.answers(pin: c.pin, confirm: c.confirm))
        #expect(method == c.method)
        #expect(await rig.paired)
        // Numeric comparison shows the person the digits both screens show.
        #expect(asked.digits.withLock { $0 } == (c.method == .numericComparison ? [Self.pin] : []))
        await rig.close()
    }

    @Test func theCapabilityFollowsWhetherAPinWasGiven() async throws {
        let withPIN = PairingAgent.capability(for: Asked().answers(pin: Self.pin))
        let withoutPIN = PairingAgent.capability(for: Asked().answers(confirm: true))
        #expect(withPIN == "KeyboardOnly" && withoutPIN == "KeyboardDisplay")
        // Without a PIN a meter with a yes/no button compares numbers; with one it shows a passkey.
        #expect(MeterPairingBehaviour(method: .numericComparison).exchange(gateway: withoutPIN) == .numericComparison)
        #expect(MeterPairingBehaviour(method: .numericComparison).exchange(gateway: withPIN) == .gatewayTypes)
        for method in [MeterPairingBehaviour.Method.passkeyEntry, .legacyPasskeyEntry] {
            #expect(MeterPairingBehaviour(method: method).exchange(gateway: withPIN) == .gatewayTypes)
            #expect(MeterPairingBehaviour(method: method).exchange(gateway: withoutPIN) == .gatewayTypes)
        }
        #expect(MeterPairingBehaviour(method: .justWorks).exchange(gateway: withPIN) == .justWorks)

        // One client pairing twice registers again with the other capability.
        let rig = try await Rig(MeterPairingBehaviour(method: .numericComparison))
        await #expect(throws: BlueZError.self) { _ = try await rig.pair(Asked().answers(pin: 111_111)) }
        #expect(await rig.client.agent?.capability == "KeyboardOnly")
        #expect(try await rig.pair(Asked().answers(confirm: true)) == .numericComparison)
        #expect(await rig.client.agent?.capability == "KeyboardDisplay")
        let log = try await rig.client.connection.call(
            destination: "org.bluez", path: StandInDocs.controlPath, interface: "org.glucosegateway.Simulator1",
            member: "CallLog", timeout: .seconds(5)).first?.stringArray ?? []
        #expect(log.filter { $0 == "org.bluez.AgentManager1.RegisterAgent /org/bluez" }.count == 2)
        #expect(log.contains("org.bluez.AgentManager1.UnregisterAgent /org/bluez"))
        await rig.close()
    }

    @Test func aMeterThatShowsAPinWithNoPinGivenIsRefusedNeverGuessed() async throws {
        let rig = try await Rig(MeterPairingBehaviour(method: .passkeyEntry))
        let error = await rig.failure(Asked().answers())
        #expect(error?.pairingFailure == .passkeyNeeded)
        #expect(!(await rig.paired))
        let agent = try #require(await rig.client.agent)
        #expect(!agent.requests.contains { if case .passkeyAnswered = $0 { true } else { false } })
        await rig.close()
    }

    @Test func numericComparisonWithNobodyToAskIsRefused() async throws {
        let rig = try await Rig(MeterPairingBehaviour(method: .numericComparison))
        let error = await rig.failure(Asked().answers())
        #expect(error?.pairingFailure == .personNeeded)
        #expect(!(await rig.paired))
        await rig.close()
    }

    @Test func numbersThePersonSaysDifferStopThePairing() async throws {
        let rig = try await Rig(MeterPairingBehaviour(method: .numericComparison))
        let error = await rig.failure(Asked().answers(confirm: false))
        #expect(error?.pairingFailure == .numbersDiffer)
        #expect(!(await rig.paired))
        await rig.close()
    }

    @Test func numbersRefusedOnTheMeterAreNotAWrongPin() async throws {
        let rig = try await Rig(MeterPairingBehaviour(method: .numericComparison, answer: .cancels))
        let error = await rig.failure(Asked().answers(confirm: true))
        #expect(error?.pairingFailure == .rejectedOnMeter)
        await rig.close()
    }

    @Test func wrongPinMeterThatCancelsAndMeterThatNeverAnswersEachHaveTheirOwnFailure() async throws {
        let wrong = try await Rig(MeterPairingBehaviour(method: .legacyPasskeyEntry))
        #expect(await wrong.failure(Asked().answers(pin: 111_111))?.pairingFailure == .wrongPasskey)
        await wrong.close()

        let cancels = try await Rig(MeterPairingBehaviour(method: .passkeyEntry, answer: .cancels))
        let cancelled = await cancels.failure(Asked().answers(pin: Self.pin))
        #expect(cancelled?.pairingFailure == .refused)
        #expect(await cancels.client.agent?.requests.isEmpty == true)
        await cancels.close()

        // SMP's 30 s (simulated) run out; bluetoothd reports the dropped link as a cancelled pairing.
        let silent = try await Rig(MeterPairingBehaviour(method: .justWorks, answer: .neverAnswers))
        #expect(await silent.failure(Asked().answers())?.pairingFailure == .noAnswer)
        #expect(!(await silent.paired))
        await silent.close()
    }

    @Test func aPasskeyToTypeOnTheMeterIsShownOrThePairingIsCancelled() async throws {
        // Only a meter with a keypad gets the gateway's digits to type, and no meter file describes one:
        // the agent is called here as bluetoothd calls it.
        let rig = try await Rig(MeterPairingBehaviour(method: .justWorks))
        let agent = try await rig.client.ensureAgent()
        let device = try #require(await rig.client.device(address: Self.address)).path
        let asked = Asked()
        let stuck = Mutex(0)
        var answers = asked.answers(show: true)
        answers.stuck = { stuck.withLock { $0 += 1 } }
        agent.setTarget(device: device, answers: answers)
        let bluetoothd = try await DBusConnection.connect(address: rig.bus.address)
        let gateway = rig.client.connection.uniqueName
        let agentCall = { (arguments: [DBusValue]) async throws in
            _ = try await bluetoothd.call(destination: gateway, path: BlueZClient.agentPath, interface: "org.bluez.Agent1",
                                          member: "DisplayPasskey", arguments: arguments, timeout: .seconds(5))
        }
        try await agentCall([.objectPath(device), .uint32(42), .uint16(0)])
        try await agentCall([.objectPath(device), .uint32(42), .uint16(3)])
        #expect(asked.shown.withLock { $0 } == [42])
        #expect(agent.lastStep?.step == .passkeyShown)

        var hidden = asked.answers()
        hidden.stuck = { stuck.withLock { $0 += 1 } }
        agent.setTarget(device: device, answers: hidden)
        await #expect(throws: DBusError.self) { try await agentCall([.objectPath(device), .uint32(42), .uint16(0)]) }
        #expect(stuck.withLock { $0 } == 1)
        #expect(PairingFailure.classify(name: BlueZErrorNames.authenticationCanceled, kind: .permanent,
                                        lastStep: agent.lastStep) == .personNeeded)
        agent.clearTarget()
        await bluetoothd.close()
        await rig.close()
    }
}

@Suite(.timeLimit(.minutes(1))) struct MeterStartedPairingTests {
    @Test func aPairingTheMeterStartsOutsidePairIsRefused() async throws {
        let rig = try await PairingMethodTests.Rig(MeterPairingBehaviour(method: .justWorks, startsPairing: true))
        let agent = try await rig.client.ensureAgent()
        let link = try? await rig.client.connectMeter(address: PairingMethodTests.address, timeout: .seconds(10))
        let refused = await waitUntil(5) {
            agent.requests.contains { if case .rejected("RequestAuthorization", _) = $0 { true } else { false } }
        }
        #expect(refused)
        #expect(!(await rig.paired))
        await link?.disconnect()
        await rig.close()
    }
}

/// An adapter with no public address connects from its scan's random address while it discovers, and a
/// bonded meter then refuses the key.
@Suite(.timeLimit(.minutes(1))) struct ScanAddressTests {
    /// Pairs (which leaves the link up), then takes the link down, so the next connection makes a new one.
    static func pairAndDisconnect(_ rig: StandInRig) async throws {
        try await rig.client.pair(address: StandInRig.address, pin: StandInRig.passkey, timeout: .seconds(20))
        try await rig.client.stopDiscovery()
        let link = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20))
        await link.disconnect()
        #expect(await waitUntil(5) { await rig.client.device(address: StandInRig.address)?.connected == false })
    }

    @Test func connectingPausesTheClientsDiscoverySoABondedMeterIsReachedFromTheIdentityAddress() async throws {
        let rig = try await StandInRig(records: 3) { $0.adapterWithoutPublicAddress = true }
        _ = try await rig.discover()
        try await Self.pairAndDisconnect(rig)
        // The daemon discovers all the time, and connects a meter when it advertises.
        try await rig.client.startDiscovery()
        let retry = ConnectRetry(initial: .milliseconds(20), maximum: .milliseconds(40), attempts: 6)
        let link = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20), retry: retry)
        #expect(try await link.read(.glucoseFeature).count == 2)
        await link.disconnect()
        let log = try await rig.callLog()
        let connect = try #require(log.lastIndex { $0.hasPrefix("org.bluez.Device1.Connect ") })
        let stop = try #require(log.lastIndex { $0.hasPrefix("org.bluez.Adapter1.StopDiscovery") })
        let start = try #require(log.lastIndex { $0.hasPrefix("org.bluez.Adapter1.StartDiscovery") })
        #expect(stop < connect && connect < start)
        await rig.close()
    }

    @Test func aKeyRefusedWhileAnotherClientScansIsNotALostBond() async throws {
        let rig = try await StandInRig(records: 3) { $0.adapterWithoutPublicAddress = true }
        _ = try await rig.discover()
        try await Self.pairAndDisconnect(rig)
        // Another program (bluetoothctl, a phone app's helper) scans; this client cannot stop that.
        let other = try await BlueZClient.connect(bus: rig.bus.address)
        _ = try await other.waitForAdapter(timeout: .seconds(5))
        try await other.startDiscovery()
        let retry = ConnectRetry(initial: .milliseconds(20), maximum: .milliseconds(40), attempts: 6)
        let error = await #expect(throws: MeterLinkError.self) {
            try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20), retry: retry)
        }
        #expect(error?.kind != .bondLost)
        // Once the scan ends the meter is reached.
        try await other.stopDiscovery()
        let link = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20), retry: retry)
        await link.disconnect()
        await other.close()
        await rig.close()
    }
}
