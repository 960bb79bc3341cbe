import GatewayCore
import Synchronization
import TestSupport

/// A radio with scripted meters (which are in range, their PINs, how pairing goes) whose events the test
/// sends. Every call is logged in `calls`.
final class FakeMeterRadio: MeterRadio {
    struct Entry {
        var meter: FakeMeter
        var name: String?
        var rssi: Int
        var pin: UInt32
        var inRange = true
        var paired = false
        /// The meter forgot its bond: every connect fails as BlueZ reports a lost bond.
        var forgotBond = false
        /// With `forgotBond`: each connect is refused at the key once, then runs into the meter's pause
        /// between bursts of advertising (a Connect with no reply), as BlueZ reports it.
        var advertisesInBursts = false
    }
    struct State {
        var radio = RadioState(bluetoothdRunning: true, adapter: "hci0", adapterPowered: true, discovering: true)
        var meters: [String: Entry] = [:]
        var calls: [String] = []
        var connected: Set<String> = []
        /// When set, every connect waits until it is signalled (or the connecting task is cancelled), so a
        /// test decides when connects finish and can see several pending at once.
        var connectGate: TestEvent?
        var answering = true
    }
    let state = Mutex(State())
    /// When set, pairing never completes: it fails with a timeout once `clock` has passed the timeout
    /// it was given, as a radio whose meter never answers does.
    let pairingHangs = Mutex(false)
    /// The radio's time, which only the test moves (`advance(by:)`).
    let clock = ManualClock()
    let stream: AsyncStream<RadioEvent>
    let continuation: AsyncStream<RadioEvent>.Continuation

    init(meters: [FakeMeter] = []) {
        (stream, continuation) = AsyncStream.makeStream(of: RadioEvent.self)
        for m in meters { add(m) }
    }

    func add(_ meter: FakeMeter, name: String? = "meter", rssi: Int = -60, pin: UInt32 = 123_456, inRange: Bool = true, paired: Bool = false) {
        state.withLock { $0.meters[meter.address] = Entry(meter: meter, name: name, rssi: rssi, pin: pin, inRange: inRange, paired: paired) }
    }

    func setInRange(_ address: String, _ inRange: Bool) {
        state.withLock { $0.meters[address]?.inRange = inRange }
    }

    func setForgotBond(_ address: String, _ forgot: Bool) {
        state.withLock { $0.meters[address]?.forgotBond = forgot }
    }

    func setAdvertisesInBursts(_ address: String, _ bursts: Bool) {
        state.withLock { $0.meters[address]?.advertisesInBursts = bursts }
    }

    func isPaired(_ address: String) -> Bool { state.withLock { $0.meters[address]?.paired ?? false } }
    var calls: [String] { state.withLock { $0.calls } }
    func send(_ event: RadioEvent) { continuation.yield(event) }
    func set(_ body: (inout State) -> Void) { state.withLock { body(&$0) } }
    private func log(_ call: String) { state.withLock { $0.calls.append(call) } }

    // MARK: The daemon

    func events() async -> AsyncStream<RadioEvent> { stream }
    func state(adapter: String?) async -> RadioState { state.withLock { $0.radio } }
    func powerOn(adapter: String?) async { log("powerOn") }

    func startWatching(adapter: String?, mode: ScanMode) async throws(MeterLinkError) -> ScanMode {
        let up = state.withLock { s in
            s.calls.append("watch \(s.radio.adapter ?? "-")")
            return s.radio.bluetoothdRunning
        }
        guard up else { throw MeterLinkError(.disconnected, "bluetoothd is not running") }
        return .discovery
    }

    func bluetoothdAnswers(timeout: Duration) async -> Bool {
        state.withLock { s in
            s.calls.append("probe")
            return s.answering
        }
    }

    func isConnected(address: String) async -> Bool {
        state.withLock { $0.connected.contains(address) }
    }

    func closeStale(addresses: [String]) async -> [String] {
        state.withLock { s in
            let stale = addresses.filter { s.connected.contains($0) }
            s.calls.append("closeStale \(stale.joined(separator: ","))")
            s.connected.subtract(stale)
            return stale
        }
    }

    // MARK: Both

    /// A meter the radio does not know times out; one out of range fails as an aborted connection.
    func connect(address: String, timeout: Duration) async throws(MeterLinkError) -> any MeterLink {
        let (entry, gate) = state.withLock { s in
            s.calls.append("connect \(address)")
            return (s.meters[address], s.connectGate)
        }
        if let gate { try? await gate.wait() }
        guard let entry else { throw MeterLinkError(.timeout, "not advertising") }
        guard entry.inRange else { throw MeterLinkError(.disconnected, "le-connection-abort-by-local") }
        if entry.forgotBond, entry.advertisesInBursts {
            throw MeterLinkError(.timeout, "org.freedesktop.DBus.Error.NoReply: Did not receive a reply", keyRefusals: 1)
        }
        guard !entry.forgotBond else {
            throw MeterLinkError(.bondLost, "\(address) refused the encryption with this gateway's key 3 times in a row")
        }
        return entry.meter.connect()
    }

    func close() async {
        log("close")
        continuation.finish()
    }

    // MARK: The commands

    func scan(timeout: Duration) async throws(MeterAccessError) -> [NearbyMeter] {
        log("scan")
        return state.withLock { s in
            s.meters.values.filter(\.inRange).sorted { $0.rssi > $1.rssi }
                .map { NearbyMeter(address: $0.meter.address, name: $0.name, rssi: $0.rssi, paired: $0.paired) }
        }
    }

    func waitForMeter(address: String, timeout: Duration) async throws(MeterAccessError) -> NearbyMeter {
        log("wait \(address)")
        guard let e = state.withLock({ $0.meters[address] }), e.inRange else {
            throw MeterAccessError(.notFound, "\(address) not seen within \(timeout)")
        }
        return NearbyMeter(address: address, name: e.name, rssi: e.rssi, paired: e.paired)
    }

    func pair(address: String, input: PairingInput, timeout: Duration) async throws(MeterAccessError) -> PairingMethod? {
        log("pair \(address)")
        guard let passkey = input.passkey else { throw MeterAccessError(.passkeyNeeded, "no passkey") }
        if pairingHangs.withLock({ $0 }) {
            try? await clock.sleep(for: timeout)
            throw MeterAccessError(.timeout, "AuthenticationTimeout")
        }
        try state.withLock { s throws(MeterAccessError) in
            guard let e = s.meters[address], e.inRange else { throw MeterAccessError(.notFound, "not found") }
            guard e.pin == passkey else { throw MeterAccessError(.authenticationFailed, "AuthenticationFailed") }
            s.meters[address]?.paired = true
            s.meters[address]?.forgotBond = false
        }
        return .passkeyEntry
    }

    func forget(address: String) async throws(MeterAccessError) -> Bool {
        log("forget \(address)")
        return state.withLock { s in
            defer { s.meters[address]?.paired = false }
            return s.meters[address]?.paired ?? false
        }
    }
}
