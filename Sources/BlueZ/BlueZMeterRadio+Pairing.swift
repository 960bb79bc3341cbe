import GatewayCore
import Support

/// What the commands do with the radio: scan, wait for a meter, pair, forget.
extension BlueZMeterRadio {
    /// Connects to bluetoothd for a command and waits (briefly) for a powered adapter, `adapter` or the
    /// first one. Closing the radio stops discovery on that adapter.
    public static func open(waitingForAdapter adapter: String?, logger: Logger) async throws(GatewayFailure) -> BlueZMeterRadio {
        let client: BlueZClient
        do {
            client = try await BlueZClient.connect(logger: logger.with(label: "bluez"))
        } catch {
            throw GatewayFailure(.unavailable, "Bluetooth is not available (bluetoothd on the system bus): \(error)")
        }
        do {
            _ = try await client.waitForAdapter(named: adapter, powered: true, timeout: .seconds(5))
        } catch {
            await client.close()
            let which = adapter.map { "adapter \($0)" } ?? "a powered Bluetooth adapter"
            throw GatewayFailure(.unavailable, "no \(which): \(error.message)")
        }
        return BlueZMeterRadio(client: client, logger: logger, adapterName: adapter, discovery: .adapter(adapter))
    }

    static func accessError(_ error: BlueZError) -> MeterAccessError {
        switch error.pairingFailure {
        case .wrongPasskey?: return MeterAccessError(.authenticationFailed, error.description)
        case .refused?: return MeterAccessError(.pairingRefused, error.description)
        case .passkeyNeeded?: return MeterAccessError(.passkeyNeeded, error.description)
        case .personNeeded?: return MeterAccessError(.confirmationNeeded, error.description)
        case .numbersDiffer?: return MeterAccessError(.numbersDiffer, error.description)
        case .rejectedOnMeter?: return MeterAccessError(.rejectedOnMeter, error.description)
        case .noAnswer?: return MeterAccessError(.timeout, error.description)
        case .adapterNotReady?: return MeterAccessError(.adapterUnavailable, error.description)
        case .busy?, .other?: return MeterAccessError(.failed, error.description)
        case nil: break
        }
        switch error.name {
        case BlueZErrorNames.notReady?:
            return MeterAccessError(.adapterUnavailable, error.description)
        default:
            break
        }
        switch error.kind {
        case .notFound: return MeterAccessError(.notFound, error.message)
        case .timeout: return MeterAccessError(.timeout, error.message)
        case .notSupported: return MeterAccessError(.notAMeter, error.message)
        default: return MeterAccessError(.failed, error.description)
        }
    }

    public func scan(timeout: Duration) async throws(MeterAccessError) -> [NearbyMeter] {
        do {
            try await client.startDiscovery(adapterName: adapterName, uuids: [.glucoseService])
        } catch {
            throw Self.accessError(error)
        }
        try? await Task.sleep(for: timeout)
        // Read before stopping: bluetoothd takes the RSSI away when discovery ends, and a mirror that
        // is up to date by then (the stop's reply comes after those signals) would show nothing heard.
        let seen = await client.devices()
        _ = try? await client.stopDiscovery(adapterName: adapterName)
        return seen
            // Seen during this scan (BlueZ keeps an RSSI only for advertising devices) or connected now.
            .filter { $0.advertises(any: [.glucoseService]) && ($0.heard || $0.connected) }
            .sorted { ($0.rssi ?? -200) > ($1.rssi ?? -200) }
            .map { NearbyMeter(address: $0.address.uppercased(), name: $0.name, rssi: $0.rssi, paired: $0.paired) }
    }

    public func waitForMeter(address: String, timeout: Duration) async throws(MeterAccessError) -> NearbyMeter {
        if let known = await client.device(address: address), known.connected {
            return NearbyMeter(address: address, name: known.name, rssi: known.rssi, paired: known.paired)
        }
        do {
            try await client.startDiscovery(adapterName: adapterName, uuids: [.glucoseService])
        } catch {
            throw Self.accessError(error)
        }
        let device: DiscoveredDevice
        do {
            device = try await client.waitForDevice(address: address, timeout: timeout)
        } catch {
            _ = try? await client.stopDiscovery(adapterName: adapterName)
            if error.kind == .timeout {
                throw MeterAccessError(.notFound, "\(address) was not seen within \(timeout)")
            }
            throw Self.accessError(error)
        }
        // Scanning while connecting slows many controllers down.
        _ = try? await client.stopDiscovery(adapterName: adapterName)
        return NearbyMeter(address: address, name: device.name, rssi: device.rssi, paired: device.paired)
    }

    public func pair(address: String, input: PairingInput, timeout: Duration) async throws(MeterAccessError) -> PairingMethod? {
        var answers = PairingAgent.Answers(passkey: nil, confirm: input.confirmNumbers, show: input.showPasskey)
        if let pin = input.passkey { answers.passkey = { @Sendable _ in pin } }
        do {
            return try await client.pair(address: address, answers: answers, timeout: timeout)
        } catch {
            throw Self.accessError(error)
        }
    }

    public func forget(address: String) async throws(MeterAccessError) -> Bool {
        do {
            return try await client.removeDevice(address: address)
        } catch {
            throw Self.accessError(error)
        }
    }
}
