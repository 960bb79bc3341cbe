import GatewayCore
import Synchronization
import TestSupport
@testable import Gateway

/// A radio with scripted meters: which are in range, their PINs, and how pairing goes.
final class FakeMeterRadio: MeterRadio {
    struct Entry {
        var meter: FakeMeter
        var name: String?
        var rssi: Int
        var pin: UInt32
        var inRange = true
        var paired = false
    }
    private let state = Mutex<[String: Entry]>([:])
    private let log = Mutex<[String]>([])
    /// When set, pairing never completes.
    let pairingHangs = Mutex(false)

    func add(_ meter: FakeMeter, name: String? = "meter", rssi: Int = -60, pin: UInt32 = 123_456, inRange: Bool = true, paired: Bool = false) {
        state.withLock { $0[meter.address] = Entry(meter: meter, name: name, rssi: rssi, pin: pin, inRange: inRange, paired: paired) }
    }

    func setInRange(_ address: String, _ inRange: Bool) {
        state.withLock { $0[address]?.inRange = inRange }
    }

    func isPaired(_ address: String) -> Bool { state.withLock { $0[address]?.paired ?? false } }
    var calls: [String] { log.withLock { $0 } }

    func scan(timeout: Duration) async throws(MeterAccessError) -> [NearbyMeter] {
        log.withLock { $0.append("scan") }
        return state.withLock { s in
            s.values.filter(\.inRange).sorted { $0.rssi > $1.rssi }
                .map { NearbyMeter(address: $0.meter.address, name: $0.name, rssi: $0.rssi, paired: $0.paired) }
        }
    }

    func waitForMeter(address: String, timeout: Duration) async throws(MeterAccessError) -> NearbyMeter {
        log.withLock { $0.append("wait \(address)") }
        guard let e = state.withLock({ $0[address] }), e.inRange else {
            throw MeterAccessError(.notFound, "\(address) not seen within \(timeout)")
        }
        return NearbyMeter(address: address, name: e.name, rssi: e.rssi, paired: e.paired)
    }

    func connect(address: String, timeout: Duration) async throws(MeterAccessError) -> any MeterLink {
        log.withLock { $0.append("connect \(address)") }
        guard let e = state.withLock({ $0[address] }), e.inRange else {
            throw MeterAccessError(.notFound, "le-connection-abort-by-local")
        }
        return e.meter.connect()
    }

    func pair(address: String, passkey: UInt32, timeout: Duration) async throws(MeterAccessError) {
        log.withLock { $0.append("pair \(address)") }
        if pairingHangs.withLock({ $0 }) {
            try? await Task.sleep(for: timeout)
            throw MeterAccessError(.timeout, "AuthenticationTimeout")
        }
        try state.withLock { s throws(MeterAccessError) in
            guard let e = s[address], e.inRange else { throw MeterAccessError(.notFound, "not found") }
            guard e.pin == passkey else { throw MeterAccessError(.authenticationFailed, "AuthenticationFailed") }
            s[address]?.paired = true
        }
    }

    func forget(address: String) async throws(MeterAccessError) -> Bool {
        log.withLock { $0.append("forget \(address)") }
        return state.withLock { s in
            defer { s[address]?.paired = false }
            return s[address]?.paired ?? false
        }
    }
}
