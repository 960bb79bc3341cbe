import GatewayCore
import GlucoseProfile
import Support

/// What pairing learned about a meter.
public struct PairingResult: Sendable, Equatable {
    public var meter: MeterInfo
    /// The meter keeps a single bond (Glucose Feature bit 10 clear): pairing the gateway may have
    /// un-paired the user's phone app.
    public var singleBond: Bool
    /// The meter was bonded with this adapter already: the bond was kept (and shown to work by an
    /// encrypted read), and the PIN given was not checked. BlueZ answers `Pair` on a bonded device with
    /// `AlreadyExists` without involving the meter, so a PIN cannot be checked without removing the bond.
    public var keptExistingBond: Bool = false
    /// The method the meter paired by; nil when the bond was kept.
    public var method: PairingMethod?
}

extension MeterInfo {
    /// The meter keeps a single bond (its Glucose Feature lacks Multiple Bond Supported): pairing the
    /// gateway may have unpaired the user's phone, and pairing a phone unpairs the gateway. False while
    /// the features are unknown.
    public var keepsSingleBond: Bool {
        guard let features else { return false }
        return !GlucoseFeatures(rawValue: UInt16(truncatingIfNeeded: features)).contains(.multipleBond)
    }
}

/// `pair`: waits for the meter to advertise (the user presses its Bluetooth button), pairs through the
/// gateway's agent by whichever method the meter uses (its PIN, numbers confirmed, or Just Works) and
/// trusts it, checks that it has the Glucose Service, reads its identity and stores it with its time zone.
public struct MeterPairing: Sendable {
    public var radio: any MeterRadio
    public var store: any ReadingStore
    public var logger: Logger
    public var now: @Sendable () -> UnixMillis
    /// How long the meter may take to start advertising.
    public var advertiseTimeout: Duration
    /// How long bonding may take (the agent alone may wait 60 s).
    public var pairTimeout: Duration
    public var connectTimeout: Duration

    public init(radio: any MeterRadio, store: any ReadingStore, logger: Logger, now: @escaping @Sendable () -> UnixMillis = SystemClock.now,
                advertiseTimeout: Duration = .seconds(60), pairTimeout: Duration = .seconds(90), connectTimeout: Duration = .seconds(30)) {
        self.radio = radio
        self.store = store
        self.logger = logger
        self.now = now
        self.advertiseTimeout = advertiseTimeout
        self.pairTimeout = pairTimeout
        self.connectTimeout = connectTimeout
    }

    /// Parses a meter PIN: exactly six digits.
    public static func passkey(_ text: String) -> UInt32? {
        guard text.utf8.count == 6, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt32(text)
    }

    /// Pairs with the meter's PIN (a meter that asks for numbers to be compared is refused).
    public func run(address: String, passkey: UInt32, timeZone: String) async throws(GatewayFailure) -> PairingResult {
        try await run(address: address, input: PairingInput(passkey: passkey), timeZone: timeZone)
    }

    public func run(address: String, input: PairingInput, timeZone: String) async throws(GatewayFailure) -> PairingResult {
        var nearby: NearbyMeter
        do {
            nearby = try await radio.waitForMeter(address: address, timeout: advertiseTimeout)
        } catch {
            throw Self.failure(error, address: address, step: "waiting for the meter")
        }
        if nearby.paired, let known = try? await store.meter(address), known.bondLostAt != nil {
            // The meter lost the bond (state re-pair needed): the key BlueZ keeps is useless; pair anew.
            // `dropStaleBond` returns only once BlueZ no longer shows the device paired, so the bond is
            // never taken for a kept one below.
            nearby = try await dropStaleBond(address)
        }
        var keptBond = nearby.paired
        var method: PairingMethod?
        if keptBond {
            logger.notice("\(address) is bonded already; keeping the bond (a PIN given is not checked)")
        } else {
            method = try await pair(address, input)
            keptBond = method == nil
        }

        var link: any MeterLink
        do {
            link = try await radio.connect(address: address, timeout: connectTimeout)
        } catch where error.kind == .bondLost && keptBond {
            // The kept bond no longer works (the meter forgot it): pair anew with the PIN given.
            nearby = try await dropStaleBond(address)
            keptBond = false
            method = try await pair(address, input)
            do {
                link = try await radio.connect(address: address, timeout: connectTimeout)
            } catch {
                throw Self.failure(MeterAccessError(connecting: error), address: address, step: "connecting after pairing")
            }
        } catch {
            throw Self.failure(MeterAccessError(connecting: error), address: address, step: "connecting after pairing")
        }
        let isMeter = await link.hasCharacteristic(.glucoseMeasurement)
        let hasRACP = await link.hasCharacteristic(.recordAccessControlPoint)
        guard isMeter, hasRACP else {
            await link.disconnect()
            _ = try? await radio.forget(address: address)
            throw GatewayFailure(.failure, "\(address) has no Glucose Service; it is not a glucose meter (its pairing was removed)")
        }
        var info = MeterInfo(address: address, timeZone: timeZone)
        info.name = nearby.name
        var identity = MeterIdentity()
        let manufacturer = await Self.readString(link, .manufacturerName, into: &identity)
        let model = await Self.readString(link, .modelNumber, into: &identity)
        let serial = await Self.readString(link, .serialNumber, into: &identity)
        let firmware = await Self.readString(link, .firmwareRevision, into: &identity)
        info.manufacturer = manufacturer
        info.model = model
        info.serial = serial
        info.firmware = firmware
        info.rawIdentity = identity.raw
        let feature = try? await link.read(.glucoseFeature)
        if let bytes = feature, let features = try? GlucoseFeatures(bytes: bytes) {
            info.features = Int(features.rawValue)
        }
        await link.disconnect()
        if keptBond, feature == nil {
            // The Glucose Feature needs the bond: a meter that forgot it (paired with a phone since, or reset) refuses it.
            throw GatewayFailure(.failure, "\(address) is paired with this gateway, but the bond no longer works (the meter may have been paired with another device or reset); run 'glucose-gateway unpair \(address)', then pair again")
        }

        let at = now()
        info.pairedAt = at
        info.lastSeen = at
        do {
            // Keep the bookkeeping of a meter paired before (highest sequence, last sync).
            if let old = try await store.meter(address) {
                info.highestSequence = old.highestSequence
                info.lastSync = old.lastSync
                info.lastClockSkewSeconds = old.lastClockSkewSeconds
            }
            try await store.saveMeter(info)
            try await store.log(GatewayEvent(at: at, kind: .paired, meterAddress: address,
                                             message: "paired \(info.model ?? info.name ?? "meter"), time zone \(timeZone)"))
        } catch {
            throw GatewayFailure(.failure, "paired \(address) but could not store it: \(error)")
        }
        return PairingResult(meter: info, singleBond: info.keepsSingleBond, keptExistingBond: keptBond, method: method)
    }

    /// Pairs; nil when BlueZ turned out to be bonded with the meter already.
    private func pair(_ address: String, _ input: PairingInput) async throws(GatewayFailure) -> PairingMethod? {
        do {
            let method = try await radio.pair(address: address, input: input, timeout: pairTimeout)
            if let method { logger.info("\(address) paired by \(method.rawValue)") }
            return method
        } catch {
            throw Self.failure(error, address: address, step: "pairing")
        }
    }

    /// Removes the key BlueZ keeps for a meter that lost the bond, then waits for the meter to be seen
    /// again (removing the device drops BlueZ's object for it). Returns the meter as BlueZ shows it
    /// without the bond, or throws: a meter still shown paired here would be taken for a kept bond and
    /// connected with the stale key.
    ///
    /// BlueZ 5.82 (Raspberry Pi OS trixie) may not remove the device when asked: after the link that the
    /// meter ended by refusing the key, bluetoothd still counts the device's profiles as connected, so
    /// `RemoveDevice` takes its "connected" path (it replies and leaves the removal to the end of the
    /// link) and the object, `Paired=true` and the key stay until the next link to the meter ends. So
    /// when the device still says paired, one connection attempt is made: the meter refuses the stale
    /// key, that link ends and bluetoothd carries out the removal. Each step is bounded (the connection
    /// by `connectTimeout`, the removal by the radio, the meter by `advertiseTimeout`) and none repeats.
    private func dropStaleBond(_ address: String) async throws(GatewayFailure) -> NearbyMeter {
        logger.notice("\(address) lost its bond with this gateway; removing the stale key and pairing again with the PIN")
        try await forgetStaleBond(address)
        let nearby = try await waitAgain(address)
        guard nearby.paired else { return nearby }
        logger.notice("\(address): bluetoothd still holds the stale key (it removes it when the next link ends); connecting once so it does")
        do {
            let link = try await radio.connect(address: address, timeout: connectTimeout)
            // The meter took the key after all; the removal asked for still stands (on 5.82 it happens
            // as this link ends), and the PIN given is checked below like any other.
            await link.disconnect()
        } catch {
            logger.info("\(address): the connection with the stale key failed as expected: \(error.message)")
        }
        // Gone already in the usual case (then this returns at once); else asked again, now the link is down.
        try await forgetStaleBond(address)
        let again = try await waitAgain(address)
        guard !again.paired else {
            throw GatewayFailure(.unavailable, "bluetoothd did not remove the stale bond of \(address); restart bluetoothd (systemctl restart bluetooth), then pair again: glucose-gateway pair \(address) --pin PIN")
        }
        return again
    }

    private func forgetStaleBond(_ address: String) async throws(GatewayFailure) {
        do {
            _ = try await radio.forget(address: address)
        } catch {
            throw Self.failure(error, address: address, step: "removing the stale bond")
        }
    }

    private func waitAgain(_ address: String) async throws(GatewayFailure) -> NearbyMeter {
        do {
            return try await radio.waitForMeter(address: address, timeout: advertiseTimeout)
        } catch {
            throw Self.failure(error, address: address, step: "waiting for the meter")
        }
    }

    static func failure(_ error: MeterAccessError, address: String, step: String) -> GatewayFailure {
        switch error.kind {
        case .authenticationFailed:
            return GatewayFailure(.failure, "pairing with \(address) failed: wrong PIN (the meter refused the passkey); check the PIN on the meter's display and try again")
        case .pairingRefused:
            return GatewayFailure(.failure, "pairing with \(address) failed: the meter refused or cancelled the pairing before any PIN or number was asked; put it in pairing mode (usually: hold its Bluetooth button) and try again (\(error.message))")
        case .passkeyNeeded:
            return GatewayFailure(.usage, "pairing with \(address) needs the PIN the meter shows: run glucose-gateway pair \(address) --pin PIN with the six digits on its display")
        case .confirmationNeeded:
            return GatewayFailure(.usage, "pairing with \(address) needs a person at a terminal, to compare six digits with the meter's screen (or to type digits on the meter): run pair on a terminal; to accept compared digits without one, add --confirm")
        case .numbersDiffer:
            return GatewayFailure(.failure, "pairing with \(address) stopped: the numbers did not match the meter's, so another device may have answered; not paired, try again")
        case .rejectedOnMeter:
            return GatewayFailure(.failure, "pairing with \(address) failed: the meter did not accept the numbers (No pressed on the meter, or they differed there); try again and confirm on the meter")
        case .notFound:
            return GatewayFailure(.unavailable, "\(address) was not seen while \(step): press the meter's Bluetooth button so it advertises, then try again")
        case .timeout where step == "pairing":
            // Not a wrong PIN: nothing came back in time (a stalled pairing, a link that dropped).
            return GatewayFailure(.unavailable, "pairing with \(address) failed: the meter did not answer in time; press its Bluetooth button and try again (\(error.message))")
        case .timeout:
            return GatewayFailure(.unavailable, "\(step) \(address) timed out: \(error.message)")
        case .adapterUnavailable:
            return GatewayFailure(.unavailable, "Bluetooth adapter unavailable: \(error.message)")
        case .notAMeter:
            return GatewayFailure(.failure, "\(address) is not a glucose meter: \(error.message)")
        case .bondLost:
            return GatewayFailure(.unavailable, "\(step) \(address) failed: \(error.message); pair it again: glucose-gateway pair \(address) --pin PIN")
        case .failed:
            return GatewayFailure(.failure, "\(step) \(address) failed: \(error.message)")
        }
    }

    /// A Device Information string, cleaned (`IdentityText`); the bytes go into `identity.raw` when cleaning
    /// changed them.
    static func readString(_ link: any MeterLink, _ uuid: GATTUUID, into identity: inout MeterIdentity) async -> String? {
        guard await link.hasCharacteristic(uuid), let bytes = try? await link.read(uuid) else { return nil }
        let (text, changed) = IdentityText.clean(bytes)
        if changed, let field = MeterIdentity.field(uuid) { identity.raw[field] = IdentityText.raw(bytes) }
        return text
    }
}
