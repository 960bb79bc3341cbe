import Support
import Testing
import DBusKit
import Meters
import GatewayCore
import MeterSimulator
import TestSupport
@testable import BlueZ

/// `pair` for a meter that lost its bond, through the BlueZ radio against the stand-in, with BlueZ 5.66's
/// removal and with 5.82's: after the meter refused the stale key, bluetoothd 5.82 answers `RemoveDevice`
/// but keeps the object, `Paired=true` and the key until the next link ends (the bond-loss scenario on
/// trixie), and the gateway used to take that for a kept bond, connect with the stale key and give up.
@Suite(.timeLimit(.minutes(1))) struct PairAgainAfterBondLossTests {
    /// The state the bond-loss scenario reaches: paired, the meter forgot the bond, the gateway's
    /// connections refused at encryption until it was reported lost, and the store says re-pair needed.
    static func bondLost(deferredRemoval: Bool) async throws -> (StandInRig, MemoryReadingStore) {
        let rig = try await StandInRig(records: 3) {
            $0.disconnectedSignal = false
            $0.removalWaitsForNextLinkAfterAuthenticationFailure = deferredRemoval
        }
        let link = try await rig.connectedLink()
        await link.disconnect()
        try await rig.standIn.forgetBond(StandInRig.address)
        let retry = ConnectRetry(initial: .milliseconds(20), maximum: .milliseconds(40), attempts: 6)
        let error = await #expect(throws: MeterLinkError.self) {
            try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(20), retry: retry)
        }
        #expect(error?.kind == .bondLost)
        var info = MeterInfo(address: StandInRig.address, timeZone: "UTC")
        info.bondLostAt = 1_000
        info.bondLostMessage = error?.message
        return (rig, MemoryReadingStore(meters: [info]))
    }

    static func pairing(_ rig: StandInRig, _ store: MemoryReadingStore) -> MeterPairing {
        let radio = BlueZMeterRadio(client: rig.client, logger: .silent, adapterName: nil, discovery: .none)
        return MeterPairing(radio: radio, store: store, logger: .silent, advertiseTimeout: .seconds(10),
                            pairTimeout: .seconds(20), connectTimeout: .seconds(10))
    }

    static func pairCalls(_ rig: StandInRig) async throws -> Int {
        try await rig.callLog().filter { $0.hasPrefix("org.bluez.Device1.Pair ") }.count
    }

    @Test(arguments: [false, true]) func pairingAgainWithTheRightPinMakesTheMeterWorkAgain(deferredRemoval: Bool) async throws {
        let (rig, store) = try await Self.bondLost(deferredRemoval: deferredRemoval)
        let pairsBefore = try await Self.pairCalls(rig)
        let result = try await Self.pairing(rig, store).run(address: StandInRig.address, passkey: StandInRig.passkey, timeZone: "UTC")
        // Paired anew with the PIN, not "kept" the stale bond.
        #expect(!result.keptExistingBond)
        #expect(try await Self.pairCalls(rig) == pairsBefore + 1)
        #expect(result.meter.features != nil)
        #expect(try await store.meter(StandInRig.address)?.bondLostAt == nil)
        // The new bond works.
        let link = try await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(10))
        #expect(try await link.read(.glucoseFeature).count == 2)
        await link.disconnect()
        await rig.close()
    }

    /// The PIN is checked after a bond loss on 5.82 too: a wrong one is reported as such and the meter
    /// stays re-pair needed.
    @Test func aWrongPinAfterTheBondLossIsAWrongPin() async throws {
        let (rig, store) = try await Self.bondLost(deferredRemoval: true)
        let failure = await #expect(throws: GatewayFailure.self) {
            try await Self.pairing(rig, store).run(address: StandInRig.address, passkey: 111_111, timeZone: "UTC")
        }
        #expect(failure?.status == .failure)
        #expect(failure?.message.contains("wrong PIN") == true)
        #expect(try await store.meter(StandInRig.address)?.bondLostAt == 1_000)
        await rig.close()
    }

    /// The stand-in's 5.82 removal: after a refused key `RemoveDevice` answers and the object stays
    /// paired; the next link, refused again, ends with the object and its bond gone (discovery, still
    /// on, may show the advertising meter again at once, unpaired).
    @Test func standInKeepsARemovedDeviceUntilItsNextLinkEndsAfterARefusedKey() async throws {
        let (rig, _) = try await Self.bondLost(deferredRemoval: true)
        #expect(try await rig.client.removeDevice(address: StandInRig.address))
        #expect(await rig.client.device(address: StandInRig.address)?.paired == true)
        _ = try? await rig.client.connectMeter(address: StandInRig.address, timeout: .seconds(5), retry: ConnectRetry(attempts: 1))
        #expect(await waitUntil(5) { await rig.client.device(address: StandInRig.address)?.paired != true })
        await rig.close()
    }
}
