import GatewayCore
import Support
import Testing
import TestSupport
@testable import Meters

@Suite("Pairing and sync orchestration", .timeLimit(.minutes(1)))
struct MeterPairingTests {
    static func setup(features: UInt16 = 0x0400) -> (FakeMeter, FakeMeterRadio, MemoryReadingStore) {
        var script = FakeMeterScript(records: (UInt16(0)...4).map { FakeRecord.glucose($0) })
        script.features = features
        let meter = FakeMeter(script: script)
        let radio = FakeMeterRadio()
        radio.add(meter, name: "meter+01234567", pin: 654_321)
        return (meter, radio, MemoryReadingStore())
    }

    @Test func rightPinPairsAndStoresTheIdentity() async throws {
        let (meter, radio, store) = Self.setup()
        let result = try await MeterPairing(radio: radio, store: store, logger: .silent, now: { 42 })
            .run(address: meter.address, passkey: 654_321, timeZone: "Europe/Berlin")
        #expect(radio.isPaired(meter.address))
        #expect(!result.singleBond)
        let row = try #require(try await store.meter(meter.address))
        #expect(row.timeZone == "Europe/Berlin")
        #expect(row.serial == "SN0001")
        #expect(row.manufacturer == "Acme Diagnostics")
        #expect(row.name == "meter+01234567")
        #expect(row.features == 0x0400)
        #expect(row.pairedAt == 42)
        #expect(store.events.contains { $0.kind == .paired })
        #expect(meter.callLog.last == "disconnect")
        #expect(radio.calls.prefix(2) == ["wait \(meter.address)", "pair \(meter.address)"])
    }

    @Test func singleBondMeterIsReported() async throws {
        let (meter, radio, store) = Self.setup(features: 0x0003)
        let result = try await MeterPairing(radio: radio, store: store, logger: .silent)
            .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
        #expect(result.singleBond)
    }

    @Test func wrongPinFailsWithStatusOneAndStoresNothing() async throws {
        let (meter, radio, store) = Self.setup()
        do {
            _ = try await MeterPairing(radio: radio, store: store, logger: .silent)
                .run(address: meter.address, passkey: 111_111, timeZone: "UTC")
            Issue.record("expected a failure")
        } catch {
            #expect(error.status == .failure)
            #expect(error.message.contains("wrong PIN"))
        }
        #expect(try await store.meter(meter.address) == nil)
        #expect(!radio.isPaired(meter.address))
    }

    @Test func aPairingThatTimesOutIsNotCalledAWrongPin() async throws {
        let (meter, radio, store) = Self.setup()
        radio.pairingHangs.withLock { $0 = true }
        let pairing = Task {
            try await MeterPairing(radio: radio, store: store, logger: .silent, pairTimeout: .seconds(30))
                .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
        }
        // The pairing waits on the radio's clock for its timeout; the test moves the clock past it.
        #expect(await waitUntil(10) { radio.clock.sleeping == 1 })
        radio.clock.advance(by: .seconds(30))
        do {
            _ = try await pairing.value
            Issue.record("expected a failure")
        } catch let error as GatewayFailure {
            #expect(error.status == .unavailable)
            #expect(error.message.contains("the meter did not answer in time; press its Bluetooth button and try again"))
            #expect(!error.message.contains("wrong PIN"))
        } catch {
            Issue.record("unexpected \(error)")
        }
        #expect(try await store.meter(meter.address) == nil)
    }

    @Test func aBondedMeterKeepsItsBondAndThePinIsNotChecked() async throws {
        let (meter, radio, store) = Self.setup()
        radio.add(meter, name: "meter+01234567", pin: 654_321, paired: true)
        let result = try await MeterPairing(radio: radio, store: store, logger: .silent)
            .run(address: meter.address, passkey: 111_111, timeZone: "UTC")
        #expect(result.keptExistingBond)
        #expect(!radio.calls.contains("pair \(meter.address)"))
        #expect(try await store.meter(meter.address) != nil)
    }

    @Test func aBondedMeterThatForgotTheBondIsReported() async throws {
        let (meter, radio, store) = Self.setup()
        radio.add(meter, name: "meter+01234567", pin: 654_321, paired: true)
        meter.update { $0.characteristics.remove(.glucoseFeature) }
        do {
            _ = try await MeterPairing(radio: radio, store: store, logger: .silent)
                .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
            Issue.record("expected a failure")
        } catch {
            #expect(error.status == .failure)
            #expect(error.message.contains("the bond no longer works"))
        }
        #expect(try await store.meter(meter.address) == nil)
    }

    @Test func aKeptBondRefusedAtConnectionIsReplacedByPairingWithThePin() async throws {
        let (meter, radio, store) = Self.setup()
        radio.add(meter, name: "meter+01234567", pin: 654_321, paired: true)
        radio.setForgotBond(meter.address, true)
        let result = try await MeterPairing(radio: radio, store: store, logger: .silent)
            .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
        #expect(!result.keptExistingBond)
        #expect(radio.calls.filter { $0.hasSuffix(meter.address) } == [
            "wait \(meter.address)", "connect \(meter.address)", "forget \(meter.address)", "wait \(meter.address)",
            "pair \(meter.address)", "connect \(meter.address)",
        ])
        #expect(try await store.meter(meter.address)?.bondLostAt == nil)
    }

    @Test func pairingAMeterInStateRepairNeededPairsAnewAndClearsIt() async throws {
        let (meter, radio, store) = Self.setup()
        radio.add(meter, name: "meter+01234567", pin: 654_321, paired: true)
        var info = MeterInfo(address: meter.address, timeZone: "UTC")
        info.pairedAt = 1
        info.highestSequence = 3
        info.bondLostAt = 5
        info.bondLostMessage = "refused"
        try await store.saveMeter(info)
        let result = try await MeterPairing(radio: radio, store: store, logger: .silent)
            .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
        // The stale key is removed before anything else: the meter has no use for it.
        #expect(Array(radio.calls.prefix(4)) == ["wait \(meter.address)", "forget \(meter.address)", "wait \(meter.address)", "pair \(meter.address)"])
        #expect(!result.keptExistingBond)
        let row = try #require(try await store.meter(meter.address))
        #expect(row.bondLostAt == nil && row.bondLostMessage == nil)
        #expect(row.highestSequence == 3)
    }

    @Test func syncOfAMeterThatLostItsBondNamesTheFixAndRecordsTheState() async throws {
        let (meter, radio, store) = Self.setup()
        radio.add(meter, name: "meter+01234567", pin: 654_321, paired: true)
        radio.setForgotBond(meter.address, true)
        try await store.saveMeter(MeterInfo(address: meter.address, timeZone: "UTC"))
        let sync = MeterSession(radio: radio, download: MeterDownload(store: store, logger: .silent, now: { 77 }))
        let result = await sync.sync(MeterInfo(address: meter.address, timeZone: "UTC"), wait: .zero)
        guard case .unreachable(let error) = result.outcome else { Issue.record("expected a refused connection"); return }
        #expect(error.kind == .bondLost)
        #expect(error.message == "\(meter.address) refused the encryption with this gateway's key 3 times in a row")
        #expect(result.summary.hasSuffix("; pair it again: glucose-gateway pair \(meter.address) --pin PIN"))
        #expect(try await store.meter(meter.address)?.bondLostAt == 77)
        #expect(store.events.filter { $0.kind == .bondLost }.count == 1)

        // The bond works after all (the meter came back with it): a session clears the state.
        radio.setForgotBond(meter.address, false)
        let stored = try #require(try await store.meter(meter.address))
        let again = await sync.sync(stored, wait: .zero)
        #expect(again.isComplete)
        #expect(try await store.meter(meter.address)?.bondLostAt == nil)
    }

    @Test func syncOfAMeterInStateRepairNeededThatCannotBeReachedStillNamesTheFix() async throws {
        let (meter, radio, store) = Self.setup()
        radio.add(meter, name: "meter+01234567", pin: 654_321, paired: true)
        radio.setForgotBond(meter.address, true)
        // The meter advertises in bursts: this connection is refused once, then runs into its pause.
        radio.setAdvertisesInBursts(meter.address, true)
        var info = MeterInfo(address: meter.address, timeZone: "UTC")
        info.bondLostAt = 5
        info.bondLostMessage = "\(meter.address) refused the encryption with this gateway's key"
        try await store.saveMeter(info)
        let sync = MeterSession(radio: radio, download: MeterDownload(store: store, logger: .silent, now: { 77 }))
        let result = await sync.sync(info, wait: .zero)
        guard case .unreachable(let error) = result.outcome else { Issue.record("expected an unreachable meter"); return }
        #expect(error.kind == .bondLost)
        #expect(result.summary == "\(meter.address): re-pair needed: \(meter.address) refused the encryption with this gateway's key; pair it again: glucose-gateway pair \(meter.address) --pin PIN")
        // The first finding stays.
        #expect(try await store.meter(meter.address)?.bondLostAt == 5)
        // Out of range altogether: the same.
        radio.setInRange(meter.address, false)
        let unseen = await sync.sync(info, wait: .seconds(1))
        #expect(unseen.summary.hasPrefix("\(meter.address): re-pair needed: "))
    }

    @Test func meterNotAdvertisingIsUnavailable() async throws {
        let (meter, radio, store) = Self.setup()
        radio.setInRange(meter.address, false)
        await #expect(throws: GatewayFailure.self) {
            _ = try await MeterPairing(radio: radio, store: store, logger: .silent)
                .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
        }
        do {
            _ = try await MeterPairing(radio: radio, store: store, logger: .silent)
                .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
        } catch {
            #expect(error.status == .unavailable)
        }
    }

    @Test func deviceWithoutGlucoseServiceIsRefusedAndForgotten() async throws {
        let (meter, radio, store) = Self.setup()
        meter.update { $0.characteristics = [.manufacturerName] }
        do {
            _ = try await MeterPairing(radio: radio, store: store, logger: .silent)
                .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
            Issue.record("expected a failure")
        } catch {
            #expect(error.message.contains("not a glucose meter"))
        }
        #expect(!radio.isPaired(meter.address))
        #expect(try await store.meter(meter.address) == nil)
    }

    @Test(arguments: [("123456", UInt32(123_456)), ("000042", 42), ("12345", nil), ("1234567", nil), ("12a456", nil), ("", nil), ("-12345", nil), ("１２３４５６", nil)] as [(String, UInt32?)])
    func pins(_ text: String, _ expected: UInt32?) {
        #expect(MeterPairing.passkey(text) == expected)
    }

    @Test(arguments: [
        ("aa:bb:cc:dd:ee:ff", "AA:BB:CC:DD:EE:FF"), ("AA-BB-CC-DD-EE-01", "AA:BB:CC:DD:EE:01"),
        ("AA:BB:CC:DD:EE", nil), ("AA:BB:CC:DD:EE:GG", nil), ("AABBCCDDEEFF", nil), ("AA:BB:CC:DD:EE:FFF", nil), ("", nil),
    ] as [(String, String?)])
    func addresses(_ text: String, _ expected: String?) {
        #expect(MeterAddress.normalize(text) == expected)
    }

    @Test func syncDownloadsAReachableMeter() async throws {
        let (meter, radio, store) = Self.setup()
        let info = MeterInfo(address: meter.address, timeZone: "UTC")
        try await store.saveMeter(info)
        let sync = MeterSession(radio: radio, download: MeterDownload(store: store, logger: .silent))
        let result = await sync.sync(info, wait: .seconds(1))
        #expect(result.isComplete)
        #expect(store.readings.count == 5)
        #expect(result.summary == "\(meter.address): 5 new readings")
        #expect(store.events.contains { $0.kind == .downloadFinished })
    }

    @Test func syncReportsAnUnreachableMeter() async throws {
        let (meter, radio, store) = Self.setup()
        radio.setInRange(meter.address, false)
        let sync = MeterSession(radio: radio, download: MeterDownload(store: store, logger: .silent))
        let result = await sync.sync(MeterInfo(address: meter.address, timeZone: "UTC"), wait: .zero)
        #expect(!result.isComplete)
        #expect(result.summary.contains("not reachable"))
        #expect(store.readings.isEmpty)
    }

    @Test func syncSummaryNamesAnInterruption() async throws {
        let (meter, radio, store) = Self.setup()
        meter.update { $0.disconnectAfterRecords = 2 }
        let sync = MeterSession(radio: radio, download: MeterDownload(store: store, logger: .silent))
        let result = await sync.sync(MeterInfo(address: meter.address, timeZone: "UTC"), wait: .zero)
        #expect(!result.isComplete)
        #expect(result.summary.contains("2 new readings; interrupted"))
    }

    /// Only Glucose Feature bit 10 (Multiple Bond Supported) counts; unknown features warn of nothing.
    @Test(arguments: [(nil, false), (0x0400, false), (0xFFFF, false), (0x0000, true), (0xFBFF, true), (0x1_0000, true)] as [(Int?, Bool)])
    func singleBond(_ features: Int?, _ expected: Bool) {
        var info = MeterInfo(address: "AA:BB:CC:DD:EE:01", timeZone: "UTC")
        info.features = features
        #expect(info.keepsSingleBond == expected)
    }
}
